package quorum

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/lockmesh/lockmesh/internal/slicepool"
)

// A Node is everything one node of a mesh decides that is not I/O: its
// proposer, its acceptor when it is a voter, and the rules between the two
// that used to live in the driver:
//
//   - both halves are on one voter configuration, the newest either has
//     adopted (every configuration either adopts was chosen);
//   - a node that a configuration makes a voter gets an acceptor: empty and
//     voting at once only for the incarnation a change added (it never voted
//     before), quarantined and caught up for any other;
//   - a node with no acceptor, or whose acceptor is silenced, answers
//     ballots and catch-ups as a node that does not vote, with the
//     configuration it knows;
//   - what the node sends itself never leaves it.
//
// Like etcd's RawNode it is driven from outside, by one goroutine at a time:
// Step takes every message, Tick the time, the operation methods the
// caller's requests, and Ready hands out what to send and what happened;
// Advance takes back every buffer Ready handed out. The mesh drives it over
// the network; the simulator drives the same code on virtual time.
type Node struct {
	cfg   NodeConfig
	id    NodeID
	inc   uint64
	prop  *Proposer
	acc   *Acceptor      // nil while not a voter
	obs   voterObservers // nodes observing keys at this voter (observe_voter.go)
	m     Membership
	voter bool // m names this node
	quiet bool // Silence
	// peerTTL is the longest lease another running node said it holds
	// (SetPeerTTL).
	peerTTL time.Duration

	out     []Message   // replies waiting for Ready
	held    [][]Request // the proposer's request slices, until Advance
	spare   readyBuffers
	changed bool // m changed since the last Ready
	state   VotingState
	// answered, when a test sets it, sees every ballot request the node
	// answers (its own included) and the answer.
	answered func(req *Request, resp *Response)
}

// NodeConfig configures a Node. The proposer's and the acceptor's settings
// are as in ProposerConfig and AcceptorConfig.
type NodeConfig struct {
	ID          NodeID
	Incarnation uint64
	// Membership is the configuration to start from: the founding voters,
	// or one learned from another node.
	Membership Membership
	Clock      Clock
	Rand       *rand.Rand

	RoundTimeout   time.Duration
	Backoff        time.Duration
	CleanupTimeout time.Duration
	Drift          float64
	MaxIdleKeys    int

	MaxTTL         time.Duration
	Quarantine     time.Duration
	CatchUpBuckets uint32
	RetryInterval  time.Duration
	HandoffGrace   time.Duration
	MaxRegisters   int
	RegisterIdle   time.Duration

	// Disk keeps the acceptor's durable state, and Durable is what it
	// saved before (nil: nothing yet); see AcceptorConfig. The node starts
	// on the newer of Membership and the saved configuration.
	Disk    Disk
	Durable *Durable
	// NewMesh is the operator's word that the mesh is brand-new
	// (AcceptorConfig.NewMesh).
	NewMesh bool

	// rules, set by tests only, break rules of the protocol on purpose.
	rules nodeRules
}

// nodeRules break rules of the protocol on purpose, in every proposer and
// acceptor the node makes: set by tests only (nil: the protocol's rules).
type nodeRules struct {
	acc  func(*acceptorRules)
	prop func(*proposerRules)
}

// MessageKind says which payload a Message carries.
type MessageKind uint8

const (
	// MsgRequest carries ballot operations for an acceptor; it is
	// answered by a MsgResponse.
	MsgRequest MessageKind = iota + 1
	MsgResponse
	// MsgNotify tells a proposer that keys it waits for are free.
	MsgNotify
	// MsgCatchUp asks a voter for its registers (a recovering acceptor) or
	// its keys (a voter change, CatchUpRequest.List); answered by a
	// MsgCatchUpReply.
	MsgCatchUp
	MsgCatchUpReply
	// MsgPush carries a chosen configuration to a node that is behind.
	MsgPush
)

func (k MessageKind) String() string {
	switch k {
	case MsgRequest:
		return "request"
	case MsgResponse:
		return "response"
	case MsgNotify:
		return "notify"
	case MsgCatchUp:
		return "catch-up"
	case MsgCatchUpReply:
		return "catch-up reply"
	case MsgPush:
		return "push"
	}
	return "message?"
}

