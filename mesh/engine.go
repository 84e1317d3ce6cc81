package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
	"github.com/lockmesh/lockmesh/transport"
)

// The engine drives the two state machines of package quorum: the proposer
// (this node's acquires, renewals, releases and reads) under propMu, the
// acceptor (this node's votes) under accMu. Lock order: propMu, then accMu;
// nothing that holds accMu takes propMu.

// outcome is what a waiting caller receives.
type outcome struct {
	res   quorum.OpResult
	lease *Lease // for a grant
	err   error
}

// outcomeChans keeps the one-slot channels through which results reach
// the callers of Acquire and Release. A channel goes back only once its
// value was received, or when it was never registered: result sends at most
// once on each, deleting the waiter first, so a reused channel is empty and
// nothing else will send on it.
var outcomeChans = sync.Pool{New: func() any { return make(chan outcome, 1) }}

// drive runs fn on the proposer, then does everything the proposer wants
// done: answers its own requests to this node's acceptor at once, sends the
// others, hands results to waiting callers, and updates leases. fn has run
// when drive returns.
//
// Callers combine: one that finds another goroutine driving hands fn over
// and waits, and the driver runs every fn handed to it before it reads the
// proposer's Ready. So under load propMu changes hands once per batch of
// callers rather than once per caller, and their operations leave
// together, one message per voter. A driver serves at most driveBatches
// batches, then hands the role to the next waiter.
func (m *Mesh) drive(fn func(p *quorum.Proposer)) {
	m.combMu.Lock()
	if m.driving {
		w := driveWaiter{fn: fn, done: make(chan bool, 1)}
		m.pending = append(m.pending, w)
		m.combMu.Unlock()
		if !<-w.done {
			return // run by the driver
		}
		// Handed the role of driver, with fn not yet run.
	} else {
		m.driving = true
		m.combMu.Unlock()
	}
	m.propMu.Lock()
	defer m.propMu.Unlock()
	m.driveLocked([]driveWaiter{{fn: fn}})
	for range driveBatches {
		m.combMu.Lock()
		batch := m.pending
		m.pending = nil
		if len(batch) == 0 {
			m.driving = false
			m.combMu.Unlock()
			return
		}
		m.combMu.Unlock()
		m.driveLocked(batch)
	}
	m.combMu.Lock()
	if len(m.pending) == 0 {
		m.driving = false
	} else {
		next := m.pending[0]
		m.pending = m.pending[1:]
		next.done <- true
	}
	m.combMu.Unlock()
}

// driveBatches bounds the batches one driver runs for others.
const driveBatches = 4

// driveWaiter is a caller of drive waiting for the driver: done receives
// false once fn has run, true when the caller is to drive itself.
type driveWaiter struct {
	fn   func(p *quorum.Proposer)
	done chan bool
}

// driveLocked runs the batch's functions, then the proposer's Ready, and
// lets the batch's callers go (propMu held).
func (m *Mesh) driveLocked(batch []driveWaiter) {
	defer func() {
		for _, w := range batch {
			if w.done != nil {
				w.done <- false
			}
		}
	}()
	if m.prop == nil {
		return
	}
	for _, w := range batch {
		if w.fn != nil {
			w.fn(m.prop)
		}
	}
	for m.prop.HasReady() {
		rd := m.prop.Ready()
		for _, ev := range rd.Leases {
			m.leaseEvent(ev)
		}
		for _, res := range rd.Results {
			m.result(res)
		}
		m.prop.ReuseResults(rd.Results)
		for i := range rd.Requests {
			req := &rd.Requests[i]
			if req.To == m.name {
				if resp := m.localRequest(req); resp != nil {
					m.prop.Step(resp)
					quorum.RecycleResults(resp.Results)
				}
				quorum.RecycleOps(req.Ops)
				continue
			}
			m.sendRequest(req)
		}
		m.prop.ReuseRequests(rd.Requests)
		m.sendPushes(rd.Pushes)
		m.sendLists(rd.Lists)
	}
	if cur := m.current.Load(); cur == nil || cur.ID != m.prop.Membership().ID {
		m.configChanged()
	}
	if at, ok := m.prop.NextTick(); ok && at < m.armed {
		m.kickTimer()
	}
}

