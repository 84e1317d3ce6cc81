package transport

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

const (
	// Accept errors other than a closed listener (out of file descriptors,
	// usually) are retried after a pause that doubles up to a limit, as
	// net/http does, instead of spinning or giving up.
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts connections until the listener is closed.
func (t *TCP) acceptLoop() {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			t.report(t.addr, fmt.Errorf("transport: accept: %w", err))
			pause := time.NewTimer(backoff)
			select {
			case <-pause.C:
				continue
			case <-t.done:
				pause.Stop()
				return
			}
		}
		backoff = 0
		setNoDelay(nc)
		if t.cfg.TLS != nil {
			// The TLS handshake runs inside the first read, under the
			// handshake deadline set by serve.
			nc = tls.Server(nc, t.cfg.TLS)
		}
		c := newConn(t, false, nc.RemoteAddr().String(), nc)
		if err := t.track(c); err != nil {
			_ = nc.Close()
			if errors.Is(err, ErrClosed) {
				return
			}
			t.report(c.addr, err)
			continue
		}
		go c.serve()
	}
}

// serve is the reader of an accepted connection. It checks the hello, then
// starts the writer and runs the handler inline for each frame: handlers
// are required to be fast, and running them here saves a goroutine hand-off
// per request.
func (c *conn) serve() {
	defer c.t.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	hl, err := c.readHello(br)
	if err == nil {
		err = c.checkIdentity(hl.name)
	}
	if err != nil {
		c.abort(err, true)
		return
	}
	name := hl.name
	c.label = name // before the writer starts: it reads label
	if err := c.answerHello(hl); err != nil {
		c.abort(err, true)
		return
	}
	if err := c.t.admit(c, name); err != nil {
		c.abort(err, !errors.Is(err, ErrClosed))
		return
	}
	c.t.wg.Add(1) // we are counted, so this cannot race with Close's Wait
	go func() {
		defer c.t.wg.Done()
		c.writeLoop()
	}()

	idle := c.t.cfg.IdleTimeout
	// Re-arming a deadline per frame costs a timer update; re-arm only
	// after an eighth of the idle time has passed, so a connection is
	// closed after between 7/8 and 1 IdleTimeout of silence.
	armed := time.Now()
	if err := c.nc.SetReadDeadline(armed.Add(idle)); err != nil {
		c.abort(err, true)
		return
	}
	for {
		// Stop reading while the peer leaves too many replies unread. The
		// peer's silence while we do not read is ours: re-arm the idle
		// deadline after a wait.
		if waited, ok := c.waitForRoom(); !ok {
			return
		} else if waited {
			armed = time.Now()
			if err := c.nc.SetReadDeadline(armed.Add(idle)); err != nil {
				c.abort(err, true)
				return
			}
		}
		h, framed, err := c.nextFrame(br)
		if err != nil {
			c.readFailed(err, true, framed)
			return
		}
		if (h.typ == frameRequest || h.typ == frameMessage) && !c.reserveBody(h.bodyLen) {
			return
		}
		switch h.typ {
		case frameRequest:
			if !c.handleRequest(br, h, framed) {
				return
			}
		case frameMessage:
			body, err := readBody(br, h.bodyLen)
			if err != nil {
				c.t.budget.release(h.bodyLen)
				c.readFailed(err, true, framed)
				return
			}
			c.t.cfg.Handler.HandleMessage(name, body)
			c.t.budget.release(h.bodyLen)
		default:
			c.abort(fmt.Errorf("%w: frame type %d from a dialer", ErrMalformedFrame, h.typ), true)
			return
		}
		// A frame deadline replaced the idle one: restore it.
		if now := time.Now(); framed || now.Sub(armed) > idle/8 {
			armed = now
			if err := c.nc.SetReadDeadline(now.Add(idle)); err != nil {
				c.abort(err, true)
				return
			}
		}
	}
}

