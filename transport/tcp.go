package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

var _ Transport = (*TCP)(nil)

// TCP is a Transport over persistent TCP (optionally TLS) connections. See
// the package documentation for its design and wire format.
type TCP struct {
	cfg         TCPConfig
	maxBody     int           // MaxFrameSize minus the type and id
	retireAfter time.Duration // a dialed conn idle this long gets replaced
	hellos      [2][]byte     // bodies of the hellos we send: version 1, version 2
	ln          net.Listener
	addr        string
	start       time.Time // monotonic origin for now()
	budget      *budget   // MaxBytesInFlight

	// dialCtx ends in-progress dials when the transport closes.
	dialCtx    context.Context
	cancelDial context.CancelFunc
	done       chan struct{} // closed by Close

	mu      sync.RWMutex
	closed  bool
	peers   map[peerKey]*peerConns // dialed connections by node and address
	conns   map[*conn]struct{}     // every live connection, for Close
	inbound int                    // accepted connections in conns (MaxInboundConns)
	byName  map[string]int         // admitted accepted connections per peer name (MaxConnsPerPeer)

	// wg counts every goroutine the transport starts. Add is only called
	// with mu held and closed false, or by a goroutine already counted, so
	// Close's Wait never races with an Add from zero.
	wg        sync.WaitGroup
	closeOnce sync.Once

	dials, dialFailures, rejected atomic.Uint64
}

// TCPStats is a snapshot of a TCP transport's connections, for tests and
// operators.
type TCPStats struct {
	OutboundConns int    // dialed connections open or connecting now
	InboundConns  int    // accepted connections open now
	Dials         uint64 // connection attempts made so far
	DialFailures  uint64 // attempts that failed to connect
	Rejected      uint64 // connections closed for bad input, a limit, or by the handler
	// BytesInFlight is what the frames held now take of MaxBytesInFlight,
	// PeakBytesInFlight the most they ever took, and BudgetRefusals the
	// frames refused for want of room (see ErrBudget).
	BytesInFlight, PeakBytesInFlight int64
	BudgetRefusals                   uint64
}

// NewTCP validates cfg, starts listening on cfg.BindAddr and returns the
// transport. It makes no outgoing connection until the first Call or Send.
func NewTCP(cfg TCPConfig) (*TCP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", cfg.BindAddr, err)
	}
	t := &TCP{
		cfg:         cfg,
		maxBody:     cfg.MaxFrameSize - frameHeaderSize,
		retireAfter: cfg.IdleTimeout / 2,
		hellos:      [2][]byte{appendHello(nil, helloV1, cfg.Name, nil), appendHello(nil, helloV2, cfg.Name, cfg.Hello)},
		ln:          ln,
		addr:        ln.Addr().String(),
		start:       time.Now(),
		budget:      newBudget(cfg.MaxBytesInFlight),
		done:        make(chan struct{}),
		peers:       make(map[peerKey]*peerConns),
		conns:       make(map[*conn]struct{}),
		byName:      make(map[string]int),
	}
	if cfg.AdvertiseAddr != "" {
		t.addr = cfg.AdvertiseAddr
	}
	t.dialCtx, t.cancelDial = context.WithCancel(context.Background())
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr returns AdvertiseAddr if set, else the listener's address (with the
// real port when BindAddr asked for port 0).
func (t *TCP) Addr() string { return t.addr }

// Call implements Transport.Call.
func (t *TCP) Call(ctx context.Context, node, addr string, body []byte) ([]byte, error) {
	if len(body) > t.maxBody {
		return nil, fmt.Errorf("%w: body of %d bytes, limit %d", ErrFrameTooLarge, len(body), t.maxBody)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cl := callPool.Get().(*call)
	sentAt := t.now()
	c, id, err := t.enqueue(node, addr, frameRequest, body, cl)
	if err != nil {
		callPool.Put(cl)
		return nil, err
	}
	select {
	case r := <-cl.ch:
		callPool.Put(cl)
		return r.body, r.err
	case <-ctx.Done():
		if c.cancel(id, cl) {
			callPool.Put(cl)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.callTimedOut(sentAt)
		}
		return nil, ctx.Err()
	}
}

// Go implements Async. The timeout counts towards giving up a
// connection that answers nothing, as a Call's deadline does.
func (t *TCP) Go(node, addr string, body []byte, timeout time.Duration, done func(reply []byte, err error)) error {
	if len(body) > t.maxBody {
		return fmt.Errorf("%w: body of %d bytes, limit %d", ErrFrameTooLarge, len(body), t.maxBody)
	}
	cl := &call{done: done}
	sentAt := t.now()
	c, id, err := t.enqueue(node, addr, frameRequest, body, cl)
	if err != nil {
		return err
	}
	// Armed once queued: the timer finds the call only while no result
	// has been delivered (cancel), and a result delivered before the timer
	// is stored stops it here instead of in deliver.
	timer := time.AfterFunc(timeout, func() {
		if c.cancel(id, cl) {
			c.callTimedOut(sentAt)
			done(nil, context.DeadlineExceeded)
		}
	})
	cl.timer.Store(timer)
	if cl.delivered.Load() {
		timer.Stop()
	}
	return nil
}

// Send implements Transport.Send. It never waits for a connection to be
// made: frames queue on a connection that is still dialing and are lost if
// the dial fails.
func (t *TCP) Send(node, addr string, body []byte) error {
	if len(body) > t.maxBody {
		return fmt.Errorf("%w: body of %d bytes, limit %d", ErrFrameTooLarge, len(body), t.maxBody)
	}
	_, _, err := t.enqueue(node, addr, frameMessage, body, nil)
	return err
}

// Close implements Transport.Close.
func (t *TCP) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]*conn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()

		close(t.done)
		t.cancelDial()
		if cerr := t.ln.Close(); cerr != nil {
			err = fmt.Errorf("transport: close listener: %w", cerr)
		}
		for _, c := range conns {
			c.fail(ErrClosed)
		}
		t.wg.Wait()
	})
	return err
}

