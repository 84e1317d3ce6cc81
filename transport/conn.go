package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// readBufferSize is each connection's bufio.Reader size: large enough
	// that a burst of small frames costs one read system call.
	readBufferSize = 16 << 10
	// writeChunk is the most written under one deadline, so that
	// WriteTimeout means "no progress for that long" even for big queues.
	writeChunk = 256 << 10
	// maxKeptQueue is the largest write buffer a connection keeps for reuse
	// after flushing; a burst of large frames should not pin memory forever.
	maxKeptQueue = 1 << 20
)

// errRetired closes a dialed connection that stopped being used because it
// had idled for half of IdleTimeout. Nobody waits on it when it fires.
var errRetired = fmt.Errorf("%w: retired after idling", ErrConnClosed)

// conn is one TCP (or TLS) connection, dialed or accepted. Frames to send
// are appended to queue by any goroutine; a single writer goroutine swaps
// the queue out and writes it in one go, so frames queued while a write is
// in progress are coalesced into the next write. A reader goroutine decodes
// incoming frames: on a dialed connection it completes pending calls, on an
// accepted one it runs the handler inline and queues the reply.
type conn struct {
	t        *TCP
	outbound bool   // dialed by us (true) or accepted (false)
	addr     string // dialed address, or remote address of an accepted conn
	node     string // dialed side: the node expected at addr ("" for any)
	// answered is set on a dialed connection once the listener's answer to
	// its hello was taken, or from the start when the hello was of version
	// 1 (no answer comes). Only the reader reads it after the dial.
	answered bool
	// label names the peer in OnError reports. On an accepted connection
	// the reader sets it to the peer's name after the hello, before the
	// writer goroutine starts; nothing else writes it.
	label string

	wake chan struct{} // capacity 1: the queue became non-empty, or a retired conn may be done
	done chan struct{} // closed once err is set

	dead     atomic.Bool  // err != nil, readable without the lock
	retiring atomic.Bool  // retired, readable without the lock
	lastSend atomic.Int64 // t.now() when a frame was last queued (dialed side)
	// lastReply is t.now() when a frame was last read (dialed side), and
	// silent counts the calls that timed out since with no frame read in
	// between (see callTimedOut).
	lastReply atomic.Int64
	silent    atomic.Int32

	mu      sync.Mutex
	nc      net.Conn         // nil while a dialed connection is still connecting
	queue   []byte           // encoded frames not yet handed to the writer
	err     error            // why the connection failed; nil while usable
	pending map[uint64]*call // dialed side: calls waiting for their reply
	nextID  uint64           // dialed side: last request id used
	retired bool             // dialed side: take no new frames; close when drained

	// Accepted side: replies not yet written to the socket (queued, or
	// taken by the writer), for MaxInflightPerConn. queuedReplies counts
	// those still in queue. throttled is set while the reader waits for
	// room; the writer then signals room after a write.
	inflight      int
	queuedReplies int
	// queuedBudget is the part of MaxBytesInFlight held by the replies in
	// queue; the writer takes it with the queue and gives it back once
	// they are written.
	queuedBudget int
	throttled    bool
	room         chan struct{} // capacity 1

	// admitted is the peer name this accepted connection counts against in
	// MaxConnsPerPeer; guarded by t.mu, not mu.
	admitted string

	scratch       [lengthPrefixSize + frameHeaderSize]byte // reader's header buffer
	writeDeadline time.Time                                // writer's current deadline
}

