package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// peerKey names a pool of dialed connections: the node expected at an
// address, and the address. Connections dialed for one node are never used
// for another, even at the same address: each was checked for its node.
type peerKey struct{ node, addr string }

// peerConns holds the dialed connections to one node at one address. A slot holds
// the connection new frames go to; a failed or retired connection in a slot
// is replaced lazily by the next frame for that slot.
type peerConns struct {
	slots []atomic.Pointer[conn]
	next  atomic.Uint32 // round-robin cursor when ConnsPerPeer > 1
}

// enqueue queues a frame to addr on a pooled connection, dialing one if
// needed. If the chosen connection turns out to have failed (or retired)
// before the frame was queued, nothing was sent, so it tries once more on a
// fresh connection.
func (t *TCP) enqueue(node, addr string, typ byte, body []byte, cl *call) (*conn, uint64, error) {
	key := peerKey{node, addr}
	for attempt := 0; ; attempt++ {
		c, err := t.getConn(key)
		if err != nil {
			return nil, 0, err
		}
		id, err := c.enqueue(typ, 0, body, cl, 0)
		if err == nil {
			return c, id, nil
		}
		switch {
		case errors.Is(err, ErrQueueFull) || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnreachable):
			return nil, 0, err
		case attempt > 0:
			// A brand-new connection failed before our frame was queued:
			// nothing was sent, which is what ErrUnreachable says.
			return nil, 0, fmt.Errorf("%w: %s: %w", ErrUnreachable, addr, err)
		}
	}
}

// getConn returns a usable dialed connection to key, starting a new one
// if the slot's connection is missing, failed or idle for too long. The
// common case takes only a read lock and two atomic loads.
func (t *TCP) getConn(key peerKey) (*conn, error) {
	t.mu.RLock()
	p, closed := t.peers[key], t.closed
	t.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if p == nil {
		p = t.addPeer(key)
	}
	slot := &p.slots[0]
	if n := uint32(len(p.slots)); n > 1 {
		slot = &p.slots[p.next.Add(1)%n]
	}
	now := t.now()
	if c := slot.Load(); c != nil && c.usable(now) {
		return c, nil
	}
	return t.replaceConn(slot, key, now)
}

func (t *TCP) addPeer(key peerKey) *peerConns {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[key]
	if p == nil {
		p = &peerConns{slots: make([]atomic.Pointer[conn], t.cfg.ConnsPerPeer)}
		t.peers[key] = p
	}
	return p
}

// replaceConn puts a new connection in slot unless another goroutine did
// so first. An idle predecessor is retired rather than closed: a call may
// still be waiting on it.
func (t *TCP) replaceConn(slot *atomic.Pointer[conn], key peerKey, now int64) (*conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	old := slot.Load()
	if old != nil {
		if old.usable(now) {
			return old, nil
		}
		if !old.dead.Load() {
			old.retire()
		}
	}
	c := newConn(t, true, key.addr, nil)
	c.node = key.node
	v := t.helloVersion(key.node)
	c.answered = v == helloV1 // a listener answers a later hello
	c.queue = appendFrame(c.queue, frameHello, 0, t.hellos[v-1])
	c.signal() // the queue is not empty: frames queued next will not signal
	c.lastSend.Store(now)
	// Inline version of track: we already hold mu.
	t.conns[c] = struct{}{}
	t.wg.Add(1)
	go c.dialAndServe()
	slot.Store(c)
	return c, nil
}

// dialAndServe connects, then becomes the connection's writer after
// starting its reader. Frames queued meanwhile (the hello first) go out in
// the first write.
func (c *conn) dialAndServe() {
	defer c.t.wg.Done()
	nc, err := c.t.dial(c.node, c.addr)
	if err != nil {
		c.t.dialFailures.Add(1)
		c.fail(fmt.Errorf("%w: %s: %w", ErrUnreachable, c.addr, err))
		return
	}
	c.mu.Lock()
	if c.err != nil { // closed while dialing
		c.mu.Unlock()
		_ = nc.Close()
		return
	}
	c.nc = nc
	c.mu.Unlock()

	c.t.wg.Add(1) // we are counted, so this cannot race with Close's Wait
	go c.readReplies()
	c.writeLoop()
}

