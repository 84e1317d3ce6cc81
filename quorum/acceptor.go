package quorum

import (
	"fmt"
	"slices"
	"time"
)

// AcceptorConfig configures an Acceptor.
type AcceptorConfig struct {
	// ID is this node's name. Required.
	ID NodeID
	// Incarnation identifies this start of the node; a new value on every
	// start (the mesh uses the wall clock in nanoseconds). Required, non-zero.
	Incarnation uint64
	// Membership is the voter configuration. ID must be one of its voters.
	Membership Membership
	// Clock is this node's clock. Required.
	Clock Clock
	// MaxTTL is the longest exclusion (Value.TTL) the acceptor agrees to
	// hold. Required, > 0.
	MaxTTL time.Duration
	// Quarantine is how long after its start the acceptor refuses to vote,
	// measured on its own clock. It must cover every lease it may have
	// accepted before it lost its memory: at least MaxTTL, which is at
	// least D_P/γ for the longest lease (see lease.Timing.Quarantine).
	Quarantine time.Duration
	// CatchUpBuckets is how many pieces a catch-up transfer is cut into, so
	// that no single message carries the whole key space. Zero means 16.
	CatchUpBuckets uint32
	// RetryInterval is how long the acceptor waits for a catch-up answer
	// before asking again. Zero means 100ms.
	RetryInterval time.Duration
	// HandoffGrace is how long a waiter told that a key is free has to take
	// it before the next waiter in line is told. Zero means 100ms.
	HandoffGrace time.Duration
	// Drift is ρ, the largest clock-rate error of any node (0.01 = 1%),
	// in [0, 0.5). A timer the acceptor learns from another voter's clock
	// (catch-up) is stretched by (1+ρ)/(1−ρ) to outlast it on this one.
	Drift float64
	// MaxRegisters is how many registers the acceptor keeps before it
	// drops those idle longest that nothing depends on (see
	// acceptor_registers.go). Zero means 65536.
	MaxRegisters int
	// RegisterIdle is how long a register that nothing depends on is kept
	// unused before it is dropped. Zero means 10×MaxTTL.
	RegisterIdle time.Duration
	// Fresh starts the acceptor live, without quarantine or catch-up: only
	// for a node that has just been added to the voters and never voted
	// before (a removed voter's name never returns). An empty acceptor is a
	// correct one; what is dangerous is one that forgot what it did.
	Fresh bool
	// Disk, when set, keeps the acceptor's Durable state (see durable.go),
	// and Durable is the state it saved in its earlier life: nil when it has
	// never saved any (a new disk). Without a disk the acceptor keeps
	// everything in memory, and refuses to vote on voter changes.
	Disk    Disk
	Durable *Durable
	// NewMesh is the operator's word that the mesh is brand-new: no voter
	// has ever voted. It matters only on a new disk (Disk set, Durable
	// nil), which by itself proves nothing, since a wiped disk looks the
	// same: the acceptor then votes at once if a majority of the voters,
	// itself included, say they never voted and none says it has.
	// Without it, it needs the word of so many others that they meet
	// every majority (see maybeGoLive). A voter that hears that some voter
	// voted ignores it (Recovery.NewMeshRefused).
	NewMesh bool

	// breakRules, set by tests only, breaks rules of the protocol on
	// purpose (acceptorRules).
	breakRules func(*acceptorRules)
}

func (c *AcceptorConfig) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: acceptor has no ID", ErrBadConfig)
	case c.Incarnation == 0:
		return fmt.Errorf("%w: acceptor %s has incarnation 0", ErrBadConfig, c.ID)
	case c.Clock == nil:
		return fmt.Errorf("%w: acceptor %s has no clock", ErrBadConfig, c.ID)
	case c.MaxTTL <= 0:
		return fmt.Errorf("%w: acceptor %s: MaxTTL %v must be positive", ErrBadConfig, c.ID, c.MaxTTL)
	case c.Drift < 0 || c.Drift >= 0.5 || c.Drift != c.Drift:
		return fmt.Errorf("%w: acceptor %s: drift %v outside [0, 0.5)", ErrBadConfig, c.ID, c.Drift)
	case c.Quarantine < c.MaxTTL:
		return fmt.Errorf("%w: acceptor %s: quarantine %v is shorter than the longest lease %v it may have accepted",
			ErrBadConfig, c.ID, c.Quarantine, c.MaxTTL)
	}
	if err := c.Membership.Validate(); err != nil {
		return err
	}
	if !c.Membership.IsVoter(c.ID) {
		return fmt.Errorf("%w: acceptor %s is not a voter of configuration %d", ErrBadConfig, c.ID, c.Membership.ID)
	}
	if d := c.Durable; d != nil {
		if c.Disk == nil {
			return fmt.Errorf("%w: acceptor %s has a saved state but no disk", ErrBadConfig, c.ID)
		}
		if err := d.Validate(); err != nil {
			return err
		}
		if d.Membership.ID != 0 && d.Membership.Cluster() != c.Membership.Cluster() {
			return fmt.Errorf("%w: acceptor %s saved a configuration of another mesh (%#x, not %#x)",
				ErrBadConfig, c.ID, d.Membership.Cluster(), c.Membership.Cluster())
		}
	}
	return nil
}