func newConn(t *TCP, outbound bool, addr string, nc net.Conn) *conn {
	c := &conn{
		t:        t,
		outbound: outbound,
		addr:     addr,
		label:    addr,
		nc:       nc,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	if outbound {
		c.pending = make(map[uint64]*call)
	} else {
		c.room = make(chan struct{}, 1)
	}
	return c
}

// enqueue appends a frame to the write queue. With cl non-nil the frame is
// a request: it gets a fresh id and cl is registered to receive the reply.
// Otherwise id is used as given. It fails without queueing anything if the
// connection has failed or retired (the caller may then use another
// connection: nothing was sent) or if the queue is full.
//
// reserved is what body holds of MaxBytesInFlight (a reply's); the
// connection gives it back once the frame is written or dropped, and the
// caller if enqueue fails.
func (c *conn) enqueue(typ byte, id uint64, body []byte, cl *call, reserved int) (uint64, error) {
	size := lengthPrefixSize + frameHeaderSize + len(body)
	c.mu.Lock()
	switch {
	case c.err != nil:
		err := c.err
		c.mu.Unlock()
		return 0, err
	case c.retired:
		c.mu.Unlock()
		return 0, errRetired
	case len(c.queue)+size > c.t.cfg.MaxQueuedBytes:
		queued := len(c.queue)
		c.mu.Unlock()
		return 0, fmt.Errorf("%w: %d bytes already queued to %s", ErrQueueFull, queued, c.label)
	}
	if cl != nil {
		c.nextID++
		id = c.nextID
		c.pending[id] = cl
	}
	wasEmpty := len(c.queue) == 0
	c.queue = appendFrame(c.queue, typ, id, body)
	if typ == frameReply || typ == frameError {
		c.queuedReplies++
		c.inflight++
	}
	c.queuedBudget += reserved
	c.mu.Unlock()
	if c.outbound {
		c.lastSend.Store(c.t.now())
	}
	if wasEmpty {
		c.signal()
	}
	return id, nil
}

// signal wakes the writer without blocking; one pending wake-up is enough
// because the writer takes the whole queue each time it wakes.
func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the connection's only writer. It runs until the connection
// fails.
func (c *conn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		buf := c.queue
		c.queue = spare[:0]
		replies := c.queuedReplies
		c.queuedReplies = 0
		held := c.queuedBudget
		c.queuedBudget = 0
		c.mu.Unlock()
		if len(buf) > 0 {
			err := c.write(buf)
			c.t.budget.release(held)
			if err != nil {
				c.abort(c.writeFailed(err), true)
				return
			}
		} else {
			c.t.budget.release(held)
		}
		if replies > 0 {
			c.wrote(replies)
		}
		if cap(buf) > maxKeptQueue {
			buf = nil
		}
		spare = buf[:0]
		if c.retiring.Load() && c.maybeFinishRetired() {
			return
		}
	}
}

// write writes buf in chunks, each of which must complete within
// WriteTimeout. Moving a deadline costs a timer update, so it is only moved
// when less than half of WriteTimeout remains: each chunk gets between
// half of and all of WriteTimeout.
func (c *conn) write(buf []byte) error {
	timeout := c.t.cfg.WriteTimeout
	for len(buf) > 0 {
		n := min(len(buf), writeChunk)
		if now := time.Now(); c.writeDeadline.Sub(now) < timeout/2 {
			c.writeDeadline = now.Add(timeout)
			if err := c.nc.SetWriteDeadline(c.writeDeadline); err != nil {
				return err
			}
		}
		m, err := c.nc.Write(buf[:n])
		buf = buf[m:]
		if err != nil {
			if isTimeout(err) {
				return fmt.Errorf("%w: write made no progress for %v: %w", ErrTimeout, timeout, err)
			}
			return fmt.Errorf("transport: write: %w", err)
		}
	}
	return nil
}