// readHello reads the first frame, which must be a valid hello arriving
// within HandshakeTimeout (TLS handshake included).
func (c *conn) readHello(br *bufio.Reader) (hello, error) {
	timeout := c.t.cfg.HandshakeTimeout
	// Both directions: a TLS handshake writes too, and so does the answer
	// to a version-2 hello. The writer moves the write deadline before its
	// first write.
	if err := c.nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return hello{}, err
	}
	h, err := readFrameHeader(br, &c.scratch, c.t.cfg.MaxFrameSize)
	switch {
	case isTimeout(err):
		return hello{}, fmt.Errorf("%w: no hello within %v: %w", ErrHandshake, timeout, ErrTimeout)
	case err != nil:
		return hello{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	case h.typ != frameHello:
		return hello{}, fmt.Errorf("%w: %w: first frame has type %d, want hello", ErrHandshake, ErrMalformedFrame, h.typ)
	case h.bodyLen > maxHelloBody:
		return hello{}, fmt.Errorf("%w: %w: hello of %d bytes", ErrHandshake, ErrMalformedFrame, h.bodyLen)
	}
	body, err := readBody(br, h.bodyLen)
	if isTimeout(err) {
		return hello{}, fmt.Errorf("%w: no hello within %v: %w", ErrHandshake, timeout, ErrTimeout)
	}
	if err != nil {
		return hello{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	hl, err := parseHello(body)
	if err != nil {
		return hello{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return hl, nil
}

// answerHello answers a dialer's hello of version 2 or later with this
// node's own, then has CheckHello judge the dialer's. The answer goes first,
// written directly (the writer has not started; the handshake deadline
// holds), so that a dialer refused here learns this node's payload and can
// say why.
func (c *conn) answerHello(hl hello) error {
	if hl.version >= helloV2 {
		if _, err := c.nc.Write(appendFrame(nil, frameHello, 0, c.t.hellos[helloV2-1])); err != nil {
			if isTimeout(err) {
				return fmt.Errorf("%w: answering the hello: %w", ErrHandshake, ErrTimeout)
			}
			return fmt.Errorf("%w: answering the hello: %w", ErrHandshake, err)
		}
	}
	if c.t.cfg.CheckHello == nil {
		return nil
	}
	if err := c.t.cfg.CheckHello(hl.name, int(hl.version), hl.payload); err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return nil
}

// checkIdentity binds the name in a TLS peer's hello to the certificate
// the peer presented: without this, any holder of a valid certificate could
// speak in any node's name.
func (c *conn) checkIdentity(name string) error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil // no client certificates: names are not authenticated
	}
	verify := c.t.cfg.VerifyPeerName
	if verify == nil {
		verify = verifyPeerNameBySAN
	}
	if err := verify(name, certs[0]); err != nil {
		return fmt.Errorf("%w: %w: the hello names %q: %w", ErrHandshake, ErrIdentity, name, err)
	}
	return nil
}

// verifyPeerNameBySAN is the default VerifyPeerName: the name must be one
// of the certificate's DNS subject alternative names.
func verifyPeerNameBySAN(name string, cert *x509.Certificate) error {
	if slices.Contains(cert.DNSNames, name) {
		return nil
	}
	return fmt.Errorf("the certificate's DNS names are %q", cert.DNSNames)
}

// handleRequest runs the handler for one request, whose body has its room
// in MaxBytesInFlight reserved, and queues its answer. It reports false if
// the connection was closed.
func (c *conn) handleRequest(br *bufio.Reader, h frameHeader, framed bool) bool {
	body, err := readBody(br, h.bodyLen)
	if err != nil {
		c.t.budget.release(h.bodyLen)
		c.readFailed(err, true, framed)
		return false
	}
	reply, herr := c.t.cfg.Handler.HandleRequest(c.label, body)
	c.t.budget.release(h.bodyLen)
	typ := frameReply
	switch {
	case errors.Is(herr, ErrRejectPeer):
		c.abort(fmt.Errorf("handler: %w", herr), true)
		return false
	case herr != nil:
		typ, reply = frameError, errorBody(herr, c.t.maxBody)
	case len(reply) > c.t.maxBody:
		err := fmt.Errorf("%w: reply of %d bytes, limit %d", ErrFrameTooLarge, len(reply), c.t.maxBody)
		c.t.report(c.label, err)
		typ, reply = frameError, errorBody(err, c.t.maxBody)
	}
	if !c.t.budget.tryAcquire(len(reply)) {
		c.abort(fmt.Errorf("%w: no room for a reply of %d bytes (MaxBytesInFlight %d)", ErrBudget, len(reply), c.t.cfg.MaxBytesInFlight), true)
		return false
	}
	if _, err := c.enqueue(typ, h.id, reply, nil, len(reply)); err != nil {
		// The peer does not read its replies (queue full) or the
		// connection just failed; either way it is done.
		c.t.budget.release(len(reply))
		c.abort(err, true)
		return false
	}
	return true
}

// errorBody is the text of a handler error, cut to fit in a frame.
func errorBody(err error, limit int) []byte {
	msg := err.Error()
	if len(msg) > limit {
		msg = msg[:limit]
	}
	return []byte(msg)
}