// AcceptorState says whether an acceptor votes.
type AcceptorState uint8

const (
	// Quarantined: restarted without state, waiting out every lease it may
	// have accepted in its earlier life.
	Quarantined AcceptorState = iota
	// CatchingUp: learning promises, values and epochs from other voters.
	CatchingUp
	// Live: voting.
	Live
)

func (s AcceptorState) String() string {
	switch s {
	case Quarantined:
		return "quarantined"
	case CatchingUp:
		return "catching up"
	case Live:
		return "live"
	}
	return "state?"
}

// register is one key as an acceptor keeps it.
type register struct {
	promise Ballot
	// promisedBy is the round (Op.ID) of the prepare that made the
	// promise, zero when an accept's Next or a catch-up made it: only a
	// prepare of that very round may be answered again at that ballot.
	promisedBy uint64
	accepted   Ballot
	value      Value
	maxEpoch   uint64
	// copied: accepted and value came from a catch-up, not from an
	// accept (Result.Copy).
	copied bool
	// looks counts the sweeps that looked at the register since a round
	// last used it (it wraps; see SweepCandidates).
	looks uint8
	// pickedIn is the RegisterIdle period (from 1) in which a sweep last
	// picked the register while it held a grant this voter does not time
	// (pickExpired); in the padding after looks, so the register stays 256
	// bytes.
	pickedIn uint32
	// until is when this acceptor's exclusion timer for value's grant
	// runs out, on its own clock; hasTimer is false when value is free, or
	// a grant this acceptor only learned by a write-back (see Value).
	until    time.Duration
	hasTimer bool
	// line is the key's line of waiters and its hand-off, nil while
	// nobody waits and no hand-off runs: most registers never have one,
	// and a held lease's register lives as long as the lease.
	line *waitLine
	// key names the register; usedAt is when it was last used, and older
	// and newer its neighbours in the acceptor's list of registers by
	// last use (acceptor_registers.go).
	key          string
	usedAt       time.Duration
	older, newer *register
}

// waitLine is a key's line of waiting nodes at one acceptor. handedTo is
// the watcher last told the key is free, and handedUntil the end of its
// hand-off grace. Until then the key is reserved for the nodes that were
// waiting when it was handed (handedTo and the first eligible watchers):
// an acquire of anyone else is refused here without a promise, so that
// the releasing node, or a try-acquire, cannot barge in ahead of the
// waiters, nor disturb their ballots. Any of those waiters may take it:
// other acceptors may have told another of them first. When the grace
// ends with the key still free here, the next watcher is told.
type waitLine struct {
	watchers    []NodeID
	handedTo    NodeID
	handedUntil time.Duration
	eligible    int
}

// waiting is the key's line of waiters (nil when nobody waits).
func (r *register) waiting() []NodeID {
	if r.line == nil {
		return nil
	}
	return r.line.watchers
}

// lineOf is r's line of waiters, made if it has none.
func (r *register) lineOf() *waitLine {
	if r.line == nil {
		r.line = &waitLine{}
	}
	return r.line
}

// endHandoff ends the hand-off running at r, if any.
func (r *register) endHandoff() {
	if r.line != nil {
		r.line.handedTo = ""
		r.tidyLine()
	}
}

// tidyLine lets go of r's line once nobody waits and no hand-off runs.
func (r *register) tidyLine() {
	if l := r.line; l != nil && len(l.watchers) == 0 && l.handedTo == "" {
		r.line = nil
	}
}

// reservedAgainst reports whether a hand-off running at now keeps the key
// from id: id was not waiting for it when it was handed.
func (r *register) reservedAgainst(id NodeID, now time.Duration) bool {
	l := r.line
	if l == nil || l.handedTo == "" || now >= l.handedUntil || id == l.handedTo {
		return false
	}
	return !slices.Contains(l.watchers[:min(l.eligible, len(l.watchers))], id)
}

// remaining is how long the exclusion timer still runs at now.
func (r *register) remaining(now time.Duration) time.Duration {
	if !r.hasTimer || !r.value.Held {
		return 0
	}
	if left := r.until - now; left > 0 {
		return left
	}
	return 0
}