// localRequest hands a request of this node's proposer to its own acceptor.
func (m *Mesh) localRequest(req *quorum.Request) *quorum.Response {
	m.accMu.Lock()
	if m.acc == nil || m.notVoting() {
		m.accMu.Unlock()
		return quorum.NoAcceptorResponse(m.prop.Membership(), m.name, m.inc, req)
	}
	resp := m.acc.HandleRequest(req)
	ard := m.acc.Ready()
	m.accMu.Unlock()
	m.acceptorReady(ard, true)
	return resp
}

// sendRequest sends a request to another voter (through its outbox, see
// post); its answer is stepped when it comes.
func (m *Mesh) sendRequest(req *quorum.Request) {
	addr, ok := m.book.rpcAddr(string(req.To))
	if !ok {
		m.incr("send.unknown_peer", 1)
		return // not seen in gossip yet: its votes will be missing this round
	}
	m.post(addr, req)
}

// call sends one request to voter to at addr and steps the answer, which
// must come from that voter: a vote is counted by the name it carries, so
// the transport checks that the peer is to (with TLS, by its certificate)
// and checkAnswer that the answer is signed to, by the incarnation bound to
// to (identity.go).
func (m *Mesh) call(addr string, to quorum.NodeID, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.roundTimeout())
	defer cancel()
	reply, err := m.tr.Call(ctx, string(to), addr, body)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrClosed) {
			m.callFailed(addr, err)
		}
		return
	}
	m.incr("bytes.received", float32(len(reply)))
	resp, err := m.lim.decodeResponse(reply)
	if err == nil {
		err = m.checkAnswer(to, addr, resp.From, resp.Inc)
	}
	if err != nil {
		m.incr("rpc.malformed", 1)
		m.countLimit(err)
		if m.noisy.allow("bad response " + addr) {
			m.log.Warn("bad ballot response", "peer", addr, "error", err)
		}
		return
	}
	m.drive(func(p *quorum.Proposer) { p.Step(resp) })
	quorum.RecycleResults(resp.Results)
}

// acceptorReady sends what the acceptor wants sent. Notifies to this node
// go straight to its proposer: underProp says whether propMu is held.
func (m *Mesh) acceptorReady(ard quorum.AcceptorReady, underProp bool) {
	for i := range ard.Notifies {
		n := &ard.Notifies[i]
		if n.To == m.name {
			if underProp {
				m.prop.HandleNotify(n)
			} else {
				go m.drive(func(p *quorum.Proposer) { p.HandleNotify(n) })
			}
			continue
		}
		addr, ok := m.book.rpcAddr(string(n.To))
		if !ok {
			continue
		}
		m.incr("messages.sent", 1)
		_ = m.tr.Send(string(n.To), addr, encodeNotify(n))
	}
	for i := range ard.CatchUps {
		req := ard.CatchUps[i]
		addr, ok := m.book.rpcAddr(string(req.To))
		if !ok {
			continue
		}
		body, err := encode(kindCatchUp, &req)
		if err != nil {
			continue
		}
		go m.catchUpCall(addr, req.To, body)
	}
}

