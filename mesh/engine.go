package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
	"github.com/lockmesh/lockmesh/transport"
)

// The engine drives this node's quorum.Node: every decision of the node
// is the Node's; the engine moves bytes and time. One goroutine at a time
// drives the Node, under nodeMu (see drive).

// outcome is what a waiting caller receives.
type outcome struct {
	res   quorum.OpResult
	lease *Lease // for a grant
	err   error
}

// outcomeChans keeps the one-slot channels through which results reach
// the callers of runOp. A channel goes back only once its
// value was received, or when it was never registered: result sends at most
// once on each, deleting the waiter first, so a reused channel is empty and
// nothing else will send on it.
var outcomeChans = sync.Pool{New: func() any { return make(chan outcome, 1) }}

// drive runs fn on the node, then does everything the node wants done:
// sends its messages, hands results to waiting callers, updates leases.
// fn has run, and what it caused has been handed out, when drive returns.
//
// Callers combine: one that finds another goroutine driving hands fn over
// and waits, and the driver runs every fn handed to it before it reads the
// node's Ready. So under load nodeMu changes hands once per batch of
// callers rather than once per caller, and their operations leave
// together, one message per voter. A driver serves at most driveBatches
// batches, then hands the role to the next waiter.
func (m *Mesh) drive(fn func(n *quorum.Node)) { m.run(driveWaiter{fn: fn}) }

// step is drive for a message from the network: the node steps it.
func (m *Mesh) step(msg *quorum.Message) { m.run(driveWaiter{step: msg}) }

// stepAnswer steps the answer to a ballot request, then gives its results
// back to wire.ResultsPool. Unlike step it does not wait when another
// goroutine is driving: that driver steps it with its next batch, and the
// transport's reader that brought it goes back to reading at once instead
// of parking until the driver wakes it.
func (m *Mesh) stepAnswer(resp *quorum.Response) { m.run(driveWaiter{answer: resp}) }