// Acceptor is one voter's half of the protocol: it promises ballots, accepts
// values and runs exclusion timers, for every key. It is a state machine with
// no goroutines: HandleRequest answers messages, Tick advances timers, Ready
// hands out what it wants sent. It is not safe for concurrent use.
//
// An Acceptor always starts as if it had lost its memory: Quarantined for
// AcceptorConfig.Quarantine, then CatchingUp from the other voters, then
// Live. See the package documentation for why both steps are needed.
type Acceptor struct {
	cfg   AcceptorConfig
	m     Membership
	clock Clock

	state     AcceptorState
	startedAt time.Duration
	regs      map[string]*register
	warmSum   time.Duration // see warm

	expiries expiryHeap
	notify   map[NodeID][]notice

	catchUp *catchUp
	// liveFrom is the earliest time the acceptor may vote: its start plus
	// the longest lease horizon it heard of (see CatchUpResponse.Horizon).
	// horizon is that longest lease, reported to others while it matters
	// (until horizonUntil).
	liveFrom time.Duration
	// horizonAsk is what a quarantined acceptor asks the other voters at
	// its start, and again every RetryInterval until each answered: their
	// lease horizons only (a catch-up request of bucket horizonBucket). A voter that
	// knows a longer lease may restart itself before this one's quarantine
	// ends, and then nobody would tell it (soak seed 706611 with 3 voters).
	horizonAsk   []NodeID
	horizonOut   []CatchUpRequest
	horizonAsked time.Duration
	horizon      time.Duration
	horizonUntil time.Duration
	// peerTTL is the longest lease a running node said it holds, as this
	// acceptor's node was last told (SetPeerTTL).
	peerTTL time.Duration
	// floorOnly is set when a majority of voters had lost their state at
	// once, so that the acceptor went live without a majority to catch up
	// from; epochs then rest on the wall-clock floor alone.
	floorOnly bool
	// restartedWith: the voters, by incarnation, whose word this acceptor
	// went live on after a restart of a majority (noteRestartedWith).
	restartedWith map[NodeID]uint64

	// What the disk keeps (durable.go): disk is nil without one; dur is
	// what was saved last; restored is set when the acceptor started from
	// a saved state (its earlier life is known), probing when it has a
	// disk but no saved state and asks the other voters whether any has
	// voted (see maybeGoLive). diskErr, once a save failed, silences it.
	disk     Disk
	dur      Durable
	restored bool
	probing  bool
	amnesiac bool // probed and heard that others voted: recovering as one that forgot
	diskErr  error
	// newMeshRefused is the voter that said it voted while this one
	// probed with NewMesh set: the operator's word was wrong.
	newMeshRefused NodeID

	// Registers by last use, and the floors that stand for the dropped
	// ones (acceptor_registers.go).
	oldest, newest *register
	sweptAt        time.Duration // when SweepCandidates last looked
	sweptFew       bool          // and found few registers it could forget
	promiseFloor   Ballot
	epochFloor     uint64

	stats AcceptorStats
	rules acceptorRules
}

// AcceptorStats counts what an acceptor did.
type AcceptorStats struct {
	Prepares, Accepts, Refused, WrongConfig, Notifies, ConfigChanges uint64
	// Dropped counts the registers dropped (see acceptor_registers.go).
	Dropped uint64
	// Saves counts the durable state's saves (durable.go).
	Saves uint64
	// CatchUpRestarts counts catch-ups begun again because a voter they
	// had merged from restarted meanwhile (acceptor_recovery.go).
	CatchUpRestarts uint64
}

// NewAcceptor returns an acceptor that starts Quarantined.
func NewAcceptor(cfg AcceptorConfig) (*Acceptor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.CatchUpBuckets == 0 {
		cfg.CatchUpBuckets = 16
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 100 * time.Millisecond
	}
	if cfg.HandoffGrace <= 0 {
		cfg.HandoffGrace = 100 * time.Millisecond
	}
	if cfg.MaxRegisters <= 0 {
		cfg.MaxRegisters = 65536
	}
	if cfg.RegisterIdle <= 0 {
		cfg.RegisterIdle = 10 * cfg.MaxTTL
	}
	a := &Acceptor{
		cfg:       cfg,
		m:         cfg.Membership.clone(),
		clock:     cfg.Clock,
		state:     Quarantined,
		startedAt: cfg.Clock.Now(),
		regs:      make(map[string]*register),
		notify:    make(map[NodeID][]notice),
		rules:     acceptorRulesWith(cfg.breakRules),
	}
	a.liveFrom = a.startedAt + cfg.Quarantine
	a.disk = cfg.Disk
	switch {
	case cfg.Durable != nil:
		a.restore(cfg.Durable)
	case cfg.Fresh:
		a.state = Live
		a.persistLive()
	case cfg.Disk != nil:
		// A new disk: if no voter has voted yet, this is a new mesh and
		// nothing needs protecting; ask them before waiting anything out
		// (neverVotedMajorities).
		a.probing = true
		a.startCatchUp()
	}
	if a.state == Quarantined {
		if a.horizonAsk = a.rules.horizonPeers(a); len(a.horizonAsk) > 0 {
			a.askHorizons(a.startedAt)
		}
	}
	return a, nil
}