func (m *Mesh) catchUpCall(addr string, to quorum.NodeID, body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*m.cfg.roundTimeout())
	defer cancel()
	reply, err := m.tr.Call(ctx, string(to), addr, body)
	if err != nil {
		return
	}
	resp, err := m.lim.decodeCatchUpReply(reply)
	if err == nil {
		err = m.checkAnswer(to, addr, resp.From, resp.Inc)
	}
	if err != nil {
		m.incr("rpc.malformed", 1)
		m.countLimit(err)
		m.log.Warn("bad catch-up response", "peer", addr, "error", err)
		return
	}
	m.accMu.Lock()
	was := m.acc.State()
	m.acc.HandleCatchUpResponse(resp)
	now := m.acc.State()
	floor := m.acc.FloorOnly()
	ard := m.acc.Ready()
	m.accMu.Unlock()
	m.acceptorAdopted() // the answer may have named a newer configuration
	if was != quorum.Live && now == quorum.Live {
		if floor {
			m.log.Info("voting; no majority of voters had state to catch up from (a new mesh, or most voters restarted together), so fencing tokens continue from the wall clock")
		} else {
			m.log.Info("voting, caught up from the other voters")
		}
	}
	m.acceptorReady(ard, false)
	m.kickTimer()
}

// handler answers the ballot transport.
type handler struct{ m *Mesh }

// errUnknownPeer refuses a node gossip has never shown.
var errUnknownPeer = fmt.Errorf("mesh: unknown peer: %w", transport.ErrRejectPeer)

func (h handler) HandleRequest(from string, body []byte) ([]byte, error) {
	m := h.m

	if !m.book.known(from) {
		m.incr("rpc.unknown_peer", 1)
		if m.noisy.allow(from) {
			// Common for a moment while a new node's join spreads through
			// gossip; persistent for a stranger.
			m.log.Warn("refusing ballot messages from a node gossip does not know", "peer", from)
		}
		return nil, errUnknownPeer
	}
	m.incr("messages.received", 1)
	m.incr("bytes.received", float32(len(body)))
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: empty body: %w", errMalformed, transport.ErrRejectPeer)
	}
	switch body[0] {
	case kindRequest:
		return m.handleRequest(from, body)
	case kindCatchUp:
		return m.handleCatchUp(from, body)
	case kindConfigFetch:
		return m.handleConfigFetch()
	}
	m.incr("rpc.malformed", 1)
	return nil, fmt.Errorf("%w: kind %d: %w", errMalformed, body[0], transport.ErrRejectPeer)
}

func (m *Mesh) refuse(from string, err error) ([]byte, error) {
	m.incr("rpc.malformed", 1)
	kind := m.countLimit(err)
	if m.noisy.allow("malformed " + kind + " " + from) { // one line a minute per kind of fault and peer
		m.log.Warn("refusing a malformed ballot message", "peer", from, "error", err)
	}
	return nil, fmt.Errorf("%w: %w", err, transport.ErrRejectPeer)
}

func (m *Mesh) handleRequest(from string, body []byte) ([]byte, error) {
	req, err := m.lim.decodeRequest(body)
	if err != nil {
		return m.refuse(from, err)
	}
	if string(req.From) != from {
		return m.refuse(from, fmt.Errorf("%w: sent by %s in the name of %s", errMalformed, from, req.From))
	}
	if err := m.checkSender(req); err != nil {
		return nil, err
	}
	m.accMu.Lock()
	var resp *quorum.Response
	var ard quorum.AcceptorReady
	if m.acc == nil || m.notVoting() {
		cur := m.current.Load()
		if cur == nil {
			m.accMu.Unlock()
			return nil, fmt.Errorf("mesh: %s has no voter configuration yet", m.name)
		}
		resp = quorum.NoAcceptorResponse(*cur, m.name, m.inc, req)
	} else {
		resp = m.acc.HandleRequest(req)
		ard = m.acc.Ready()
	}
	m.accMu.Unlock()
	if resp.Status == quorum.StatusWrongConfig {
		m.wrongConfig(from, req.Config, resp.Config, "ballots")
	}
	m.acceptorReady(ard, false)
	m.kickTimer()
	body = encodeResponse(resp)
	quorum.RecycleOps(req.Ops)
	quorum.RecycleResults(resp.Results)
	return body, nil
}

