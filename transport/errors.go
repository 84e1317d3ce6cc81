package transport

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every error returned by this package wraps one of these
// (or a context error, or *RemoteError) with %w, so callers branch with
// errors.Is / errors.As rather than by comparing strings.
//
// How to read a failed Call:
//
//   - ErrUnreachable, ErrFrameTooLarge, ErrQueueFull: the request was never
//     sent; retrying is safe.
//   - ErrConnClosed, context.Canceled, context.DeadlineExceeded: the request
//     may or may not have reached the peer's handler; the outcome is unknown.
//   - ErrClosed: this transport is closed (if the call was already pending,
//     its outcome is unknown).
//   - *RemoteError: the peer's handler ran and returned an error.
var (
	// ErrClosed is returned by Call and Send on a closed transport, and by
	// Calls still pending when Close was called.
	ErrClosed = errors.New("transport: closed")

	// ErrFrameTooLarge means a frame's length exceeds the maximum frame size.
	// Locally it is returned before anything is sent; from the network it
	// closes the connection without reading the frame's body.
	ErrFrameTooLarge = errors.New("transport: frame too large")

	// ErrMalformedFrame means the bytes on a connection are not a valid frame
	// (too short, unknown type, unexpected type, bad hello). The connection
	// carrying them is closed.
	ErrMalformedFrame = errors.New("transport: malformed frame")

	// ErrRejectPeer, wrapped in an error returned by Handler.HandleRequest,
	// closes the connection the request came on instead of answering it. Use
	// it for unknown peers and input the handler refuses to decode.
	ErrRejectPeer = errors.New("transport: peer rejected")

	// ErrHandshake means a connection did not open with a valid hello frame
	// (or, with TLS, the TLS handshake failed). It is reported to OnError
	// together with the cause.
	ErrHandshake = errors.New("transport: handshake failed")

	// ErrTimeout is reported through OnError when a peer did not complete the
	// handshake within HandshakeTimeout, or a write made no progress within
	// WriteTimeout. Call itself never returns it: a Call that runs out of time
	// returns its context's error.
	ErrTimeout = errors.New("transport: timed out")

	// ErrUnreachable means no connection to the peer could be made (refused,
	// dial timeout, unknown or closed in-memory node). Nothing was sent.
	ErrUnreachable = errors.New("transport: peer unreachable")

	// ErrConnClosed means the connection broke (or the peer closed it) while a
	// Call was waiting for its reply. The handler may or may not have run.
	ErrConnClosed = errors.New("transport: connection closed")

	// ErrQueueFull means the connection's outgoing queue already holds
	// MaxQueuedBytes, typically because the peer stopped reading. Nothing was
	// queued.
	ErrQueueFull = errors.New("transport: send queue full")

	// ErrIdentity means a TLS peer's hello named a node its certificate does
	// not vouch for (see TCPConfig.VerifyPeerName), reported to OnError
	// together with ErrHandshake, the connection closed; or that a listener
	// dialed as one node presented a certificate that does not vouch for
	// it, returned by Call (with ErrUnreachable: nothing was sent).
	ErrIdentity = errors.New("transport: peer name does not match its certificate")

	// ErrSlowFrame means a frame had begun to arrive but did not arrive whole
	// within FrameTimeout: a peer trickling bytes to hold a connection (and
	// the memory of a half-read frame) is cut off. Reported to OnError with
	// ErrTimeout.
	ErrSlowFrame = errors.New("transport: frame arrived too slowly")

	// ErrInflightLimit means a peer kept MaxInflightPerConn requests
	// unanswered on one connection because it did not read the replies: the
	// connection stopped being read, and was closed once writing its replies
	// made no progress for WriteTimeout. Reported to OnError.
	ErrInflightLimit = errors.New("transport: too many requests in flight")

	// ErrConnLimit means an accepted connection was closed at once because
	// MaxInboundConns connections were already open, or MaxConnsPerPeer from
	// the node its hello named. Reported to OnError.
	ErrConnLimit = errors.New("transport: too many connections")

	// ErrIdle is reported to OnError when an accepted connection received no
	// frame for IdleTimeout and was closed. It is the normal end of a
	// connection its dialer stopped using, not a fault; it is reported so
	// that connections held open by an idle stranger can be counted.
	ErrIdle = errors.New("transport: connection idle")

	// ErrUnresponsive is reported to OnError when a dialed connection was
	// given up because several calls in a row timed out on it with nothing
	// read (a peer that went away, or a connection stuck in TCP's
	// retransmission backoff after a partition); the next call dials anew.
	ErrUnresponsive = errors.New("transport: peer stopped answering")

	// ErrBudget means a frame did not fit in MaxBytesInFlight: a frame
	// being received still found no room when its FrameTimeout ran out, or
	// a reply found none when it was queued. Its connection is closed and
	// OnError told.
	ErrBudget = errors.New("transport: bytes in flight over budget")
)

// RemoteError is returned by Call when the peer's handler returned an error
// that does not wrap ErrRejectPeer. Only the error's text crosses the wire:
// errors.Is cannot see through it to the peer's sentinels.
type RemoteError struct {
	// Addr is the address the Call was sent to.
	Addr string
	// Message is the text of the error the peer's handler returned,
	// truncated to fit in a frame.
	Message string
}

func (e *RemoteError) Error() string {
	return "transport: remote error from " + strconv.Quote(e.Addr) + ": " + e.Message
}