// horizonPeers are the voters a quarantined acceptor asks for their lease
// horizons (see horizonAsk): every other voter, and those before a pending
// change (design.md R36).
func (a *Acceptor) horizonPeers() []NodeID {
	var ask []NodeID
	for _, v := range append(slices.Clone(a.m.Voters), a.m.Prev...) {
		if v != a.cfg.ID && !slices.Contains(ask, v) {
			ask = append(ask, v)
		}
	}
	return ask
}

// restore starts the acceptor from the state its earlier life saved: on the
// newest configuration it adopted, with its configuration register, its
// epochs above every one it accepted, and, if it ever voted, quarantined for
// the longest lease it may have accepted.
func (a *Acceptor) restore(d *Durable) {
	a.dur = d.clone()
	a.restored = true
	m, vote := a.rules.restartConfig(a.m, &a.dur)
	a.dur.Config = vote
	if a.m.Newer(m) {
		a.m = m
		a.epochFloor = max(a.epochFloor, a.m.EpochFloor)
	}
	if c := a.dur.Config; !c.Promise.IsZero() || !c.Accepted.IsZero() {
		r := a.register(ConfigKey)
		r.promise, r.accepted, r.value = c.Promise, c.Accepted, c.Value
		if v := c.Value.Config; v != nil {
			cc := v.clone()
			r.value.Config = &cc
		}
	}
	a.rules.takeEpochMark(a, a.dur.Reserved)
	a.rules.takeBallotMark(a, a.dur.Ballots)
	if !a.dur.Voted {
		// It never accepted anything: nothing of its earlier life to
		// protect (the incarnation check refuses accepts of the promises
		// it forgot).
		a.state = Live
		a.persistLive()
		return
	}
	a.persistStart()
	a.learnHorizon(a.dur.Horizon)
}

// restartConfig is the configuration an acceptor restarted from d starts
// on, the newer of m and the newest it adopted, and its own promise and
// vote on the configuration register, which d kept (design.md R53).
func restartConfig(m Membership, d *Durable) (Membership, DurableRegister) {
	if m.Newer(d.Membership) {
		m = d.Membership.clone()
	}
	return m, d.Config
}

// takeEpochMark raises the epoch floor to an epoch mark saved on a disk:
// this acceptor's own, or that of a peer recovering from its disk
// (design.md R51).
func (a *Acceptor) takeEpochMark(mark uint64) { a.epochFloor = max(a.epochFloor, mark) }

// takeBallotMark raises the promise floor to the ballot mark this
// acceptor's disk saved (design.md R52).
func (a *Acceptor) takeBallotMark(mark uint64) {
	a.promiseFloor = maxBallot(a.promiseFloor, Ballot{Counter: mark})
}

// maxHeardTTL bounds the lease a refused accept can make an acceptor
// protect (hearLease): lease.MaxTTL, the longest any node may be set to
// grant.
const maxHeardTTL = 24 * time.Hour

// hearLease takes what an accept this acceptor refuses says of a lease
// longer than its own MaxTTL: some proposer holds, or is taking, a lease of
// that TTL, which other voters, or this node's earlier life, may have
// accepted under a longer MaxTTL. The acceptor keeps it as a horizon
// (learnHorizon): restarted voters that ask are told of it, and a
// quarantined acceptor itself votes only once a lease of that length
// accepted before its start has ended.
//
// Without it a rolling restart that lowers MaxTTL, on voters without data
// directories, let a lease outlive what protected it: two voters of three
// accept a 1 s lease, the third (already at 250 ms) refuses it, the two
// lose their state together and come back at 250 ms; every voter then
// reports a 250 ms horizon, they vote after about 250 ms and grant the
// key while the holder's deadline runs
// (TestScenarioLoweredTTLAcrossAMajorityLoss). What is left of that hole
// takes neither the refused accept nor a request from the holder to reach
// the restarted voters while they wait (see the package documentation).
//
// A member can make voters wait up to maxHeardTTL longer after a restart
// this way, as a voter can with the horizon it reports in a catch-up; it
// cannot make them vote sooner.
func (a *Acceptor) hearLease(op *Op) {
	if op.Kind != OpAccept || !op.Value.Held || op.Value.TTL <= a.cfg.MaxTTL || op.Value.TTL > maxHeardTTL ||
		op.Key == "" || op.Ballot.IsZero() || op.Value.Holder == "" {
		return
	}
	a.learnHorizon(op.Value.TTL)
}