func (m *Mesh) handleCatchUp(from string, body []byte) ([]byte, error) {
	var req quorum.CatchUpRequest
	if err := decode(body, kindCatchUp, &req); err != nil {
		return m.refuse(from, err)
	}
	if string(req.From) != from {
		return m.refuse(from, fmt.Errorf("%w: sent by %s in the name of %s", errMalformed, from, req.From))
	}
	m.accMu.Lock()
	var resp *quorum.CatchUpResponse
	if m.acc == nil || m.notVoting() {
		cur := m.current.Load()
		if cur == nil {
			m.accMu.Unlock()
			return nil, fmt.Errorf("mesh: %s has no voter configuration yet", m.name)
		}
		resp = quorum.NoAcceptorCatchUp(*cur, m.name, m.inc, &req)
	} else {
		resp = m.acc.HandleCatchUp(&req)
	}
	m.accMu.Unlock()
	if resp.Status == quorum.StatusWrongConfig {
		m.wrongConfig(from, req.Config, resp.Config, "a catch-up")
	}
	return encode(kindCatchUpReply, resp)
}

// wrongConfig counts and reports a message of another configuration. One
// of this mesh (an older or newer version) is routine while a change
// spreads: the answer tells the sender ours, or makes it push its own. One
// of another mesh is refused for good.
func (m *Mesh) wrongConfig(from string, theirs, ours uint64, what string) {
	m.incr("rpc.wrong_config", 1)
	t, o := quorum.Membership{ID: theirs}, quorum.Membership{ID: ours}
	if t.Cluster() == o.Cluster() {
		m.log.Debug("a message of another version of the voter configuration", "peer", from, "what", what,
			"theirs", t.Version(), "ours", o.Version())
		return
	}
	if m.noisy.allow("wrong config " + from) {
		m.log.Warn("refusing "+what+" of another voter configuration (another mesh, founded by other voters)", "peer", from, "theirs", theirs, "ours", ours)
	}
}

func (h handler) HandleMessage(from string, body []byte) {
	m := h.m
	if !m.book.known(from) {
		m.incr("rpc.unknown_peer", 1)
		return
	}
	m.incr("messages.received", 1)
	if len(body) > 0 && body[0] == kindPush {
		m.handlePush(from, body)
		return
	}
	n, err := m.lim.decodeNotify(body)
	if err != nil || string(n.From) != from {
		m.incr("rpc.malformed", 1)
		kind := m.countLimit(err)
		if m.noisy.allow("malformed notification " + kind + " " + from) {
			m.log.Warn("ignoring a malformed notification", "peer", from, "error", err)
		}
		return
	}
	m.drive(func(p *quorum.Proposer) { p.HandleNotify(n) })
}

// timerLoop ticks the state machines when their timers are due.
func (m *Mesh) timerLoop() {
	defer m.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := m.nextTick()
		wait := next - m.clock.Now()
		if wait < 0 {
			wait = 0
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
		select {
		case <-m.closed:
			return
		case <-m.kick:
			continue
		case <-t.C:
		}
		m.tick()
	}
}

// nextTick is when either state machine next needs a tick (an hour away if
// neither does; a kick comes when that changes).
func (m *Mesh) nextTick() time.Duration {
	next := m.clock.Now() + time.Hour
	m.accMu.Lock()
	if m.acc != nil {
		if at, ok := m.acc.NextTick(); ok && at < next {
			next = at
		}
	}
	m.accMu.Unlock()
	m.propMu.Lock()
	if m.prop != nil {
		if at, ok := m.prop.NextTick(); ok && at < next {
			next = at
		}
	}
	m.armed = next
	m.propMu.Unlock()
	return next
}

func (m *Mesh) tick() {
	m.accMu.Lock()
	var ard quorum.AcceptorReady
	if m.acc != nil {
		was := m.acc.State()
		m.acc.Tick()
		ard = m.acc.Ready()
		if was == quorum.Quarantined && m.acc.State() != quorum.Quarantined {
			m.log.Info("quarantine over; catching up from the other voters")
		}
	}
	m.accMu.Unlock()
	m.acceptorReady(ard, false)
	m.drive(func(p *quorum.Proposer) { p.Tick() })
}

func (m *Mesh) kickTimer() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