// dial opens a connection to node at addr within DialTimeout (TLS
// handshake included). With TLS the listener's certificate must vouch for
// node (unless node is empty), as a dialer's must for the name in its
// hello: otherwise anyone holding a certificate of the mesh's CA who gets
// itself dialed (by poisoning an address book, say) could answer in any
// node's name.
func (t *TCP) dial(node, addr string) (net.Conn, error) {
	t.dials.Add(1)
	ctx, cancel := context.WithTimeout(t.dialCtx, t.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	setNoDelay(nc)
	if t.cfg.TLS == nil {
		return nc, nil
	}
	cfg := t.cfg.TLS
	if cfg.ServerName == "" {
		// Verify the peer's certificate against the node we dial (its
		// name is a DNS SAN of its certificate), or failing a node,
		// against the host we dialed, as tls.Dial does.
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		if node != "" {
			host = node
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		var wrongHost x509.HostnameError
		if node != "" && errors.As(err, &wrongHost) {
			// crypto/tls checked the certificate against node itself.
			return nil, fmt.Errorf("%w: tls handshake: dialed %q: %w", ErrIdentity, node, err)
		}
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	if node != "" {
		if err := t.verifyListener(node, tc); err != nil {
			_ = nc.Close()
			return nil, err
		}
	}
	return tc, nil
}

// verifyListener checks that the certificate a listener presented vouches
// for node, by the rule the listener applies to dialers' hellos.
func (t *TCP) verifyListener(node string, tc *tls.Conn) error {
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return fmt.Errorf("%w: the listener presented no certificate, %q expected", ErrIdentity, node)
	}
	verify := t.cfg.VerifyPeerName
	if verify == nil {
		verify = verifyPeerNameBySAN
	}
	if err := verify(node, certs[0]); err != nil {
		return fmt.Errorf("%w: dialed %q, the listener's certificate does not name it: %w", ErrIdentity, node, err)
	}
	return nil
}

// disarmFrameDeadline removes the frame deadline of a dialed connection,
// which waits between frames for as long as it takes. It reports false, and
// fails the connection, if that is impossible.
func (c *conn) disarmFrameDeadline() bool {
	if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
		c.abort(fmt.Errorf("transport: read: %w", err), true)
		return false
	}
	return true
}

// setNoDelay turns off Nagle's algorithm: the writer already coalesces
// frames, and delaying a lone small request would cost a round trip.
func setNoDelay(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // Go's default already; failure only costs latency
	}
}

// readReplies is the reader of a dialed connection: it matches replies to
// pending calls by id. A reply nobody waits for (its caller gave up) is
// skipped without being buffered. Anything but a reply is a protocol
// violation that closes the connection.
func (c *conn) readReplies() {
	defer c.t.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	if !c.answered && !c.readAnswer(br) {
		return
	}
	for {
		// No deadline between frames: a dialed connection waits for
		// replies as long as its calls do, and the listener closes it once
		// idle. Within a frame, FrameTimeout applies.
		h, framed, err := c.nextFrame(br)
		if err != nil {
			c.readFailed(err, false, framed)
			return
		}
		c.lastReply.Store(c.t.now())
		c.silent.Store(0)
		if h.typ != frameReply && h.typ != frameError {
			c.abort(fmt.Errorf("%w: frame type %d from a listener", ErrMalformedFrame, h.typ), true)
			return
		}
		cl, drained := c.takePending(h.id)
		if cl == nil {
			if _, err := br.Discard(h.bodyLen); err != nil {
				c.readFailed(noEOF(err), false, framed)
				return
			}
			if framed && !c.disarmFrameDeadline() {
				return
			}
			continue
		}
		if !c.reserveBody(h.bodyLen) {
			cl.deliver(result{err: fmt.Errorf("%w: %s: no room for the reply: %w", ErrConnClosed, c.addr, ErrBudget)})
			return
		}
		body, err := readBody(br, h.bodyLen)
		if err != nil {
			c.t.budget.release(h.bodyLen)
			cl.deliver(result{err: fmt.Errorf("%w: %s: reading reply: %w", ErrConnClosed, c.addr, err)})
			c.readFailed(err, false, framed)
			return
		}
		if h.typ == frameError {
			cl.deliver(result{err: &RemoteError{Addr: c.addr, Message: string(body)}})
		} else {
			cl.deliver(result{body: body})
		}
		c.t.budget.release(h.bodyLen) // handed to its caller
		if drained {
			c.signal()
		}
		if framed && !c.disarmFrameDeadline() {
			return
		}
	}
}

// readAnswer reads the hello a listener answers a version-2 hello with,
// within HandshakeTimeout, and has CheckHello judge it. It reports false,
// having failed the connection, if the answer is missing, malformed or
// refused.
func (c *conn) readAnswer(br *bufio.Reader) bool {
	timeout := c.t.cfg.HandshakeTimeout
	if err := c.nc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		c.abort(fmt.Errorf("transport: read: %w", err), true)
		return false
	}
	h, err := readFrameHeader(br, &c.scratch, c.t.cfg.MaxFrameSize)
	var body []byte
	switch {
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w: %s closed the connection instead of answering the hello (a listener that predates hello version 2?)", ErrHandshake, c.addr)
	case isTimeout(err):
		err = fmt.Errorf("%w: no answer to the hello within %v: %w", ErrHandshake, timeout, ErrTimeout)
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrHandshake, err)
	case h.typ != frameHello:
		err = fmt.Errorf("%w: %w: first frame from the listener has type %d, want its hello", ErrHandshake, ErrMalformedFrame, h.typ)
	case h.bodyLen > maxHelloBody:
		err = fmt.Errorf("%w: %w: hello of %d bytes", ErrHandshake, ErrMalformedFrame, h.bodyLen)
	default:
		if body, err = readBody(br, h.bodyLen); err != nil {
			err = fmt.Errorf("%w: %w", ErrHandshake, err)
		}
	}
	if err != nil {
		c.abort(err, true)
		return false
	}
	hl, err := parseHello(body)
	if err == nil && hl.version < helloV2 {
		err = fmt.Errorf("%w: the listener answered with a hello of version %d", ErrMalformedFrame, hl.version)
	}
	if err == nil && c.t.cfg.CheckHello != nil {
		peer := c.node
		if peer == "" {
			peer = hl.name
		}
		err = c.t.cfg.CheckHello(peer, int(hl.version), hl.payload)
	}
	if err != nil {
		c.abort(fmt.Errorf("%w: %w", ErrHandshake, err), true)
		return false
	}
	return c.disarmFrameDeadline()
}