// Message is everything nodes send each other, as etcd's raftpb.Message
// is: one envelope (Kind, From, To, Ref) and the payload its Kind names,
// the others nil. From and To are the sender and the addressee: the node
// sets them on every message it makes, and a driver routes by them. The
// payloads keep From and To of their own for the wire, whose format has
// not changed; Step writes the envelope's into the payload before either
// half reads it, so that the halves see the sender the driver vouches for
// (the mesh: the peer its transport authenticated), and no payload that
// names another reaches a vote. A request and its reply are matched by
// Ref, which the driver sets on a request it received and the node copies
// onto the reply; the node's own messages have Ref zero.
//
// Who owns what, in two rules. Step takes the payload of the message it is
// given, except a request's operations and a response's results, which it
// is done with when it returns: the caller may reuse those slices (the mesh
// decodes into them again); the rest it must not use afterwards. A Ready
// and its messages are the caller's until it calls Advance, which takes
// back the Ready's slices and the operations and results its messages
// carry, for later Readys: encode or copy what must outlive Advance.
type Message struct {
	Kind         MessageKind
	From, To     NodeID
	Ref          uint64
	Request      *Request
	Response     *Response
	Notify       *Notify
	CatchUp      *CatchUpRequest
	CatchUpReply *CatchUpResponse
	Push         *ConfigPush
}

// Ready is what a node wants done and what happened since the last Ready.
type Ready struct {
	// Messages are to send, each from this node to its To; replies carry
	// the Ref of the request they answer.
	Messages []Message
	Results  []OpResult
	Leases   []LeaseEvent
	// Config is the node's configuration when it changed since the last
	// Ready (nil otherwise): announce it, and log it.
	Config *Membership
	// Voting is the node's voting state when it changed (nil otherwise).
	Voting *VotingState
	// Changes are the states of observed keys (Observe), in order per key.
	Changes []KeyChange
}

// VotingState says whether and how the node votes.
type VotingState struct {
	// Voter: the configuration names this node. Acceptor is its
	// acceptor's state (meaningful for a voter).
	Voter    bool
	Acceptor AcceptorState
	// FloorOnly: the acceptor went live after the voters of a majority
	// had lost their state together; tokens then rest on the wall clock.
	FloorOnly bool
	// Silenced: the node answers as a non-voter (Node.Silence).
	Silenced bool
	// DiskFailed: a save of the acceptor's durable state failed, and it
	// votes no more (Node.DiskError says why).
	DiskFailed bool
}

// readyBuffers are the slices of an earlier Ready, given back by Advance.
type readyBuffers struct {
	msgs    []Message
	results []OpResult
	leases  []LeaseEvent
}

// NewNode returns a node on cfg.Membership, with an acceptor if it names
// the node as a voter.
func NewNode(cfg NodeConfig) (*Node, error) {
	if err := cfg.Membership.Validate(); err != nil {
		return nil, err
	}
	if d := cfg.Durable; d != nil {
		if cfg.Disk == nil {
			return nil, fmt.Errorf("%w: %s has a saved state but no disk", ErrBadConfig, cfg.ID)
		}
		if err := d.Validate(); err != nil {
			return nil, err
		}
		if d.Membership.ID != 0 && d.Membership.Cluster() != cfg.Membership.Cluster() {
			return nil, fmt.Errorf("%w: %s saved a configuration of another mesh (%#x, not %#x)",
				ErrBadConfig, cfg.ID, d.Membership.Cluster(), cfg.Membership.Cluster())
		}
		// Never back to an older configuration than the newest the node
		// adopted (design.md R53).
		cfg.Membership, _ = acceptorRulesWith(cfg.rules.acc).restartConfig(cfg.Membership, d)
	}
	p, err := NewProposer(ProposerConfig{
		ID: cfg.ID, Incarnation: cfg.Incarnation, Membership: cfg.Membership, Clock: cfg.Clock,
		Rand: cfg.Rand, RoundTimeout: cfg.RoundTimeout, Backoff: cfg.Backoff, Drift: cfg.Drift,
		CleanupTimeout: cfg.CleanupTimeout, MaxIdleKeys: cfg.MaxIdleKeys, rules: cfg.rules.prop,
	})
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, id: cfg.ID, inc: cfg.Incarnation, prop: p, m: cfg.Membership.clone(), changed: true}
	n.voter = n.m.IsVoter(n.id)
	if err := n.maybeVote(); err != nil {
		return nil, err
	}
	return n, nil // the first Ready reports the configuration and the voting state
}