// stretch turns a time measured on another node's clock into one on this
// clock that ends no earlier in real time: clock rates may differ by a
// factor of (1+ρ)/(1−ρ).
func (a *Acceptor) stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 + a.cfg.Drift) / (1 - a.cfg.Drift))
}

// Horizon is the longest lease this acceptor may be protecting, or knows
// another voter may be: the most it accepts (MaxTTL), the longer horizon it
// learned when it caught up or from an accept it refused (for as long as a
// lease of that length accepted before could still run), or the longest
// lease a running node says it holds (SetPeerTTL).
func (a *Acceptor) Horizon() time.Duration {
	h := max(a.cfg.MaxTTL, a.peerTTL)
	if a.clock.Now() < a.horizonUntil {
		h = max(h, a.horizon)
	}
	return h
}

// SetPeerTTL tells the acceptor the longest lease that a running node says
// it holds (Node.SetPeerTTL). Restarted voters are told of it as a horizon,
// and a quarantined acceptor waits it out itself: in a rolling restart that
// lowers MaxTTL, a node may hold a lease longer than this acceptor's
// MaxTTL that only voters of the old setting accepted, and those may all
// have lost their state (see hearLease). Lowered, the longer value is
// still reported while a lease of that length taken before could run.
func (a *Acceptor) SetPeerTTL(h time.Duration) { a.rules.hearPeerTTL(a, h) }

// hearPeerTTL is SetPeerTTL: a lease a running node says it holds is a
// horizon (design.md R37).
func (a *Acceptor) hearPeerTTL(h time.Duration) {
	h = min(max(h, 0), maxHeardTTL)
	if h < a.peerTTL {
		a.learnHorizon(a.peerTTL)
	}
	a.peerTTL = h
	if h > a.cfg.MaxTTL {
		a.rules.waitOut(a, h)
	}
}

// State reports whether the acceptor votes yet.
func (a *Acceptor) State() AcceptorState { return a.state }

// FloorOnly reports whether the acceptor went live after a majority of
// voters had lost their state together; tokens then rest on the wall clock.
func (a *Acceptor) FloorOnly() bool { return a.floorOnly }

// Stats returns counters of what the acceptor did.
func (a *Acceptor) Stats() AcceptorStats { return a.stats }

// Keys is the number of registers the acceptor keeps.
func (a *Acceptor) Keys() int { return len(a.regs) }

// Membership is the acceptor's voter configuration.
func (a *Acceptor) Membership() Membership { return a.m }

// HandleRequest answers a batch of operations. It never fails: a message of
// another configuration, or one that arrives while the acceptor does not
// vote, gets a Status saying so, and each malformed operation is refused on
// its own.
func (a *Acceptor) HandleRequest(req *Request) *Response {
	resp := &Response{Config: a.m.ID, From: a.cfg.ID, Inc: a.cfg.Incarnation}
	if req.Config != a.m.ID || !a.m.IsVoter(a.cfg.ID) {
		// Another configuration (older: the proposer learns ours; newer:
		// it sends us its own), or removed from ours: vote on nothing.
		a.stats.WrongConfig++
		resp.Status = StatusWrongConfig
		if req.Config == a.m.ID {
			resp.Status = StatusNotVoter
		}
		m := a.m.clone()
		resp.Members = &m
		return resp
	}
	a.maybeEndQuarantine()
	if a.state != Live || a.diskErr != nil {
		// Refuse each operation, so that the proposer counts this voter
		// out at once instead of waiting for it.
		resp.Status = StatusRecovering
		resp.Results = newResults(len(req.Ops))
		for i := range req.Ops {
			a.rules.hearLease(a, &req.Ops[i])
			resp.Results[i] = Result{ID: req.Ops[i].ID, Reason: ReasonNoVote}
		}
		return resp
	}
	now := a.clock.Now()
	resp.Results = newResults(len(req.Ops))
	for i := range req.Ops {
		if i%warmAhead == 0 && len(req.Ops) > warmAhead { // a batch: see warm
			a.warm(req.Ops[i:min(i+warmAhead, len(req.Ops))])
		}
		op := &req.Ops[i]
		switch op.Kind {
		case OpPrepare:
			resp.Results[i] = a.handlePrepare(req.From, op, now)
		case OpAccept:
			resp.Results[i] = a.handleAccept(op, now)
		case OpPeek:
			resp.Results[i] = a.handlePeek(op, now)
		case OpUnwatch:
			resp.Results[i] = a.handleUnwatch(req.From, op, now)
		case OpForget:
			resp.Results[i] = a.handleForget(op, now)
		default:
			resp.Results[i] = Result{ID: op.ID, Reason: ReasonInvalid}
			a.stats.Refused++
		}
	}
	return resp
}

// warmAhead is how many operations of a request warm looks ahead of the
// ones being handled.
const warmAhead = 32

