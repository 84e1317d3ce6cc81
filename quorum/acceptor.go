package quorum

import (
	"slices"
	"time"
)

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
	// lease horizons only (a catch-up request of bucket horizonBucket). A
	// voter that knows a longer lease may restart itself before this one's
	// quarantine ends, and then nobody would tell it (design.md R36).
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
	// heardFresh: the lives of other voters, by incarnation, that this
	// acceptor heard from before it ever promised or accepted anything,
	// and when it first did (design.md R55).
	heardFresh map[NodeID]heardLife
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
	// had merged from restarted meanwhile (acceptor_catchup.go).
	CatchUpRestarts uint64
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
			if resp.Results[i].OK {
				resp.Lives = a.rules.livesTold(a, now)
			}
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
// 445 ns per accept (the acceptor's benchmark of renewals at 100,000
// registers).
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
	if v.Held && v.TTL > a.cfg.MaxTTL {
		a.rules.hearLease(a, op) // taken or not (design.md R37)
	}
	if op.Key == "" || op.Ballot.IsZero() || (v.Held && (v.TTL <= 0 || v.Holder == "" || a.rules.tooLong(a, op))) ||
		(v.Config != nil && (op.Key != ConfigKey || v.Config.Validate() != nil || v.Config.Cluster() != a.m.Cluster())) {
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