// maybeVote makes the node's acceptor when its configuration has made it a
// voter. Only the incarnation that a change added may start empty and vote
// at once: it never voted before (a voter's name is never reused). Any other
// may have voted in an earlier life and forgotten it.
func (n *Node) maybeVote() error {
	if n.acc != nil || !n.voter {
		return nil
	}
	inc, joined := n.m.JoinedAs(n.id)
	a, err := NewAcceptor(AcceptorConfig{
		ID: n.id, Incarnation: n.inc, Membership: n.m, Clock: n.cfg.Clock,
		MaxTTL: n.cfg.MaxTTL, Quarantine: n.cfg.Quarantine, CatchUpBuckets: n.cfg.CatchUpBuckets,
		RetryInterval: n.cfg.RetryInterval, HandoffGrace: n.cfg.HandoffGrace, Drift: n.cfg.Drift,
		MaxRegisters: n.cfg.MaxRegisters, RegisterIdle: n.cfg.RegisterIdle,
		Fresh: joined && inc == n.inc, Disk: n.cfg.Disk, Durable: n.cfg.Durable, NewMesh: n.cfg.NewMesh,
		breakRules: n.cfg.rules.acc,
	})
	if err != nil {
		return fmt.Errorf("quorum: %s cannot vote: %w", n.id, err)
	}
	a.SetPeerTTL(n.peerTTL)
	n.acc = a
	return nil
}

// SetPeerTTL tells the node the longest lease that another running node
// says it holds, when that is longer than some voter's MaxTTL (its mesh
// reads it from the nodes' gossip metadata). Its acceptor, now or once it
// has one, reports it to restarted voters as a lease horizon, and waits it
// out after its own restart (Acceptor.SetPeerTTL): in a rolling restart
// that lowers MaxTTL, such a lease may have been accepted only by voters
// of the old setting, which may all have lost their state.
func (n *Node) SetPeerTTL(h time.Duration) {
	n.peerTTL = h
	if n.acc != nil {
		n.acc.SetPeerTTL(h)
	}
}

// sync brings the proposer and the acceptor to the newer of their
// configurations (each adopts only a newer one of its cluster), and makes
// the acceptor if the node has become a voter.
func (n *Node) sync() {
	if n.prop.m.ID == n.m.ID && (n.acc == nil || n.acc.m.ID == n.m.ID) {
		return // the common case: nothing changed (and the acceptor, if due, exists)
	}
	m := n.prop.Membership()
	if n.acc != nil && m.Newer(n.acc.Membership()) {
		m = n.acc.Membership()
	}
	n.prop.Adopt(m)
	if n.acc != nil {
		n.acc.Adopt(m)
	}
	if m.ID != n.m.ID {
		n.m = m.clone()
		n.voter = n.m.IsVoter(n.id)
		n.changed = true
	}
	if err := n.maybeVote(); err != nil {
		// Only a configuration that passed Validate gets here, and the
		// node's own settings were checked by NewNode: unreachable.
		panic(err)
	}
}

// Membership is the configuration the node is on.
func (n *Node) Membership() Membership { return n.m }

// Voting reports whether and how the node votes.
func (n *Node) Voting() VotingState { return n.votingState() }

func (n *Node) votingState() VotingState {
	st := VotingState{Voter: n.voter, Silenced: n.quiet}
	if n.acc != nil {
		st.Acceptor, st.FloorOnly = n.acc.State(), n.acc.FloorOnly()
		st.DiskFailed = n.acc.DiskError() != nil
	}
	return st
}

// DiskError is the error that stopped the node's acceptor from voting, if
// a save of its durable state failed.
func (n *Node) DiskError() error {
	if n.acc == nil {
		return nil
	}
	return n.acc.DiskError()
}

// Recovery reports what the node's acceptor waits for before it votes
// (zero when it votes, or is no voter).
func (n *Node) Recovery() Recovery {
	if n.acc == nil {
		return Recovery{}
	}
	return n.acc.Recovery()
}