// warm looks up the registers of ops, a stretch of a request about to be
// handled, and reads one field of each. It changes nothing: the lookups
// are independent of one another, so the processor overlaps their cache
// misses, where the handling one at a time waits out each miss alone. A
// voter holding 100,000 registers misses the cache on nearly every
// lookup; a renewal batch of 4,096 accepts went from about 780 to about
// 445 ns per accept (BenchmarkAcceptorRenewals100k).
func (a *Acceptor) warm(ops []Op) {
	var sum time.Duration
	for i := range ops {
		if r := a.regs[ops[i].Key]; r != nil {
			sum += r.usedAt
		}
	}
	a.warmSum += sum // kept, so that the reads are not optimized away
}

func (a *Acceptor) handlePrepare(from NodeID, op *Op, now time.Duration) Result {
	a.stats.Prepares++
	if op.Key == "" || op.Ballot.IsZero() {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonInvalid}
	}
	r := a.register(op.Key)
	left := r.remaining(now)
	if op.IfFree && r.reservedAgainst(op.Ballot.Node, now) && !r.value.heldBy(op.Ballot.Node, op.Ballot.Incarnation) {
		// An acquire of a node that was not waiting, while the key is
		// handed to those that were: promise nothing (a promise would cost
		// the waiters their round). A waiting acquire joins the line. The
		// node the register names as holder is not held back: the key is
		// its own (a grant of an earlier round of its acquire, written
		// back by another node's read), and until it takes it up or frees
		// it nobody else can have it.
		if op.Watch && from != "" {
			a.watch(op.Key, r, from, now, 0)
		}
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonHandoff, Promised: r.promise,
			Accepted: r.accepted, Value: r.value, Remaining: left, MaxEpoch: a.maxEpoch(r), Copy: a.isCopy(r)}
	}
	if op.Watch && from != "" && !(left > 0 && r.value.Holder == op.Ballot.Node && r.value.HolderInc == op.Ballot.Incarnation) {
		// A waiter joins the line here whatever becomes of its ballot,
		// and whether or not this acceptor times a lease: the key may be
		// held at the other voters, and every voter should have the same
		// waiters in the same order, so that a release is handed to the
		// same one everywhere (a waiter missing from a line is refused
		// there while the key is handed to those in it). One that takes
		// the key leaves the line with its grant.
		a.watch(op.Key, r, from, now, left)
	}
	if op.Ballot.Less(r.promise) {
		// Refused, but say what is here: a proposer that only needs to
		// learn that the key is held (or what a majority accepted) can
		// stop without winning a ballot.
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonPromised, Promised: r.promise,
			Accepted: r.accepted, Value: r.value, Remaining: left, MaxEpoch: a.maxEpoch(r), Copy: a.isCopy(r)}
	}
	if op.IfFree && left > 0 && !(r.value.Holder == op.Ballot.Node && r.value.HolderInc == op.Ballot.Incarnation) {
		return Result{ID: op.ID, Reason: ReasonHeld, Promised: r.promise,
			Accepted: r.accepted, Value: r.value, Remaining: left, MaxEpoch: a.maxEpoch(r), Copy: a.isCopy(r)}
	}
	if op.Ballot == r.promise && !a.rules.repeatsPrepare(r, op) {
		// Equal to the promise but not a copy of the prepare that made it:
		// a proposer using one ballot twice (a ballot promised through an
		// accept's Next is accepted at, never prepared). Answering would
		// let two values share a ballot (design.md R5).
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonPromised, Promised: r.promise,
			Accepted: r.accepted, Value: r.value, Remaining: left, MaxEpoch: a.maxEpoch(r), Copy: a.isCopy(r)}
	}
	if !a.persistPromise(op.Ballot.Counter) ||
		(op.Key == ConfigKey && op.Ballot != r.promise && !a.persistConfigRegister(op.Ballot, a.dur.Config.Accepted, a.dur.Config.Value)) {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonNoVote}
	}
	r.promise, r.promisedBy = op.Ballot, op.ID
	return Result{
		ID:        op.ID,
		OK:        true,
		Promised:  r.promise,
		Accepted:  r.accepted,
		Value:     r.value,
		Remaining: left,
		MaxEpoch:  a.maxEpoch(r),
		Copy:      a.isCopy(r),
	}
}

// repeatsPrepare reports whether op, a prepare at r's promise, is the
// prepare that made it (design.md R5): a duplicate is answered again, what
// it reports has not changed in a way that matters (an accept at this
// ballot would have moved the promise to its Next).
func repeatsPrepare(r *register, op *Op) bool { return op.ID == r.promisedBy }