// Stats returns a snapshot of the transport's connections and counters.
func (t *TCP) Stats() TCPStats {
	s := TCPStats{
		Dials:        t.dials.Load(),
		DialFailures: t.dialFailures.Load(),
		Rejected:     t.rejected.Load(),

		BytesInFlight:     t.budget.inUse(),
		PeakBytesInFlight: t.budget.peak.Load(),
		BudgetRefusals:    t.budget.refused.Load(),
	}
	t.mu.RLock()
	for c := range t.conns {
		if c.outbound {
			s.OutboundConns++
		} else {
			s.InboundConns++
		}
	}
	t.mu.RUnlock()
	return s
}

// track registers a newly accepted connection and counts the goroutine
// that will serve it. It fails with ErrClosed once the transport is closed,
// and with ErrConnLimit when MaxInboundConns connections are open: checking
// before the TLS handshake and the hello keeps a flood of connections that
// never finish them from costing more than that many goroutines.
func (t *TCP) track(c *conn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return ErrClosed
	case t.inbound >= t.cfg.MaxInboundConns:
		return fmt.Errorf("%w: %d accepted connections open (MaxInboundConns)", ErrConnLimit, t.inbound)
	}
	t.conns[c] = struct{}{}
	t.inbound++
	t.wg.Add(1)
	return nil
}

// admit counts an accepted connection against its peer's MaxConnsPerPeer,
// once its hello has named the peer.
func (t *TCP) admit(c *conn, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, live := t.conns[c]; !live {
		return ErrClosed // failed meanwhile (Close): nothing to count
	}
	if n := t.byName[name]; n >= t.cfg.MaxConnsPerPeer {
		return fmt.Errorf("%w: %d connections from %q already open (MaxConnsPerPeer)", ErrConnLimit, n, name)
	}
	t.byName[name]++
	c.admitted = name
	return nil
}

// forget drops a failed connection from the set Close must close, and from
// the connection counts.
func (t *TCP) forget(c *conn) {
	t.mu.Lock()
	if _, live := t.conns[c]; live {
		delete(t.conns, c)
		if !c.outbound {
			t.inbound--
		}
	}
	if c.admitted != "" {
		if t.byName[c.admitted]--; t.byName[c.admitted] <= 0 {
			delete(t.byName, c.admitted)
		}
		c.admitted = ""
	}
	t.mu.Unlock()
}

// report passes a connection failure to OnError and counts rejections.
func (t *TCP) report(peer string, err error) {
	if errors.Is(err, ErrMalformedFrame) || errors.Is(err, ErrFrameTooLarge) ||
		errors.Is(err, ErrHandshake) || errors.Is(err, ErrRejectPeer) ||
		errors.Is(err, ErrSlowFrame) || errors.Is(err, ErrInflightLimit) ||
		errors.Is(err, ErrConnLimit) || errors.Is(err, ErrBudget) {
		t.rejected.Add(1)
	}
	if t.cfg.OnError != nil {
		t.cfg.OnError(peer, err)
	}
}

// helloVersion is the version of the hello to open a connection to node
// with.
func (t *TCP) helloVersion(node string) byte {
	switch {
	case t.cfg.HelloVersion != nil:
		if t.cfg.HelloVersion(node) < int(helloV2) {
			return helloV1
		}
		return helloV2
	case t.cfg.Hello != nil || t.cfg.CheckHello != nil:
		return helloV2
	}
	return helloV1
}

// now is a monotonic clock reading in nanoseconds, cheap to store
// atomically.
func (t *TCP) now() int64 { return int64(time.Since(t.start)) }