// Silence makes the node answer as one that does not vote (quiet), or vote
// again. The mesh silences a node that found an earlier process of its name
// still running, so that the two never count as two votes.
func (n *Node) Silence(quiet bool) { n.quiet = quiet }

// Proposer and Acceptor give tests and status pages the node's halves
// (Acceptor is nil while the node is not a voter). Drive the node, not
// them.
func (n *Node) Proposer() *Proposer { return n.prop }
func (n *Node) Acceptor() *Acceptor { return n.acc }

// Adopt switches the node to m if it is a newer configuration of its
// cluster (learned from gossip, say), and reports whether it did. Only a
// chosen configuration may be adopted.
func (n *Node) Adopt(m Membership) bool {
	ok := n.prop.Adopt(m)
	n.sync()
	return ok
}

// Acquire, Release, Read, Cancel and ChangeVoters start the proposer's
// operations (see Proposer); results come through Ready.
func (n *Node) Acquire(key string, o AcquireOptions) (OpID, error) { return n.prop.Acquire(key, o) }
func (n *Node) Release(key string, epoch uint64, deadline time.Duration) (OpID, error) {
	return n.prop.Release(key, epoch, deadline)
}
func (n *Node) Read(key string, deadline time.Duration) (OpID, error) {
	return n.prop.Read(key, deadline)
}
func (n *Node) Cancel(id OpID) { n.prop.Cancel(id) }
func (n *Node) ChangeVoters(add NodeID, addInc uint64, remove NodeID, deadline time.Duration) (OpID, error) {
	return n.prop.ChangeVoters(add, addInc, remove, deadline)
}

// Holds reports the lease this node holds on key, if any.
func (n *Node) Holds(key string) (epoch uint64, deadline time.Duration, ok bool) {
	return n.prop.Holds(key)
}

// TagLease attaches tag to the lease this node holds on key at epoch, for
// every later LeaseEvent about it to carry (LeaseEvent.Tag): the driver's
// own record of the lease, so that it need not look it up by key for each
// renewal. It reports whether the node holds that lease.
func (n *Node) TagLease(key string, epoch uint64, tag any) bool {
	return n.prop.TagLease(key, epoch, tag)
}

// LeaseTag is the tag of the lease this node holds on key: nil if it holds
// none, or TagLease gave it none (or took it off with a nil tag). With it
// the driver keeps no table of its leases beside the node's.
func (n *Node) LeaseTag(key string) any { return n.prop.LeaseTag(key) }

// LeaseTags are the tags of the leases this node holds that have one.
func (n *Node) LeaseTags() []any { return n.prop.LeaseTags() }

// TaggedLeases is how many leases this node holds with a tag.
func (n *Node) TaggedLeases() int { return n.prop.Tagged() }

// Step takes a message from another node (see Message for who owns what).
// The payload's sender and addressee are the envelope's from here on.
func (n *Node) Step(msg *Message) {
	switch msg.Kind {
	case MsgRequest:
		req := msg.Request
		req.From, req.To = msg.From, msg.To
		resp := n.answer(req)
		resp.To = msg.From
		n.reply(Message{Kind: MsgResponse, From: n.id, To: msg.From, Ref: msg.Ref, Response: resp})
	case MsgResponse:
		msg.Response.From, msg.Response.To = msg.From, msg.To
		n.prop.Step(msg.Response)
	case MsgNotify:
		msg.Notify.From, msg.Notify.To = msg.From, msg.To
		n.prop.HandleNotify(msg.Notify)
	case MsgCatchUp:
		msg.CatchUp.From, msg.CatchUp.To = msg.From, msg.To
		resp := n.answerCatchUp(msg.CatchUp)
		n.reply(Message{Kind: MsgCatchUpReply, From: n.id, To: msg.From, Ref: msg.Ref, CatchUpReply: resp})
	case MsgCatchUpReply:
		msg.CatchUpReply.From, msg.CatchUpReply.To = msg.From, msg.To
		n.takeCatchUpReply(msg.CatchUpReply)
	case MsgPush:
		msg.Push.From, msg.Push.To = msg.From, msg.To
		n.prop.learn(msg.From, msg.Push.Members)
	}
	n.sync()
}