// wrote records that n replies reached the socket, and lets a reader
// waiting for room go on.
func (c *conn) wrote(n int) {
	c.mu.Lock()
	c.inflight -= n
	wake := c.throttled && c.inflight < c.t.cfg.MaxInflightPerConn
	if wake {
		c.throttled = false
	}
	c.mu.Unlock()
	if wake {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// waitForRoom holds an accepted connection's reader while
// MaxInflightPerConn replies are unwritten: a peer that does not read its
// replies then stops being read, instead of making this node buffer
// replies without bound. It reports whether it had to wait (the caller
// re-arms the idle deadline, since silence while we do not read is not the
// peer's), and false in ok once the connection has failed.
func (c *conn) waitForRoom() (waited, ok bool) {
	for {
		c.mu.Lock()
		switch {
		case c.err != nil:
			c.mu.Unlock()
			return waited, false
		case c.inflight < c.t.cfg.MaxInflightPerConn:
			c.mu.Unlock()
			return waited, true
		}
		c.throttled = true
		c.mu.Unlock()
		waited = true
		select {
		case <-c.room:
		case <-c.done:
		}
	}
}

// writeFailed names why a write failed: a peer that stopped reading while
// its requests filled MaxInflightPerConn tripped that limit.
func (c *conn) writeFailed(err error) error {
	c.mu.Lock()
	throttled, inflight := c.throttled, c.inflight
	c.mu.Unlock()
	if throttled && errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: the peer left %d replies unread (MaxInflightPerConn): %w", ErrInflightLimit, inflight, err)
	}
	return err
}

// nextFrame reads the header of the next frame. It waits for the frame's
// first byte under whatever read deadline is set (the idle deadline on an
// accepted connection, none on a dialed one); from then on the frame must
// arrive whole within FrameTimeout. armed reports whether the frame
// deadline was set, which the caller undoes once the body is read; a frame
// already buffered whole needs no deadline, so the common small frame
// costs no timer update.
func (c *conn) nextFrame(br *bufio.Reader) (h frameHeader, armed bool, err error) {
	if _, err := br.Peek(1); err != nil {
		return frameHeader{}, false, err
	}
	if br.Buffered() < lengthPrefixSize+frameHeaderSize {
		if err := c.armFrameDeadline(); err != nil {
			return frameHeader{}, false, err
		}
		armed = true
	}
	h, err = readFrameHeader(br, &c.scratch, c.t.cfg.MaxFrameSize)
	if err != nil {
		return frameHeader{}, armed, err
	}
	if !armed && br.Buffered() < h.bodyLen {
		if err := c.armFrameDeadline(); err != nil {
			return frameHeader{}, false, err
		}
		armed = true
	}
	return h, armed, nil
}

// reserveBody reserves n bytes of MaxBytesInFlight for the body of a frame
// whose header was just read, waiting at most FrameTimeout. It reports
// false, having failed the connection with ErrBudget, when none came.
func (c *conn) reserveBody(n int) bool {
	if c.t.budget.acquire(n, time.Now().Add(c.t.cfg.FrameTimeout), c.done) {
		return true
	}
	c.abort(fmt.Errorf("%w: no room for a frame of %d bytes within %v (MaxBytesInFlight %d)",
		ErrBudget, n, c.t.cfg.FrameTimeout, c.t.cfg.MaxBytesInFlight), true)
	return false
}

func (c *conn) armFrameDeadline() error {
	return c.nc.SetReadDeadline(time.Now().Add(c.t.cfg.FrameTimeout))
}

// cancel forgets a call whose caller gave up. It reports whether cl was
// still registered; if not, a result has been or is being delivered to it.
func (c *conn) cancel(id uint64, cl *call) bool {
	c.mu.Lock()
	mine := c.pending[id] == cl
	if mine {
		delete(c.pending, id)
	}
	drained := c.retired && len(c.pending) == 0
	c.mu.Unlock()
	if drained {
		c.signal()
	}
	return mine
}

// silentTimeouts is how many calls in a row may time out on a dialed
// connection that reads nothing at all before it is closed and redialed.
const silentTimeouts = 3

// callTimedOut notes that a call sent at sentAt timed out. A connection on
// which several calls in a row time out while nothing at all is read is
// given up: after a partition heals, an old connection may sit in TCP's
// retransmission backoff for many seconds (its small frames went into the
// kernel's buffer, so no write deadline fires), while a new one gets
// through at once.
func (c *conn) callTimedOut(sentAt int64) {
	if c.lastReply.Load() >= sentAt {
		return // the peer answers; this call was only slow
	}
	if c.silent.Add(1) >= silentTimeouts {
		c.abort(fmt.Errorf("%w: %d calls in a row to %s timed out with nothing read", ErrUnresponsive, silentTimeouts, c.addr), true)
	}
}

// takePending removes and returns the call waiting for id, if any.
func (c *conn) takePending(id uint64) (cl *call, drained bool) {
	c.mu.Lock()
	cl = c.pending[id]
	if cl != nil {
		delete(c.pending, id)
	}
	drained = c.retired && len(c.pending) == 0
	c.mu.Unlock()
	return cl, drained
}

// retire stops new frames from being queued; the writer closes the
// connection once the queue is flushed and no call is waiting.
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	c.retiring.Store(true)
	c.mu.Unlock()
	c.signal()
}