// run is drive for any work a driveWaiter can carry.
func (m *Mesh) run(work driveWaiter) {
	m.combMu.Lock()
	if m.driving {
		if work.answer != nil {
			m.pending = append(m.pending, work)
			m.combMu.Unlock()
			return // the driver steps it
		}
		w := work
		w.done = make(chan bool, 1)
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
	m.driveAll([]driveWaiter{work})
}

// driveAll runs batch, then what others hand over meanwhile, for at most
// driveBatches batches; then it hands the role of driver on (the caller
// has it).
func (m *Mesh) driveAll(batch []driveWaiter) {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	m.driveLocked(batch)
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
	defer m.combMu.Unlock()
	waits := slices.IndexFunc(m.pending, func(w driveWaiter) bool { return w.done != nil })
	switch {
	case len(m.pending) == 0:
		m.driving = false
	case waits >= 0:
		// The first caller waiting drives next, and the answers queued
		// before it with its first batch.
		next := m.pending[waits]
		m.pending = slices.Delete(m.pending, waits, waits+1)
		next.done <- true
	default:
		// Only answers wait, and nobody waits with them to drive: a
		// goroutine of their own does.
		go m.driveAll(nil)
	}
}

// driveBatches bounds the batches one driver runs for others.
const driveBatches = 4

// driveWaiter is work for the driver, and its caller waiting: done receives
// false once the work is done, true when the caller is to drive itself.
// The work is one of: a function to run on the node (fn), an operation to
// start (op, see runOp), a message for the node to step (step), a request
// from the network whose answer the caller waits for (in), an answer to a
// ballot request (answer), whose caller does not wait (done is nil).
type driveWaiter struct {
	fn     func(n *quorum.Node)
	op     *opRun
	step   *quorum.Message
	in     *inbound
	answer *quorum.Response
	done   chan bool
}

// driveLocked runs the batch's functions, then everything the node wants
// done, and lets the batch's callers go (nodeMu held).
func (m *Mesh) driveLocked(batch []driveWaiter) {
	defer func() {
		for _, w := range batch {
			if w.done != nil {
				w.done <- false
			}
		}
	}()
	if m.node == nil {
		return
	}
	m.node.Silence(m.notVoting())
	for _, w := range batch {
		switch {
		case w.fn != nil:
			w.fn(m.node)
		case w.op != nil:
			w.op.startLocked(m, m.node)
		case w.step != nil:
			m.node.Step(w.step)
		case w.in != nil:
			m.inbound[w.in.msg.Ref] = w.in
			m.node.Step(&w.in.msg)
		case w.answer != nil:
			m.node.Step(&quorum.Message{Kind: quorum.MsgResponse, From: w.answer.From, To: m.name, Response: w.answer})
			wire.ResultsPool.Put(w.answer.Results) // the node is done with them (quorum.Message)
		}
	}
	for m.node.HasReady() {
		rd := m.node.Ready()
		if rd.Config != nil {
			m.configChanged(*rd.Config)
		}
		if rd.Voting != nil {
			m.votingChanged(*rd.Voting)
		}
		m.leaseEvents(rd.Leases)
		for _, res := range rd.Results {
			m.result(res)
		}
		for i := range rd.Changes {
			m.keyChanged(&rd.Changes[i])
		}
		for i := range rd.Messages {
			m.send(&rd.Messages[i])
		}
		m.node.Advance(rd)
		if len(m.orphans) > 0 {
			m.releaseOrphans() // (its messages leave with the next Ready)
		}
	}
	if at, ok := m.node.NextTick(); ok && at < m.armed {
		m.kickTimer()
	}
}

// send sends one of the node's messages: a reply to the request it answers
// (see ask), the rest to its addressee. Requests leave through the
// addressee's outbox; catch-ups and key listings are calls whose answers
// are stepped when they come.
func (m *Mesh) send(msg *quorum.Message) {
	if msg.Ref != 0 {
		m.answered(msg)
		return
	}
	to := msg.To
	addr, ok := m.book.rpcAddr(string(to))
	if !ok {
		m.incr("send.unknown_peer", 1)
		return // not seen in gossip yet: its votes will be missing this round
	}
	switch msg.Kind {
	case quorum.MsgRequest:
		m.post(addr, msg.Request)
	case quorum.MsgNotify:
		m.incr("messages.sent", 1)
		if len(msg.Notify.Changes) > 0 {
			m.incr("observe.pushes", 1)
		}
		_ = m.tr.Send(string(to), addr, encodeNotify(msg.Notify))
	case quorum.MsgPush:
		if body, err := encode(kindPush, msg.Push); err == nil {
			m.incr("messages.sent", 1)
			_ = m.tr.Send(string(to), addr, body)
		}
	case quorum.MsgCatchUp:
		if body, err := encode(kindCatchUp, msg.CatchUp); err == nil {
			go m.catchUpCall(addr, to, body)
		}
	}
}

// answer steps the answer of voter to at addr to a ballot request, or
// notes why none came. The answer must come from that voter: a vote is
// counted by the name it carries, so the transport checks that the peer is
// to (with TLS, by its certificate) and checkAnswer that the answer is
// signed to, by the incarnation bound to to (identity.go).
func (m *Mesh) answer(addr string, to quorum.NodeID, reply []byte, err error) {
	if err != nil {
		m.callError(addr, err)
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
	m.stepAnswer(resp)
}

// callError notes a ballot call that failed: a timeout or a closed
// transport says nothing new; the rest may be worth a word (callFailed).
func (m *Mesh) callError(addr string, err error) {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrClosed) {
		m.callFailed(addr, err)
	}
}

// catchUpCall asks voter to at addr for a bucket of its registers (a
// recovering acceptor) or of its keys (a voter change) and steps the
// answer, checked like a ballot answer.
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
		if m.noisy.allow("bad catch-up response " + addr) {
			m.log.Warn("bad catch-up response", "peer", addr, "error", err)
		}
		return
	}
	m.step(&quorum.Message{Kind: quorum.MsgCatchUpReply, From: to, To: m.name, CatchUpReply: resp})
}

// inbound is a request from the network at the node, and the answer the
// driver leaves for its caller (ask).
type inbound struct {
	msg     quorum.Message
	body    []byte // the answer, encoded
	err     error
	config  uint64 // the answer's configuration, when it is not the request's
	version int    // the protocol version to answer in
}

// inbounds keeps inbound records for reuse: one per request from the
// network, given back once its answer is returned.
var inbounds = sync.Pool{New: func() any { return new(inbound) }}