func (n *Node) reply(msg Message) { n.out = append(n.out, msg) }

// answer is the node's answer to a ballot request: its acceptor's, or, with
// none (or silenced), that of a node that does not vote.
func (n *Node) answer(req *Request) *Response {
	var resp *Response
	if n.acc == nil || n.quiet {
		resp = NoAcceptorResponse(n.m, n.id, n.inc, req)
	} else {
		n.refuseDataLoss(req)
		resp = n.acc.HandleRequest(req)
		n.obs.answered(n.acc, req, resp)
	}
	if n.answered != nil {
		n.answered(req, resp)
	}
	return resp
}

// answerCatchUp answers a catch-up or a key listing, like answer.
func (n *Node) answerCatchUp(req *CatchUpRequest) *CatchUpResponse {
	if n.acc == nil || n.quiet {
		return NoAcceptorCatchUp(n.m, n.id, n.inc, req)
	}
	return n.acc.HandleCatchUp(req)
}

// takeCatchUpReply routes a catch-up answer: a key listing to the proposer
// changing the voters, a register transfer to the recovering acceptor.
func (n *Node) takeCatchUpReply(resp *CatchUpResponse) {
	switch {
	case resp.List:
		n.prop.HandleListResponse(resp)
	case n.acc != nil:
		n.acc.HandleCatchUpResponse(resp)
	}
}

// Tick runs every timer that is due, and asks the voters to forget what
// nobody needs (see acceptor_registers.go).
func (n *Node) Tick() {
	if n.acc != nil {
		n.acc.Tick()
		n.obs.tick(n.acc)
	}
	n.prop.Tick()
	n.sync()
	n.sweep()
}

// maxForgetting bounds the forgets one node runs at once. Forgets ride in
// the same requests as locks (a peek and a forget per key); with 64 a
// voter freed about 130 keys a second past MaxRegisters (bench churn: the
// heap grew 1.2 KB per key locked once), far fewer than a mesh can lock.
const maxForgetting = 512

// sweep starts forgets of this voter's idle free registers.
func (n *Node) sweep() {
	if n.acc == nil {
		return
	}
	room := maxForgetting - n.prop.forgetting
	if n.quiet {
		room = 0 // the acceptor still learns that its sweep is done (NextTick)
	}
	for _, key := range n.acc.SweepCandidates(room) {
		if !n.prop.working(key) {
			// A key this node is working on (a forget started before
			// among them) is not idle: leave it for a later sweep.
			n.prop.forget(key)
		}
	}
}