func (c *conn) maybeFinishRetired() bool {
	c.mu.Lock()
	finished := c.retired && len(c.queue) == 0 && len(c.pending) == 0
	c.mu.Unlock()
	if finished {
		c.abort(errRetired, false)
	}
	return finished
}

// usable reports whether new frames should go to this dialed connection.
func (c *conn) usable(now int64) bool {
	return !c.dead.Load() && now-c.lastSend.Load() < int64(c.t.retireAfter)
}

// abort fails the connection with reason and, if this was the first
// failure and report is set, tells OnError.
func (c *conn) abort(reason error, report bool) {
	if c.fail(reason) && report {
		c.t.report(c.label, reason)
	}
}

// fail closes the connection, fails its pending calls and forgets it. Only
// the first call has any effect; it reports whether it was the first.
func (c *conn) fail(reason error) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.err = reason
	c.dead.Store(true)
	pending := c.pending
	c.pending = nil
	c.queue = nil
	held := c.queuedBudget
	c.queuedBudget = 0
	nc := c.nc
	c.mu.Unlock()
	c.t.budget.release(held)

	close(c.done)
	if nc != nil {
		_ = nc.Close() // unblocks the reader; the error says nothing new
	}
	c.t.forget(c)
	if len(pending) > 0 {
		err := reason
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrConnClosed) {
			err = fmt.Errorf("%w: %s: %w", ErrConnClosed, c.addr, reason)
		}
		for _, cl := range pending {
			cl.deliver(result{err: err})
		}
	}
	return true
}

// readFailed classifies the error that ended a read loop. A clean EOF
// between frames is an orderly close; a timeout is a slow frame when the
// frame deadline was armed, and otherwise (accepted side, idle set) an idle
// connection. Everything but EOF is reported.
func (c *conn) readFailed(err error, idle, armed bool) {
	switch {
	case errors.Is(err, io.EOF):
		c.abort(fmt.Errorf("%w: closed by %s", ErrConnClosed, c.label), false)
	case armed && isTimeout(err):
		c.abort(fmt.Errorf("%w: a frame did not arrive whole within %v: %w", ErrSlowFrame, c.t.cfg.FrameTimeout, ErrTimeout), true)
	case idle && isTimeout(err):
		c.abort(fmt.Errorf("%w: no frame for %v", ErrIdle, c.t.cfg.IdleTimeout), true)
	case errors.Is(err, ErrMalformedFrame) || errors.Is(err, ErrFrameTooLarge):
		c.abort(err, true)
	default:
		c.abort(fmt.Errorf("transport: read: %w", err), true)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// call is a Call or a Go waiting for its reply: a Call's result is sent on
// ch, a Go's passed to done. Calls of Call are pooled: one goes back to the
// pool only when nobody else can still send on ch. Whoever takes a call out
// of its connection's pending map (the reader with the reply, the timer or
// the caller giving up, or fail) is the one that delivers its result.
type call struct {
	ch   chan result // capacity 1: the one result is never blocked on
	done func(reply []byte, err error)
	// A Go's timeout, and whether its result was delivered (see Go).
	timer     atomic.Pointer[time.Timer]
	delivered atomic.Bool
}

// deliver hands the call its one result.
func (cl *call) deliver(r result) {
	if cl.done == nil {
		cl.ch <- r
		return
	}
	cl.delivered.Store(true)
	if t := cl.timer.Load(); t != nil {
		t.Stop()
	}
	cl.done(r.body, r.err)
}

type result struct {
	body []byte
	err  error
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan result, 1)} }}