// ask steps a request received from the network at the node, and leaves
// its answer, encoded, in in. The answer comes out of the node's Ready under
// the request's Ref; the driver encodes it there (answered), before the
// node's buffers are reused, so it is in by the time the work is done.
func (m *Mesh) ask(in *inbound) error {
	if m.current.Load() == nil {
		return fmt.Errorf("mesh: %s has no voter configuration yet", m.name)
	}
	in.msg.Ref = m.nextRef.Add(1)
	m.run(driveWaiter{in: in})
	if in.body == nil && in.err == nil {
		return ErrClosed // the node is gone: no answer was made
	}
	return in.err
}

// answered encodes the node's answer to a request from the network for its
// caller (nodeMu held).
func (m *Mesh) answered(msg *quorum.Message) {
	in := m.inbound[msg.Ref]
	if in == nil {
		return
	}
	delete(m.inbound, msg.Ref)
	switch msg.Kind {
	case quorum.MsgResponse:
		in.body = wire.EncodeResponseFor(msg.Response, in.version)
		if msg.Response.Status == quorum.StatusWrongConfig {
			in.config = msg.Response.Config
		}
	case quorum.MsgCatchUpReply:
		if in.version < wire.Version3 && carriesValues(msg.CatchUpReply) {
			in.err = m.refuseOldCatchUp(msg.To)
			return
		}
		in.body, in.err = encode(kindCatchUpReply, msg.CatchUpReply)
		if msg.CatchUpReply.Status == quorum.StatusWrongConfig {
			in.config = msg.CatchUpReply.Config
		}
	}
}

// handler answers the ballot transport.
type handler struct{ m *Mesh }

// errUnknownPeer refuses a node gossip has never shown.
var errUnknownPeer = fmt.Errorf("mesh: unknown peer: %w", transport.ErrRejectPeer)

func (h handler) HandleRequest(from string, body []byte) ([]byte, error) {
	m := h.m

	if !m.book.known(from) {
		m.incr("rpc.unknown_peer", 1)
		// Common for a moment while a new or restarted node's join
		// spreads through gossip; lasting for a stranger.
		m.logRefusal("unknown peer "+from, "refusing ballot messages from a node gossip does not know", "peer", from)
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
	theirs := req.Config
	in := inbounds.Get().(*inbound)
	in.version = m.peerVersion(from)
	req.NoData = in.version < wire.Version3 // it writes back what it read without values
	in.msg = quorum.Message{Kind: quorum.MsgRequest, From: req.From, To: m.name, Request: req}
	err = m.ask(in)
	wire.OpsPool.Put(req.Ops) // the node is done with them (quorum.Message)
	body, config := in.body, in.config
	*in = inbound{}
	inbounds.Put(in)
	if err != nil {
		return nil, err
	}
	if config != 0 {
		m.wrongConfig(from, theirs, config, "ballots")
	}
	return body, nil
}

func (m *Mesh) handleCatchUp(from string, body []byte) ([]byte, error) {
	req, err := m.lim.decodeCatchUp(body)
	if err != nil {
		return m.refuse(from, err)
	}
	if string(req.From) != from {
		return m.refuse(from, fmt.Errorf("%w: sent by %s in the name of %s", errMalformed, from, req.From))
	}
	if req.List && req.Holders {
		return m.answerListing(req) // locks.go
	}
	theirs := req.Config
	in := &inbound{msg: quorum.Message{Kind: quorum.MsgCatchUp, From: req.From, To: m.name, CatchUp: req},
		version: m.peerVersion(from)}
	if err := m.ask(in); err != nil {
		return nil, err
	}
	if in.config != 0 {
		m.wrongConfig(from, theirs, in.config, "a catch-up")
	}
	return in.body, nil
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
	m.otherMesh(from, what) // logs both meshes' voters, once a minute per peer (voters.go)
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
	m.step(&quorum.Message{Kind: quorum.MsgNotify, From: n.From, To: m.name, Notify: n})
}

// timerLoop ticks the node when its timers are due.
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

// nextTick is when the node next needs a tick (an hour away if it does
// not; a kick comes when that changes).
func (m *Mesh) nextTick() time.Duration {
	next := m.clock.Now() + time.Hour
	m.nodeMu.Lock()
	if m.node != nil {
		if at, ok := m.node.NextTick(); ok && at < next {
			next = at
		}
	}
	m.armed = next
	m.nodeMu.Unlock()
	return next
}

func (m *Mesh) tick() {
	m.drive(func(n *quorum.Node) { n.Tick() })
}

func (m *Mesh) kickTimer() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
