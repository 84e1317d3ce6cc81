package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// Bounds on what local clients may ask of the agent.
const (
	maxConns       = 1024             // connections open at once; more are closed at once
	maxInflight    = 16               // requests running at once on one connection; more are answered "busy"
	defaultTimeout = 10 * time.Second // holder and locks, when the request gives none
	changeTimeout  = time.Minute      // voter changes, when the request gives none
	releaseTimeout = 5 * time.Second  // releasing a dropped connection's lease
)

// apiServer serves the local API (api.go) for one mesh node.
type apiServer struct {
	m     *mesh.Mesh
	cfg   *mesh.Config
	node  string
	elect electionAPI // nil: elections not supported yet
	locks locksAPI    // nil: listing locks not supported yet

	mu     sync.Mutex
	conns  map[*apiConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newAPIServer(m *mesh.Mesh, cfg *mesh.Config) *apiServer {
	return &apiServer{m: m, cfg: cfg, node: m.Name(), elect: meshElections(m), locks: meshLocks(m),
		conns: make(map[*apiConn]struct{})}
}

// serve accepts connections until ln is closed.
func (s *apiServer) serve(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= maxConns {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		c := newAPIConn(s, nc)
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// close ends every connection and waits for their handlers.
func (s *apiServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// apiConn is one client connection, and the lease or candidacy it holds:
// both end with it.
type apiConn struct {
	s      *apiServer
	nc     net.Conn
	ctx    context.Context // cancelled when the connection ends
	cancel context.CancelFunc
	slots  chan struct{} // requests in flight
	wg     sync.WaitGroup

	wmu sync.Mutex
	enc *json.Encoder

	mu       sync.Mutex
	claimed  bool        // an acquire or campaign is running, or its result held
	lease    *mesh.Lease // held by this connection
	cand     leadership  // held by this connection
	released bool        // the client released or resigned: its end is no loss
	// beat ends the lease or candidacy when the client sends no request
	// for a whole window (heartbeat_ns; default the lease's TTL): a client
	// that hangs with its connection open keeps nothing (lock asks every
	// TTL/10 how long its lease has left, elect sends "heartbeat").
	beat   *expiry
	silent string // why the agent ended the lease for a silent client
}

func newAPIConn(s *apiServer, nc net.Conn) *apiConn {
	ctx, cancel := context.WithCancel(context.Background())
	return &apiConn{s: s, nc: nc, ctx: ctx, cancel: cancel, slots: make(chan struct{}, maxInflight), enc: json.NewEncoder(nc)}
}

// serve reads requests until the connection ends, then releases what the
// connection held.
func (c *apiConn) serve() {
	defer c.end()
	c.send(reply{Event: "hello", V: apiVersion, Versions: []int{apiVersion}, Node: c.s.node})
	sc := bufio.NewScanner(c.nc)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.ID == 0 {
			c.send(reply{Error: &apiError{Code: codeUsage, Message: "unreadable request line, or no id: closing"}})
			return
		}
		if req.V != apiVersion {
			c.send(reply{ID: req.ID, Versions: []int{apiVersion},
				Error: &apiError{Code: codeVersion, Message: "this agent speaks API version 1 only"}})
			continue
		}
		c.heartbeat()
		select {
		case c.slots <- struct{}{}:
		default:
			c.send(reply{ID: req.ID, Error: &apiError{Code: codeBusy, Message: "too many requests in flight on this connection"}})
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer func() { <-c.slots }()
			c.handle(req)
		}()
	}
}

// end runs when the connection has ended: requests in flight are
// cancelled, and the lease or candidacy is released (the client is gone:
// nobody acts under it any more).
func (c *apiConn) end() {
	c.cancel()
	c.nc.Close()
	c.wg.Wait()
	c.mu.Lock()
	l, cand, done := c.lease, c.cand, c.released
	c.released = true
	c.stopBeat()
	c.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if l != nil {
		l.Release(ctx) // on failure the lease expires by itself
	}
	if cand != nil {
		cand.Resign(ctx)
	}
}

// send writes one line; writes of concurrent handlers never interleave. A
// failed write ends the connection (the reader then sees it closed).
func (c *apiConn) send(r reply) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.enc.Encode(r); err != nil {
		c.nc.Close()
	}
}

// heartbeat restarts the client's window.
func (c *apiConn) heartbeat() {
	c.mu.Lock()
	b := c.beat
	c.mu.Unlock()
	if b != nil {
		b.beat()
	}
}

// startBeat starts the window of the lease or candidacy just granted
// (c.mu held).
func (c *apiConn) startBeat(req request, ttl time.Duration) {
	window := ttl
	if req.Heartbeat > 0 {
		window = time.Duration(req.Heartbeat)
	}
	c.beat = newExpiry(window, func() { c.dropSilent(window) })
}

// stopBeat stops the window (c.mu held).
func (c *apiConn) stopBeat() {
	if c.beat != nil {
		c.beat.stop()
		c.beat = nil
	}
}

// dropSilent ends the lease or candidacy of a client that sent nothing for
// window: it is told "lost" (if it can still read), and the key goes to
// the next waiter.
func (c *apiConn) dropSilent(window time.Duration) {
	c.mu.Lock()
	l, cand := c.lease, c.cand
	c.silent = fmt.Sprintf("the client sent no request for %v (its heartbeat): the agent released the lease", window)
	c.beat = nil
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if l != nil {
		l.Release(ctx)
	}
	if cand != nil {
		cand.Resign(ctx)
	}
}

// lostWhy is why the lease ended: the agent's own word for a silent
// client, else err's.
func (c *apiConn) lostWhy(err error) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.silent != "" {
		return c.silent
	}
	if err == nil {
		return "ended"
	}
	return err.Error()
}

func (c *apiConn) fail(id uint64, code, msg string) {
	c.send(reply{ID: id, Error: &apiError{Code: code, Message: msg}})
}

func (c *apiConn) handle(req request) {
	switch req.Op {
	case opAcquire:
		c.acquire(req)
	case opLease:
		c.leaseNow(req)
	case opRelease:
		c.release(req)
	case opHolder:
		c.holder(req)
	case opStatus:
		st := c.s.m.Status()
		c.send(reply{ID: req.ID, Status: &st})
	case opVoters:
		c.voters(req)
	case opAddVoter, opRemoveVoter:
		c.changeVoters(req)
	case opLocks:
		c.listLocks(req)
	case opCampaign:
		c.campaign(req)
	case opResign:
		c.resign(req)
	case opObserve:
		c.observe(req)
	case opHeartbeat:
		c.send(reply{ID: req.ID})
	default:
		c.fail(req.ID, codeUsage, "unknown operation "+req.Op)
	}
}

// claim reserves the connection's one lease or candidacy.
func (c *apiConn) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claimed {
		return false
	}
	c.claimed = true
	return true
}

func (c *apiConn) unclaim() {
	c.mu.Lock()
	c.claimed = false
	c.mu.Unlock()
}

// timeoutCtx is the connection's context, bounded by the request's timeout
// (or def when it gives none; def 0: no bound).
func (c *apiConn) timeoutCtx(req request, def time.Duration) (context.Context, context.CancelFunc) {
	d := time.Duration(req.Timeout)
	if d <= 0 {
		d = def
	}
	if d <= 0 {
		return context.WithCancel(c.ctx)
	}
	return context.WithTimeout(c.ctx, d)
}

func (c *apiConn) acquire(req request) {
	if req.N < 0 {
		c.fail(req.ID, codeUsage, "n must be positive")
		return
	}
	if !c.claim() {
		c.fail(req.ID, codeUsage, "this connection already holds, or is taking, a lease")
		return
	}
	ctx, cancel := c.timeoutCtx(req, 0)
	defer cancel()
	ttl := c.s.cfg.Timing.TTL
	// Clients of one agent wait for each other as for other nodes' clients.
	opts := []mesh.AcquireOption{mesh.WaitBehindOwnLease()}
	if req.TTL > 0 {
		ttl = time.Duration(req.TTL)
		opts = append(opts, mesh.WithTTL(ttl))
	}
	var l *mesh.Lease
	var err error
	if req.N > 1 {
		// A semaphore: one of N slots, each a lease of its own.
		l, err = c.s.m.AcquireSemaphore(ctx, req.Key, req.N, opts...)
	} else {
		l, err = c.s.m.Acquire(ctx, req.Key, opts...)
	}
	if err != nil {
		c.unclaim()
		c.sendErr(req.ID, err)
		return
	}
	c.mu.Lock()
	c.lease, c.released = l, false
	c.startBeat(req, ttl)
	c.mu.Unlock()
	// The margins scale with the TTL, as the mesh scales them.
	notice := time.Duration(float64(c.s.cfg.Timing.NoticeMargin) * float64(ttl) / float64(c.s.cfg.Timing.TTL))
	c.send(reply{ID: req.ID, Key: l.Key(), Token: l.Token(), Remaining: int64(time.Until(l.Deadline())),
		TTL: int64(ttl), Notice: int64(notice)})
	c.watch(l.Done(), func() reply {
		return reply{Event: "lost", Key: l.Key(), Token: l.Token(), Message: c.lostWhy(l.Err())}
	})
}

// watch tells the client when done closes, unless it released first or
// has gone.
func (c *apiConn) watch(done <-chan struct{}, lost func() reply) {
	select {
	case <-done:
		c.mu.Lock()
		released := c.released
		c.mu.Unlock()
		if !released {
			c.send(lost())
		}
	case <-c.ctx.Done():
	}
}

// leaseNow answers how long the connection's lease has left.
func (c *apiConn) leaseNow(req request) {
	c.mu.Lock()
	l := c.lease
	c.mu.Unlock()
	switch {
	case l == nil:
		c.fail(req.ID, codeNotHeld, "this connection holds no lease")
	case l.Err() != nil:
		c.fail(req.ID, codeLost, c.lostWhy(l.Err()))
	default:
		c.send(reply{ID: req.ID, Key: l.Key(), Token: l.Token(), Remaining: int64(time.Until(l.Deadline()))})
	}
}

func (c *apiConn) release(req request) {
	c.mu.Lock()
	l := c.lease
	c.released = true
	c.stopBeat()
	c.mu.Unlock()
	if l == nil {
		c.fail(req.ID, codeNotHeld, "this connection holds no lease")
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, releaseTimeout)
	defer cancel()
	err := l.Release(ctx)
	c.mu.Lock()
	c.lease, c.claimed = nil, false
	c.mu.Unlock()
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.send(reply{ID: req.ID, Key: l.Key(), Token: l.Token()})
}

func (c *apiConn) holder(req request) {
	ctx, cancel := c.timeoutCtx(req, defaultTimeout)
	defer cancel()
	h, err := c.s.m.Holder(ctx, req.Key)
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.send(reply{ID: req.ID, Holder: &h})
}

func (c *apiConn) voters(req request) {
	cfg, err := c.s.m.Voters()
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.send(reply{ID: req.ID, Config: &cfg})
}

func (c *apiConn) changeVoters(req request) {
	ctx, cancel := c.timeoutCtx(req, changeTimeout)
	defer cancel()
	var err error
	if req.Op == opAddVoter {
		err = c.s.m.AddVoter(ctx, req.Name)
	} else {
		err = c.s.m.RemoveVoter(ctx, req.Name)
	}
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.voters(req)
}

func (c *apiConn) listLocks(req request) {
	if c.s.locks == nil {
		c.fail(req.ID, codeUnsupported, "listing locks is not supported yet: the mesh cannot list its locks")
		return
	}
	ctx, cancel := c.timeoutCtx(req, defaultTimeout)
	defer cancel()
	hs, err := c.s.locks.Locks(ctx, req.Key)
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	if hs == nil {
		hs = []mesh.Holder{}
	}
	c.send(reply{ID: req.ID, Locks: hs})
}

const noElections = "elections are not supported yet: the mesh has no election API"

func (c *apiConn) campaign(req request) {
	if c.s.elect == nil {
		c.fail(req.ID, codeUnsupported, noElections)
		return
	}
	if !c.claim() {
		c.fail(req.ID, codeUsage, "this connection already holds, or is taking, a lease")
		return
	}
	ctx, cancel := c.timeoutCtx(req, 0)
	defer cancel()
	lead, err := c.s.elect.Campaign(ctx, req.Name, req.Value, time.Duration(req.TTL))
	if err != nil {
		c.unclaim()
		c.sendErr(req.ID, err)
		return
	}
	ttl := c.s.cfg.Timing.TTL
	if req.TTL > 0 {
		ttl = time.Duration(req.TTL)
	}
	c.mu.Lock()
	c.cand, c.released = lead, false
	c.startBeat(req, ttl)
	c.mu.Unlock()
	info := lead.Leader()
	c.send(reply{ID: req.ID, Leader: &info, TTL: int64(ttl)})
	c.watch(lead.Done(), func() reply {
		return reply{Event: "lost", Message: c.lostWhy(lead.Err()), Leader: &info}
	})
}

func (c *apiConn) resign(req request) {
	c.mu.Lock()
	lead := c.cand
	c.released = true
	c.stopBeat()
	c.mu.Unlock()
	if lead == nil {
		c.fail(req.ID, codeNotHeld, "this connection leads no election")
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, releaseTimeout)
	defer cancel()
	err := lead.Resign(ctx)
	c.mu.Lock()
	c.cand, c.claimed = nil, false
	c.mu.Unlock()
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.send(reply{ID: req.ID})
}

// observe answers, then sends a "leader" event at every change until the
// connection ends.
func (c *apiConn) observe(req request) {
	if c.s.elect == nil {
		c.fail(req.ID, codeUnsupported, noElections)
		return
	}
	ch, err := c.s.elect.Observe(c.ctx, req.Name)
	if err != nil {
		c.sendErr(req.ID, err)
		return
	}
	c.send(reply{ID: req.ID})
	for info := range ch {
		c.send(reply{Event: "leader", Leader: &info})
	}
}

// sendErr answers req with err's code, unless the client has gone (the
// error is then the connection's end, and nobody reads the answer).
func (c *apiConn) sendErr(id uint64, err error) {
	if c.ctx.Err() != nil {
		return
	}
	c.send(reply{ID: id, Error: apiErrorOf(err)})
}

// apiErrorOf classifies a mesh error.
func apiErrorOf(err error) *apiError {
	e := &apiError{Code: codeError, Message: err.Error()}
	var locked *mesh.LockedError
	switch {
	case errors.Is(err, mesh.ErrInvalidKey):
		e.Code = codeInvalidKey
	case errors.Is(err, mesh.ErrInvalidOption), errors.Is(err, mesh.ErrValueTooLarge):
		e.Code = codeInvalidOpt
	case errors.Is(err, mesh.ErrSemaphoreMismatch):
		e.Code = codeUsage
	case errors.Is(err, mesh.ErrUpgradeRequired):
		e.Code = codeUnsupported
	case errors.Is(err, mesh.ErrLeaseLost):
		e.Code = codeLost
	case errors.Is(err, mesh.ErrClosed):
		e.Code = codeClosed
	case errors.Is(err, mesh.ErrNoVoters):
		e.Code = codeNoVoters
	case errors.Is(err, mesh.ErrUnknownNode):
		e.Code = codeUnknownNode
	case errors.Is(err, mesh.ErrBadVoterChange):
		e.Code = codeBadChange
	case errors.As(err, &locked):
		e.Code, e.Holder, e.Token = codeTimeout, locked.Holder, locked.Token
	case errors.Is(err, mesh.ErrNoQuorum):
		e.Code = codeNoQuorum
	case errors.Is(err, context.DeadlineExceeded):
		e.Code = codeTimeout
	}
	return e
}