// NextTick is the earliest time at which Tick has work, or false when it has
// none until a message or a call comes.
func (n *Node) NextTick() (time.Duration, bool) {
	at, ok := n.prop.NextTick()
	if n.acc != nil {
		if t, has := n.acc.NextTick(); has && (!ok || t < at) {
			at, ok = t, true
		}
		if t, has := n.obs.next(); has && (!ok || t < at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// HasReady reports whether Ready has anything.
func (n *Node) HasReady() bool {
	return len(n.out) > 0 || n.changed || n.votingState() != n.state || n.prop.HasReady() ||
		(n.acc != nil && n.acc.hasReady()) || len(n.obs.out) > 0
}

// Ready hands out what the node wants sent and what happened, and forgets
// it. What the node sends itself is delivered before Ready returns.
func (n *Node) Ready() Ready {
	rd := Ready{Messages: n.spare.msgs[:0], Results: n.spare.results[:0], Leases: n.spare.leases[:0]}
	n.spare = readyBuffers{}
	n.held = n.held[:0] // an earlier Ready not advanced: its requests stay with its caller
	for {
		moved := len(n.out) > 0
		rd.Messages = append(rd.Messages, n.out...)
		clear(n.out)
		n.out = n.out[:0]
		if n.prop.HasReady() {
			moved = true
			n.proposerReady(&rd)
		}
		if n.acc != nil && n.acc.hasReady() {
			moved = true
			n.acceptorReady(&rd)
		}
		if len(n.obs.out) > 0 {
			moved = true
			n.observersReady(&rd)
		}
		n.sync()
		if !moved {
			break
		}
	}
	if n.changed {
		m := n.m.clone()
		rd.Config, n.changed = &m, false
	}
	if st := n.votingState(); st != n.state {
		n.state = st
		v := st // (not &st: that moved st to the heap at every Ready)
		rd.Voting = &v
	}
	return rd
}

// proposerReady adds what the proposer wants done to rd, and answers what it
// sends this node.
func (n *Node) proposerReady(rd *Ready) {
	prd := n.prop.Ready()
	rd.Results = append(rd.Results, prd.Results...)
	if len(rd.Leases) == 0 {
		// Hand the proposer's events out as they are, and give it the
		// node's empty slice for its next ones: a renewal pass reports
		// thousands, and copying them (pointers, under the collector's
		// write barriers) cost a holder of 100,000 leases a few percent.
		rd.Leases, prd.Leases = prd.Leases, rd.Leases
	} else {
		rd.Leases = append(rd.Leases, prd.Leases...)
	}
	rd.Changes = append(rd.Changes, prd.Changes...)
	n.prop.reuseResults(prd.Results)
	n.prop.reuseEvents(prd.Leases)
	for i := range prd.Requests {
		req := &prd.Requests[i]
		if req.To != n.id {
			rd.Messages = append(rd.Messages, Message{Kind: MsgRequest, From: n.id, To: req.To, Request: req})
			continue
		}
		resp := n.answer(req)
		n.prop.Step(resp)
		resultsPool.Put(resp.Results)
		opsPool.Put(req.Ops)
		req.Ops = nil
	}
	if prd.Requests != nil {
		n.held = append(n.held, prd.Requests) // pointed into until Advance
	}
	for i := range prd.Pushes {
		if prd.Pushes[i].To != n.id { // this node's acceptor follows in sync
			rd.Messages = append(rd.Messages, Message{Kind: MsgPush, From: n.id, To: prd.Pushes[i].To, Push: &prd.Pushes[i]})
		}
	}
	for i := range prd.Lists {
		req := &prd.Lists[i]
		if req.To != n.id {
			rd.Messages = append(rd.Messages, Message{Kind: MsgCatchUp, From: n.id, To: req.To, CatchUp: req})
			continue
		}
		n.prop.HandleListResponse(n.answerCatchUp(req))
	}
}

// acceptorReady adds what the acceptor wants sent to rd; notifications to
// this node go to its proposer.
func (n *Node) acceptorReady(rd *Ready) {
	ard := n.acc.Ready()
	for i := range ard.Notifies {
		if nt := &ard.Notifies[i]; nt.To == n.id {
			n.prop.HandleNotify(nt)
		} else {
			rd.Messages = append(rd.Messages, Message{Kind: MsgNotify, From: n.id, To: nt.To, Notify: nt})
		}
	}
	for i := range ard.CatchUps {
		req := &ard.CatchUps[i]
		rd.Messages = append(rd.Messages, Message{Kind: MsgCatchUp, From: n.id, To: req.To, CatchUp: req})
	}
}

// Advance takes back a Ready the caller is done with (it has encoded or
// copied its messages and read its results): the Ready's slices, and the
// operations of its requests and the results of its responses, for later
// Readys to fill. It is the one hand-back of the Node; without it nothing
// is reused, and what was handed out is garbage collected.
func (n *Node) Advance(rd Ready) {
	for i := range rd.Messages {
		switch msg := &rd.Messages[i]; msg.Kind {
		case MsgRequest:
			opsPool.Put(msg.Request.Ops)
			msg.Request.Ops = nil
		case MsgResponse:
			resultsPool.Put(msg.Response.Results)
			msg.Response.Results = nil // a response kept by mistake shows none, not another's
		}
	}
	clear(rd.Messages) // let the payloads go
	n.spare = readyBuffers{msgs: slicepool.Emptied(rd.Messages), results: slicepool.Emptied(rd.Results),
		leases: slicepool.Emptied(rd.Leases)}
	if len(n.held) > 0 {
		n.prop.reuseRequests(n.held[0])
		clear(n.held)
		n.held = n.held[:0]
	}
}

// Stats returns counters of what the node's halves did.
func (n *Node) Stats() (ProposerStats, AcceptorStats) {
	var as AcceptorStats
	if n.acc != nil {
		as = n.acc.Stats()
	}
	return n.prop.Stats(), as
}