func (a *Acceptor) handlePeek(op *Op, now time.Duration) Result {
	if op.Key == "" {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonInvalid}
	}
	r := a.regs[op.Key]
	if r == nil {
		// Nothing here, or dropped: the floors stand for it.
		return Result{ID: op.ID, OK: true, Promised: a.promiseFloor, MaxEpoch: a.epochFloor}
	}
	return Result{ID: op.ID, OK: true, Promised: r.promise, Accepted: r.accepted,
		Value: r.value, Remaining: r.remaining(now), MaxEpoch: a.maxEpoch(r), Copy: a.isCopy(r)}
}

func (a *Acceptor) handleAccept(op *Op, now time.Duration) Result {
	a.stats.Accepts++
	v := op.Value
	if op.Key == "" || op.Ballot.IsZero() || (v.Held && (v.TTL <= 0 || v.TTL > a.cfg.MaxTTL || v.Holder == "")) ||
		(v.Config != nil && (op.Key != ConfigKey || v.Config.Validate() != nil || v.Config.Cluster() != a.m.Cluster())) {
		a.rules.hearLease(a, op)
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonInvalid}
	}
	if op.Inc != a.cfg.Incarnation {
		// The proposer heard a promise from an earlier life of this node;
		// that promise is forgotten, so the accept must not count.
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonIncarnation}
	}
	if v.Config != nil && a.disk == nil {
		// A voter change must not rest on an acceptor that could forget
		// it accepted one (design.md R60): without a disk, a restart
		// brings it back on the founding voters.
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonNoDisk}
	}
	r := a.register(op.Key)
	if op.Ballot.Less(r.promise) {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonPromised, Promised: r.promise, MaxEpoch: a.maxEpoch(r)}
	}
	if v.Held && v.Lease == op.Ballot && !r.value.sameGrant(v) && r.reservedAgainst(v.Holder, now) {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonHandoff, Promised: r.promise, MaxEpoch: a.maxEpoch(r)}
	}
	// What the disk must hold before this accept is answered: that this
	// acceptor voted, its horizon and epoch mark, and on ConfigKey the
	// register as the accept leaves it.
	if !a.persistAccept(v.Epoch, maxBallot(op.Ballot, op.Next).Counter) ||
		(op.Key == ConfigKey && !a.persistConfigRegister(maxBallot(op.Ballot, op.Next), op.Ballot, v)) {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonNoVote}
	}
	// The timer belongs to a grant (holder and epoch), not to a write.
	same := r.hasTimer && r.value.sameGrant(v)
	switch {
	case v.Held && op.Migrate:
		// Carried into a new configuration: time it from now for what is
		// left of it, which the write carries in TTL (the longest time
		// left at a voter the mover asked, stretched for clock rates, and
		// never more than the lease's TTL), so that a majority of the new
		// configuration protects a lease granted under the old one.
		end := now + v.TTL
		if !same || end > r.until {
			r.until = end
		}
		r.hasTimer = true
	case same && r.accepted == op.Ballot:
		// A duplicate of an accept already taken: the timer stands as it
		// started.
	case v.Held && v.Lease == op.Ballot:
		// The write that starts a lease period (a grant or a renewal)
		// runs the timer for TTL from now; a renewal never shortens it.
		end := now + v.TTL
		if !same || end > r.until {
			r.until = end
		}
		r.hasTimer = true
	case same:
		// A write-back of the grant this acceptor already times (perhaps
		// of a later renewal it missed): keep the timer. Dropping it would
		// leave the grant's accept majority one timer short.
	default:
		// Free, or a grant this acceptor never accepted fresh. (A grant
		// of a later epoch is chosen only once no earlier lease is live,
		// so no live lease loses its protection here.)
		r.hasTimer = false
	}
	if v.Held && v.Lease == op.Ballot && !same {
		// A new grant: its holder waits no more, and the hand-off, if one
		// ran, is over.
		a.unwatch(r, v.Holder)
		r.endHandoff()
	}
	r.accepted, r.copied = op.Ballot, false
	r.value = v
	if p := maxBallot(op.Ballot, op.Next); p != r.promise {
		r.promise, r.promisedBy = p, 0
	}
	if v.Epoch > r.maxEpoch {
		r.maxEpoch = v.Epoch
	}
	if len(r.waiting()) > 0 && !v.Held {
		a.wake(op.Key, r, now)
	}
	// A configuration accepted here is not yet chosen: it takes effect
	// only when its proposer, having seen it chosen, pushes it (Adopt).
	return Result{ID: op.ID, OK: true, Promised: r.promise, MaxEpoch: a.maxEpoch(r)}
}

