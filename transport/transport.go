package transport

import (
	"context"
	"time"
)

// Handler receives what peers send. It must be safe for concurrent use and
// must not block for long: the TCP transport runs it on the goroutine that
// reads the connection, so a slow handler delays every later frame on that
// connection.
//
// The handler owns body: the transport never touches the slice again, so the
// handler may keep or modify it. A reply returned by HandleRequest is owned
// by the transport from the moment it is returned; the handler must not
// modify it afterwards.
type Handler interface {
	// HandleRequest answers a Call from the node named from (the name the
	// peer sent in its hello; with TLS client certificates it is bound to
	// the peer's certificate, see TCPConfig.VerifyPeerName, and otherwise
	// not authenticated). Returning an error that wraps ErrRejectPeer
	// closes the connection the request came on and sends no reply (use it
	// for unknown peers or bad input); any other error is sent back to the
	// caller, who receives it as a *RemoteError.
	HandleRequest(from string, body []byte) ([]byte, error)

	// HandleMessage receives a one-way Send from the node named from.
	HandleMessage(from string, body []byte)
}

// Transport carries opaque byte bodies between nodes. The caller encodes
// them; the transport adds framing and request/reply matching only.
//
// No ordering is promised between frames, not even between two Sends to the
// same address: callers that need an order must carry it in their bodies.
// Bodies passed to Call and Send may be reused by the caller as soon as the
// method returns.
type Transport interface {
	// Call sends body to the node named node, listening at addr, and waits
	// for its reply or until ctx ends. The reply comes from that node as far
	// as the transport can tell: with TLS, a connection is used only if the
	// certificate the listener presented vouches for node (the rule of
	// TCPConfig.VerifyPeerName; the call fails with an error wrapping
	// ErrUnreachable and ErrIdentity otherwise); without TLS, from whatever
	// listens at addr. An empty node accepts any listener the TLS
	// configuration accepts.
	//
	// Delivery is at most once: the request is never retransmitted after it
	// may have reached the peer. A nil error means the peer's handler ran
	// and the returned slice (owned by the caller) is its reply. If ctx ends
	// first, Call returns ctx.Err() promptly and a late reply is dropped;
	// the handler may or may not have run. See the package errors for how
	// to tell "not sent" from "outcome unknown".
	Call(ctx context.Context, node, addr string, body []byte) ([]byte, error)

	// Send queues body for one-way, at-most-once, best-effort delivery to
	// the node named node at addr (checked as for Call) and returns without
	// waiting for the peer (and without waiting for a connection to be
	// made). A nil error does not mean the message will be delivered: it
	// can be lost with its connection, and nobody is told. When the
	// connection has failed already (a dial refused at once, say), Send
	// returns ErrUnreachable and queues nothing.
	Send(node, addr string, body []byte) error

	// Addr is the address peers use to reach this transport.
	Addr() string

	// Close stops listening, fails pending calls with ErrClosed, closes
	// connections and waits for the transport's goroutines to exit; once it
	// returns, the handler is not called again. Close is idempotent. It must
	// not be called from inside a Handler method (it would wait for itself).
	Close() error
}

// Async is implemented by a Transport that can make a call without a
// goroutine waiting for its reply (TCP and MemTransport do). The mesh sends
// its ballot requests with Go when the Transport has it, and with Call on a
// goroutine of their own when it has not: a Transport of your own need not
// implement it.
type Async interface {
	// Go sends body as Call does, but returns at once instead of waiting:
	// done receives what Call would have returned, the reply (owned by the
	// callee of done) or an error; context.DeadlineExceeded when no reply
	// came within timeout. done is called exactly once, on a goroutine of
	// the transport, never on the caller's — unless Go returns an error,
	// which says nothing was sent, and then it is never called. Like a
	// Handler, done must not block for long: the TCP transport runs it on
	// the goroutine that reads the connection. Go spares a caller that
	// waits for several replies at once (a quorum round) a goroutine per
	// call, and the hand-over of each reply to it. The caller may reuse
	// body once Go returns.
	Go(node, addr string, body []byte, timeout time.Duration, done func(reply []byte, err error)) error
}

// Go makes a call through t as Async.Go does: with t's own Go if t
// implements Async, otherwise with Call on a goroutine of its own (which
// never fails at once: a call that fails reports through done).
func Go(t Transport, node, addr string, body []byte, timeout time.Duration, done func(reply []byte, err error)) error {
	if a, ok := t.(Async); ok {
		return a.Go(node, addr, body, timeout, done)
	}
	body = clone(body)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		done(t.Call(ctx, node, addr, body))
	}()
	return nil
}
