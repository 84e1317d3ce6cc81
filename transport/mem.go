package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

var _ Transport = (*MemTransport)(nil)

// MemTransport is one node of a Network. It keeps the Transport promises
// except where the Network's fault injection is told to break them
// (SetDuplicateRate). Handlers always run on their own goroutine, never on
// the goroutine that called Call or Send, so a caller holding a lock cannot
// deadlock against its own handler. Bodies are copied in both directions.
//
// Where it differs from TCP: there are no connections, so a handler's
// ErrRejectPeer fails only the call it answers (with ErrConnClosed) rather
// than every call sharing a connection; a frame in flight to a node that
// closes is lost (the caller waits for its context) rather than failing
// with ErrConnClosed; and bodies have no size limit.
type MemTransport struct {
	net  *Network
	name string
	h    Handler

	mu      sync.Mutex
	closed  bool
	nextID  uint64
	pending map[uint64]chan result // calls waiting for a reply, by id
	done    chan struct{}          // closed by Close

	// wg counts frames on their way to, or being handled by, this node.
	// Add happens under mu while not closed, so Close's Wait cannot race
	// with an Add from zero.
	wg sync.WaitGroup
}

// memFrame is a frame in flight. Replies point at the transport that made
// the call, not at its name, so a reply cannot reach a restarted node that
// reuses the name and the request id.
type memFrame struct {
	typ    byte
	id     uint64
	from   string
	origin *MemTransport // the caller, for requests
	body   []byte
	err    error // for replies: the result's error
}

// Addr returns the node's name.
func (m *MemTransport) Addr() string { return m.name }

// Call implements Transport.Call. Calling a name that is not listening
// fails at once with ErrUnreachable, like a refused connection, and so does
// calling node at an address (a name here) that is another node's, with
// ErrIdentity too. A request or reply lost to a fault leaves Call waiting
// until ctx ends. A handler that rejects the peer makes Call fail with
// ErrConnClosed.
func (m *MemTransport) Call(ctx context.Context, node, addr string, body []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dst, err := m.net.lookupNode(node, addr)
	if err != nil {
		return nil, err
	}
	ch := make(chan result, 1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	m.nextID++
	id := m.nextID
	m.pending[id] = ch
	m.mu.Unlock()

	m.transmit(dst, memFrame{typ: frameRequest, id: id, from: m.name, origin: m, body: clone(body)})
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		m.mu.Lock()
		delete(m.pending, id)
		m.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Go implements Async with Call on a goroutine of its own: it never
// returns an error, and a call that fails at once reports through done.
func (m *MemTransport) Go(node, addr string, body []byte, timeout time.Duration, done func(reply []byte, err error)) error {
	body = clone(body) // the caller may reuse it once Go returns
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		done(m.Call(ctx, node, addr, body))
	}()
	return nil
}

// Send implements Transport.Send. Unlike TCP it knows at once whether
// anybody listens at addr, and reports ErrUnreachable if not.
func (m *MemTransport) Send(node, addr string, body []byte) error {
	if m.isClosed() {
		return ErrClosed
	}
	dst, err := m.net.lookupNode(node, addr)
	if err != nil {
		return err
	}
	m.transmit(dst, memFrame{typ: frameMessage, from: m.name, body: clone(body)})
	return nil
}

// Close implements Transport.Close. Frames in flight to this node are lost;
// calls waiting here fail with ErrClosed; later calls to its name fail with
// ErrUnreachable. It waits for running handlers to return.
func (m *MemTransport) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	pending := m.pending
	m.pending = nil
	close(m.done)
	m.mu.Unlock()
	for _, ch := range pending {
		ch <- result{err: ErrClosed}
	}
	m.wg.Wait()
	return nil
}

func (m *MemTransport) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// transmit routes f from m to dst through the network's faults and
// delivers each surviving copy on its own goroutine.
func (m *MemTransport) transmit(dst *MemTransport, f memFrame) {
	for _, d := range m.net.route(m.name, dst.name) {
		dst.deliver(f, d)
	}
}

// deliver hands f to this node after delay, unless it closes first.
func (m *MemTransport) deliver(f memFrame, delay time.Duration) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.net.count(false)
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-m.done:
				t.Stop()
				m.net.count(false)
				return
			}
		}
		if m.isClosed() {
			m.net.count(false)
			return
		}
		// Counted once acted on, so that a quiet network (every frame
		// delivered or dropped) also means every handler has returned.
		m.receive(f)
		m.net.count(true)
	}()
}

// receive acts on a frame that arrived.
func (m *MemTransport) receive(f memFrame) {
	switch f.typ {
	case frameMessage:
		m.h.HandleMessage(f.from, f.body)
	case frameRequest:
		reply := memFrame{typ: frameReply, id: f.id, from: m.name}
		body, err := m.h.HandleRequest(f.from, f.body)
		switch {
		case errors.Is(err, ErrRejectPeer):
			reply.err = fmt.Errorf("%w: %s closed the connection", ErrConnClosed, m.name)
		case err != nil:
			reply.err = &RemoteError{Addr: m.name, Message: err.Error()}
		default:
			reply.body = clone(body)
		}
		m.transmit(f.origin, reply)
	case frameReply:
		m.mu.Lock()
		ch := m.pending[f.id]
		delete(m.pending, f.id)
		m.mu.Unlock()
		if ch != nil {
			ch <- result{body: f.body, err: f.err}
		}
	}
}

// clone copies b so that neither side aliases the other's buffer; nil and
// empty stay as they are.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	return append([]byte(nil), b...)
}