// Adopt switches to m if it is a newer configuration of this acceptor's
// cluster, and reports whether it did. Only a chosen configuration may be
// adopted: the one a proposer saw chosen and pushes (ConfigPush), or one
// that another node adopted already. A voter removed from it votes no more
// (StatusNotVoter); one still catching up starts again with the new voters.
func (a *Acceptor) Adopt(m Membership) bool {
	if !a.m.Newer(m) || m.Validate() != nil {
		return false
	}
	if a.disk != nil && (a.restored || a.state == Live) && !a.persist(func(d *Durable) { d.Membership = m.clone() }) {
		// Not adopted: the acceptor votes no more (DiskError).
		return false
	}
	a.m = m.clone()
	a.raiseEpochFloor(m.EpochFloor)
	a.stats.ConfigChanges++
	if a.probing {
		// Still asking whether anyone voted: ask the new voters.
		a.startCatchUp()
		return true
	}
	if a.state == CatchingUp {
		a.catchUp = nil
		a.state = Quarantined
		a.startedAt = a.clock.Now() - a.cfg.Quarantine // quarantine served already
		a.maybeEndQuarantine()
	}
	return true
}

// Tick advances the acceptor's timers: the end of quarantine, catch-up
// retries, and the expiry of leases that someone watches.
func (a *Acceptor) Tick() {
	if a.state == Quarantined && len(a.horizonAsk) > 0 && a.clock.Now()-a.horizonAsked >= a.cfg.RetryInterval {
		a.askHorizons(a.clock.Now())
	}
	a.maybeEndQuarantine()
	if a.state == CatchingUp && a.diskErr == nil {
		a.catchUp.tick(a.clock.Now(), a.cfg.RetryInterval)
		a.maybeGoLive()
	}
	a.expire(a.clock.Now())
}

// NextTick is the earliest time at which Tick has work, or false when it has
// none until a message arrives.
func (a *Acceptor) NextTick() (time.Duration, bool) {
	var at time.Duration
	ok := false
	set := func(t time.Duration) {
		if !ok || t < at {
			at, ok = t, true
		}
	}
	switch {
	case a.diskErr != nil:
	case a.state == Quarantined:
		set(a.startedAt + a.cfg.Quarantine)
		if len(a.horizonAsk) > 0 {
			set(a.horizonAsked + a.cfg.RetryInterval)
		}
	case a.state == CatchingUp:
		if t, has := a.catchUp.next(a.cfg.RetryInterval); has {
			set(t)
		}
		if a.clock.Now() < a.liveFrom && !a.probing {
			set(a.liveFrom)
		}
	}
	if len(a.expiries) > 0 {
		set(a.expiries[0].at)
	}
	if a.state == Live && a.oldest != nil {
		// The next sweep (acceptor_registers.go): soon after the last one
		// when over MaxRegisters (sweepEvery), else when the register idle
		// longest is due.
		if len(a.regs) > a.cfg.MaxRegisters {
			set(a.sweptAt + a.sweepEvery())
		} else {
			set(max(a.oldest.usedAt+a.cfg.RegisterIdle, a.sweptAt+a.cfg.RetryInterval))
		}
	}
	return at, ok
}

// AcceptorReady is what an acceptor wants sent.
type AcceptorReady struct {
	Notifies []Notify
	CatchUps []CatchUpRequest
}

// hasReady reports whether Ready has anything.
func (a *Acceptor) hasReady() bool {
	return len(a.notify) > 0 || (a.catchUp != nil && len(a.catchUp.outbox) > 0) || len(a.horizonOut) > 0
}

// Ready hands out the messages the acceptor wants sent and forgets them.
func (a *Acceptor) Ready() AcceptorReady {
	var rd AcceptorReady
	if len(a.notify) > 0 {
		// Sorted, so that a simulation replays the same sends.
		to := make([]NodeID, 0, len(a.notify))
		for id := range a.notify {
			to = append(to, id)
		}
		slices.Sort(to)
		for _, id := range to {
			a.flushNotify(&rd, id)
		}
	}
	if a.catchUp != nil && len(a.catchUp.outbox) > 0 {
		rd.CatchUps = a.catchUp.outbox
		a.catchUp.outbox = nil
	}
	if len(a.horizonOut) > 0 {
		rd.CatchUps = append(rd.CatchUps, a.horizonOut...)
		a.horizonOut = nil
	}
	return rd
}

func (a *Acceptor) flushNotify(rd *AcceptorReady, to NodeID) {
	ns, ok := a.notify[to]
	if !ok {
		return
	}
	delete(a.notify, to)
	a.stats.Notifies++
	n := Notify{Config: a.m.ID, From: a.cfg.ID, To: to, Keys: make([]string, len(ns)), Promised: make([]uint64, len(ns))}
	for i, x := range ns {
		n.Keys[i], n.Promised[i] = x.key, x.promised
	}
	rd.Notifies = append(rd.Notifies, n)
}

// notice is a key to tell a watcher about, with the ballot counter promised
// here, so that the waiter's next ballot is high enough to win at once.
type notice struct {
	key      string
	promised uint64
}
