package quorum

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/internal/slicepool"
)

// ProposerConfig configures a Proposer.
type ProposerConfig struct {
	// ID is this node's name. Required.
	ID NodeID
	// Incarnation identifies this start of the node; a new value on every
	// start. It goes into every ballot and every grant, so nothing of an
	// earlier life is mistaken for this one. Required, non-zero.
	Incarnation uint64
	// Membership is the voter configuration. The proposer need not be a
	// voter.
	Membership Membership
	// Clock is this node's clock. Required.
	Clock Clock
	// Rand jitters retries. Required; seed it for reproducible runs.
	Rand *rand.Rand
	// RoundTimeout is how long a round (prepare or accept) waits for a
	// majority before it is retried with a higher ballot. It also bounds
	// how long after a round starts its accepts may be sent. Must be
	// shorter than every lease's holder duration. Zero means 100ms.
	RoundTimeout time.Duration
	// Backoff is the base of the random delay before a round that lost a
	// ballot race is retried; it doubles with each attempt up to 32×. Zero
	// means RoundTimeout/20.
	Backoff time.Duration
	// Drift is ρ, the largest clock-rate error of any node (0.01 = 1%). It
	// scales how long a waiter expects another node's timer to run.
	Drift float64
	// CleanupTimeout bounds the background work that frees a grant nobody
	// holds (after a cancelled acquire, or an outcome that could not be
	// learned). Zero means 20×RoundTimeout.
	CleanupTimeout time.Duration
	// MaxIdleKeys bounds how many keys this node keeps fast-path state for
	// once it holds no lease on them. Zero means 4096.
	MaxIdleKeys int

	// rules, set only by tests, breaks rules of the protocol on purpose
	// (proposerRules); nil keeps them all.
	rules func(*proposerRules)
}

func (c *ProposerConfig) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: proposer has no ID", ErrBadConfig)
	case c.Incarnation == 0:
		return fmt.Errorf("%w: proposer %s has incarnation 0", ErrBadConfig, c.ID)
	case c.Clock == nil:
		return fmt.Errorf("%w: proposer %s has no clock", ErrBadConfig, c.ID)
	case c.Rand == nil:
		return fmt.Errorf("%w: proposer %s has no random source", ErrBadConfig, c.ID)
	case c.RoundTimeout < 0 || c.Backoff < 0 || c.CleanupTimeout < 0:
		return fmt.Errorf("%w: proposer %s has a negative duration", ErrBadConfig, c.ID)
	case c.Drift < 0 || c.Drift >= 0.5 || c.Drift != c.Drift:
		return fmt.Errorf("%w: proposer %s: drift %v outside [0, 0.5)", ErrBadConfig, c.ID, c.Drift)
	}
	return c.Membership.Validate()
}

// OpID names an operation of one proposer.
type OpID uint64

// AcquireOptions says how to take one lease.
type AcquireOptions struct {
	// TTL is D_A: how long each acceptor excludes other holders after it
	// accepts this grant or a renewal of it, on its own clock.
	TTL time.Duration
	// HolderTTL is D_P: the holder's deadline is t0 + HolderTTL, t0 read
	// before the round that wrote the grant began. It must be at most
	// γ·TTL less a margin (lease.Timing.HolderTTL computes it).
	HolderTTL time.Duration
	// RenewEvery is how often the lease is renewed.
	RenewEvery time.Duration
	// Notice is how long before its deadline a lease whose renewal has not
	// succeeded is reported lost.
	Notice time.Duration
	// Wait keeps trying while another node holds the key: the acceptors
	// notify this node when the key frees, and it retries at once.
	Wait bool
	// Deadline (on this node's clock) is when to give up; zero means one
	// attempt's worth of rounds (for TryAcquire).
	Deadline time.Duration
	// Data is the value the grant carries (Value.Data): published to
	// readers and observers while the lease is held, kept by renewals.
	Data string
}

func (o *AcquireOptions) validate(roundTimeout time.Duration) error {
	switch {
	case o.TTL <= 0 || o.HolderTTL <= 0:
		return fmt.Errorf("%w: TTL %v and holder TTL %v must be positive", ErrBadOptions, o.TTL, o.HolderTTL)
	case o.HolderTTL >= o.TTL:
		return fmt.Errorf("%w: holder TTL %v must be shorter than TTL %v", ErrBadOptions, o.HolderTTL, o.TTL)
	case o.Notice < 0 || o.Notice >= o.HolderTTL:
		return fmt.Errorf("%w: notice %v must be in [0, holder TTL %v)", ErrBadOptions, o.Notice, o.HolderTTL)
	case o.RenewEvery <= 0 || o.RenewEvery >= o.HolderTTL-o.Notice:
		return fmt.Errorf("%w: renew interval %v must be positive and below holder TTL less notice (%v)",
			ErrBadOptions, o.RenewEvery, o.HolderTTL-o.Notice)
	case roundTimeout >= o.HolderTTL-o.Notice:
		return fmt.Errorf("%w: round timeout %v leaves no time to use a lease of %v (notice %v)",
			ErrBadOptions, roundTimeout, o.HolderTTL, o.Notice)
	}
	return nil
}

// Outcome is how an operation ended.
type Outcome uint8

const (
	// Granted: an acquire took the key; Epoch and Deadline describe it.
	Granted Outcome = iota + 1
	// Locked: the key is held by a live lease of Holder (epoch Epoch). An
	// empty Holder means the key is being fought over by other proposers
	// and none had won yet when the operation gave up.
	Locked
	// NoQuorum: no majority answered in time. When Unknown is set, a write
	// may have reached some acceptors; the proposer cleans it up.
	NoQuorum
	// Released: the release freed the key.
	Released
	// NotHeld: the release found the lease already ended.
	NotHeld
	// ReadDone: a read finished; Value and Live describe the key.
	ReadDone
	// Cancelled: the operation was cancelled and left nothing behind.
	Cancelled
	// Reconfigured: a voter change took effect (or had already); Members
	// is the configuration.
	Reconfigured
	// Refused: a voter change that is not allowed; Err says why.
	Refused
	// Updated: an update wrote the lease's new Data, and renewed it
	// (Deadline).
	Updated
)

var outcomeNames = [...]string{"?", "granted", "locked", "no quorum", "released", "not held", "read", "cancelled",
	"reconfigured", "refused", "updated"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "?"
}

// OpResult reports how one operation ended.
type OpResult struct {
	ID      OpID
	Key     string
	Outcome Outcome
	// Epoch is the fencing token granted (Granted), held by another
	// (Locked), released (Released/NotHeld), or read (ReadDone; for a key
	// a majority holds nothing of, an epoch no earlier grant exceeded:
	// see readEpoch).
	Epoch uint64
	// Deadline is the holder's deadline on this node's clock (Granted).
	Deadline time.Duration
	// Holder and HolderInc name the holder (Locked, ReadDone).
	Holder    NodeID
	HolderInc uint64
	// Data is the holder's value (Locked, when known).
	Data string
	// Remaining is the longest time an acceptor said the holder's lease
	// still runs (Locked), on that acceptor's clock.
	Remaining time.Duration
	// Value is the register's value (ReadDone), or the value granted
	// (Granted); Live says whether a lease of it was running at an
	// acceptor of the read's majority.
	Value Value
	Live  bool
	// LeaseStart (Granted) is when the holder's clock started for the
	// grant: the t0 its deadline counts from (Deadline − HolderTTL).
	LeaseStart time.Duration
	// Unknown: the operation gave up after some of its writes may have
	// been accepted (NoQuorum, Cancelled).
	Unknown bool
	// Quorum lists the distinct acceptors whose votes decided the outcome,
	// and Ballot the ballot they voted on.
	Quorum []NodeID
	Ballot Ballot
	// Started is when the operation began, on this node's clock, and
	// RoundStarted when the part of it that took effect began: the first
	// round that sent the value granted or released, or the last round of
	// an operation that wrote nothing. (Writes of rounds whose end it never
	// learned are in Attempted.)
	Started      time.Duration
	RoundStarted time.Duration
	// Internal marks the proposer's own background work (freeing a grant
	// no lease of this node stands for); its ID matches no call.
	Internal bool
	// Swept marks background work of another kind: a sweep that freed a
	// grant whose lease had run out at every voter (Proposer.mayFreeExpired).
	// Holder and HolderInc name the grant's holder, Epoch its epoch; the
	// outcome is Released once a majority accepted the free value, else
	// NoQuorum and Unknown (it may take effect later, or never).
	Swept bool
	// Why, on a Cancelled acquire, says what it was waiting for: Locked (a
	// holder, named in Holder and Epoch when known), NoQuorum (a majority
	// to answer), or nothing (it had not tried yet).
	Why Outcome
	// Config is the configuration of the round that decided the outcome
	// (Quorum are its voters).
	Config uint64
	// Accepted, on a read (ReadDone), is the ballot at which a majority
	// holds Value: later values are at higher ballots (observers order
	// what they report by it).
	Accepted Ballot
	// Members, Moved and Err describe a voter change: the configuration it
	// ended in, how many keys it moved into the new voters, and why it was
	// refused.
	Members *Membership
	Moved   int
	Err     error
	// Attempted lists every epoch an acquire proposed (or a release or
	// cleanup freed), in order. A history checker needs it: a round whose outcome was never
	// learned may still have been chosen, and seen by others, before the
	// operation ended another way.
	Attempted []uint64
}

// LeaseEvent reports a change to a lease this node holds.
type LeaseEvent struct {
	Key   string
	Epoch uint64
	// Deadline is the lease's new deadline (renewed) or the last one it had
	// (lost), on this node's clock.
	Deadline time.Duration
	// Lost is set when the lease ended without a release; Reason says why.
	Lost   bool
	Reason LostReason
	// Started is when the renewal began (renewed), on this node's clock:
	// the same for every renewal one pass over the leases started.
	Started time.Duration
	// Tag is what the driver attached to the lease (Node.TagLease), nil
	// if nothing.
	Tag any
}

// LostReason says why a lease was lost.
type LostReason uint8

const (
	// LostNoQuorum: renewal found no majority before the notice time.
	LostNoQuorum LostReason = iota + 1
	// LostTaken: renewal found the key no longer granted to this lease.
	LostTaken
)

func (r LostReason) String() string {
	switch r {
	case LostNoQuorum:
		return "renewal found no quorum"
	case LostTaken:
		return "lease was taken over"
	}
	return ""
}

// Ready is what a proposer wants done: requests to send (at most one per
// acceptor), operations that ended, and lease changes.
type ProposerReady struct {
	Requests []Request
	Results  []OpResult
	Leases   []LeaseEvent
	// Pushes bring voters that are behind up to date with this node's
	// configuration; Lists ask old voters for their keys during a change.
	Pushes []ConfigPush
	Lists  []CatchUpRequest
	// Changes are states of observed keys (Observe).
	Changes []KeyChange
}

// Proposer is one node's client half of the protocol: it runs acquires,
// renewals, releases and reads as rounds of prepare and accept, holds this
// node's leases, renews them all in one batch per voter, and reports loss
// before a deadline passes. It is a state machine with no goroutines: calls
// start operations, Step and HandleNotify take messages, Tick advances
// timers, Ready hands out what to send and what happened. It is not safe for
// concurrent use.
type Proposer struct {
	cfg   ProposerConfig
	m     Membership
	clock Clock
	rand  *rand.Rand

	keys map[string]*keyState
	// rounds maps the wire id of each round in flight to its operation,
	// and that of an accept round that left a key's fast path, once it
	// ended, to the key, while the fast path stands: voters that accept
	// after the round ended promised its next ballot too. One map for
	// both: a renewal's round ends as one and lives on as the other.
	rounds roundTable
	// latePrep maps the prepare round of an operation whose accepts are
	// out to the operation (see latePromise).
	latePrep map[uint64]*op
	ops      map[OpID]*op
	held     []*keyState       // keys with a lease, in a reproducible order
	incs     map[NodeID]uint64 // latest incarnation heard from each acceptor
	timers   timerQueue
	idle     []idleKey // keys with fast-path state and nothing else, oldest first
	nidle    int       // how many keys are idle (idle may hold stale entries)

	srtt, rttvar time.Duration // how long phases take (roundTimer)

	renewAt    time.Duration // when the renewal timer fires
	renewArmed bool
	renewGen   uint64
	// renewFrom is where in held the next renewal pass starts: each pass
	// goes on from where the last stopped, so that the passes over many
	// leases, a batch each, look at every lease once per round of them
	// rather than at the renewing ones again and again from the start.
	renewFrom int
	// renewals counts the renewals in flight. They are not in ops: no
	// caller can name or cancel one, and at many leases the map's two
	// writes per renewal cost more than the rest of its bookkeeping.
	renewals int
	// lastLeaseOpts are the options of the lease installed last, shared
	// by the leases installed with the same ones (leaseOptions).
	lastLeaseOpts *AcquireOptions
	// tagged counts the leases held with a tag (TagLease).
	tagged int
	// incsShared holds the sets of voters that fast paths share.
	incsShared sharedIncs

	// forgetting is how many forgets are in progress (Node.sweep).
	forgetting int

	// ballots is the highest ballot counter this incarnation has used, on
	// any key: every new ballot goes above it, so no ballot is used twice
	// even on a key whose state was forgotten meanwhile (see newBallot).
	ballots uint64

	nextOp  OpID
	nextRID uint64
	out     []Request // per voter index
	results []OpResult
	spare   []OpResult // results handed back (reuseResults), empty
	spareRq []Request  // requests handed back (reuseRequests), empty
	// spareReplies are the reply buffers of finished operations, for the
	// rounds of new ones (see finish).
	spareReplies [][]reply
	// Renewals are most of the operations of a node that holds many
	// leases (30,000 a second for 100,000 leases): each finished one is
	// set aside (doneRenews) and, at the next Tick, when no call that
	// finished it can still be looking at it, put in renewOps for the next
	// renewal. Timers that still name an op recycled this way are stale:
	// its timerGen only grows. The pool is the proposer's own, not the
	// package's: an op reused by another proposer (another node of the
	// same process) would be written by one goroutine while this one's
	// timer heap still reads it. A sync.Pool rather than a list, so that
	// the collector takes the ops back when renewals stop (a list kept the
	// peak of a pass, 4,096 ops of 776 bytes, for good).
	doneRenews []*op
	renewOps   sync.Pool // *op
	events     []LeaseEvent
	spareEv    []LeaseEvent // an emptied events slice, for the next Ready (reuseEvents)
	pushes     []ConfigPush
	lists      []CatchUpRequest
	chg        *changeOp // the voter change in progress, if any

	// Observed keys (proposer_observe.go): by key, by the wire id of their
	// registration rounds, and the states to report.
	observations map[string]*observation
	obsRounds    map[uint64]*observation
	changes      []KeyChange

	stats ProposerStats
	rules proposerRules
}

// ProposerStats counts what a proposer did.
type ProposerStats struct {
	Rounds, FastRounds, Conflicts, Timeouts, Granted, Renewed, Lost, ConfigChanges uint64
	// Forgets counts the keys this node dropped whose registers it told
	// every voter to forget (their release was accepted by all).
	Forgets uint64
	// WriteBacks counts the keys a sweep of this node wrote back before
	// forgetting them: every voter held one free, but not at one ballot
	// (see maybeWriteBack).
	WriteBacks uint64
	// FreedExpired counts the write-backs of a sweep of this node that
	// freed a grant whose lease had run out at every voter (see
	// mayFreeExpired).
	FreedExpired uint64
}

// NewProposer returns a proposer holding no leases.
func NewProposer(cfg ProposerConfig) (*Proposer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.RoundTimeout == 0 {
		cfg.RoundTimeout = 100 * time.Millisecond
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = cfg.RoundTimeout / 20
	}
	if cfg.CleanupTimeout == 0 {
		cfg.CleanupTimeout = 20 * cfg.RoundTimeout
	}
	if cfg.MaxIdleKeys == 0 {
		cfg.MaxIdleKeys = 4096
	}
	p := &Proposer{
		cfg:      cfg,
		m:        cfg.Membership.clone(),
		clock:    cfg.Clock,
		rand:     cfg.Rand,
		keys:     make(map[string]*keyState),
		latePrep: make(map[uint64]*op),
		ops:      make(map[OpID]*op),
		incs:     make(map[NodeID]uint64),
		out:      make([]Request, len(cfg.Membership.Voters)),
		rules:    defaultProposerRules,
	}
	if cfg.rules != nil {
		cfg.rules(&p.rules)
	}
	// Round ids start anywhere: no answer meant for an earlier life of
	// this node can match a round of this one (roundTable). The other
	// ids (observations, and the timers' order) count from below 1<<62.
	start := uint64(cfg.Rand.Int63())
	p.nextRID = start >> 1
	p.rounds = newRoundTable(start)
	return p, nil
}

// Stats returns counters of what the proposer did.
func (p *Proposer) Stats() ProposerStats { return p.stats }

// Membership is the proposer's voter configuration.
func (p *Proposer) Membership() Membership { return p.m }

// Acquire starts taking key. The result comes through Ready: Granted,
// Locked (only without Wait), NoQuorum or Cancelled.
func (p *Proposer) Acquire(key string, o AcquireOptions) (OpID, error) {
	if key == "" || key[0] == 0 {
		return 0, ErrBadKey
	}
	if err := o.validate(p.cfg.RoundTimeout); err != nil {
		return 0, err
	}
	now := p.clock.Now()
	if o.Deadline == 0 {
		o.Deadline = now + 3*p.cfg.RoundTimeout
	}
	ks := p.key(key)
	x := p.newOp(ks, kindAcquire, o.Deadline)
	x.opts = o
	if !o.Wait {
		if p.localAcquire(ks) != nil {
			// Another acquire of this node is ahead in line for the key: a
			// try cannot take it now. (Who holds it is not known here.)
			p.finish(x, OpResult{Outcome: Locked, RoundStarted: now})
			return x.id, nil
		}
	}
	p.enqueue(x, false)
	return x.id, nil
}

// localAcquire returns an acquire of this node in progress on ks, if any.
func (p *Proposer) localAcquire(ks *keyState) *op {
	if a := ks.active; a != nil && a.kind == kindAcquire {
		return a
	}
	for _, list := range [][]*op{ks.queued(), ks.parkedOps()} {
		for _, q := range list {
			if q.kind == kindAcquire {
				return q
			}
		}
	}
	return nil
}

// Release ends this node's lease on key with the given epoch and frees the
// key. The lease ends locally at once (no renewal, no loss report), then the
// result comes through Ready: Released, NotHeld or NoQuorum. Rounds that
// hear no majority are retried until deadline (on the node's clock), or
// until CleanupTimeout from now if that is later (so zero means
// CleanupTimeout): a caller that can wait longer for the key to be freed,
// rather than for the grant to expire, says so.
func (p *Proposer) Release(key string, epoch uint64, deadline time.Duration) (OpID, error) {
	ks := p.keys[key]
	if ks == nil || ks.lease == nil || ks.lease.epoch != epoch {
		return 0, fmt.Errorf("%w: %q epoch %d", ErrNotHeld, key, epoch)
	}
	now := p.clock.Now()
	ks.lastDeadline = now
	p.dropLease(ks)
	x := p.newOp(ks, kindRelease, max(deadline, now+p.cfg.CleanupTimeout))
	x.epoch = epoch
	p.enqueue(x, false)
	return x.id, nil
}

// Read learns key's register by a majority round, linearizably. The result
// comes through Ready: ReadDone or NoQuorum.
func (p *Proposer) Read(key string, deadline time.Duration) (OpID, error) {
	if key == "" {
		return 0, ErrBadKey
	}
	if deadline == 0 {
		deadline = p.clock.Now() + 3*p.cfg.RoundTimeout
	}
	ks := p.key(key)
	x := p.newOp(ks, kindRead, deadline)
	p.enqueue(x, false)
	return x.id, nil
}

// Cancel stops an operation. An acquire that may already have been granted
// is released in the background; its result is Cancelled either way.
func (p *Proposer) Cancel(id OpID) {
	x := p.ops[id]
	if x == nil || x.kind != kindAcquire {
		return
	}
	x.cancelled = true
	switch x.phase {
	case phaseQueued, phaseWaiting, phaseBackoff:
		// Nothing of this attempt is in flight.
		p.unpark(x)
		p.removeQueued(x)
		if x.phase == phaseBackoff && x.unknown {
			p.spawnCleanup(x.ks, 0, x.attempted)
		}
		p.finish(x, OpResult{Outcome: Cancelled, Unknown: x.unknown})
	}
	// In a round: the round's end sees x.cancelled.
}

// Holds reports the lease this node holds on key, if any.
func (p *Proposer) Holds(key string) (epoch uint64, deadline time.Duration, ok bool) {
	ks := p.keys[key]
	if ks == nil || ks.lease == nil {
		return 0, 0, false
	}
	return ks.lease.epoch, ks.lease.deadline, true
}

// TagLease attaches tag to the lease this node holds on key at epoch, and
// reports whether it holds one: every later LeaseEvent about the lease
// carries it (LeaseEvent.Tag).
func (p *Proposer) TagLease(key string, epoch uint64, tag any) bool {
	ks := p.keys[key]
	if ks == nil || ks.lease == nil || ks.lease.epoch != epoch {
		return false
	}
	switch l := ks.lease; {
	case l.tag == nil && tag != nil:
		p.tagged++
	case l.tag != nil && tag == nil:
		p.tagged--
	}
	ks.lease.tag = tag
	return true
}

// LeaseTag is the tag (TagLease) of the lease this node holds on key; nil
// if it holds none, or the lease has none.
func (p *Proposer) LeaseTag(key string) any {
	if ks := p.keys[key]; ks != nil && ks.lease != nil {
		return ks.lease.tag
	}
	return nil
}

// LeaseTags are the tags of the leases held that have one, in a
// reproducible order.
func (p *Proposer) LeaseTags() []any {
	tags := make([]any, 0, p.tagged)
	for _, ks := range p.held {
		if t := ks.lease.tag; t != nil {
			tags = append(tags, t)
		}
	}
	return tags
}

// Tagged is how many leases held have a tag.
func (p *Proposer) Tagged() int { return p.tagged }

// Pending is the number of operations in progress, background work
// included.
func (p *Proposer) Pending() int { return len(p.ops) + p.renewals }

// Leases is the number of leases this node holds.
func (p *Proposer) Leases() int { return len(p.held) }

// Ready hands out what the proposer wants sent and what happened, and
// forgets it.
func (p *Proposer) Ready() ProposerReady {
	var rd ProposerReady
	for i := range p.out {
		if len(p.out[i].Ops) > 0 {
			if rd.Requests == nil {
				rd.Requests, p.spareRq = p.spareRq, nil
				if cap(rd.Requests) < len(p.out)-i {
					rd.Requests = make([]Request, 0, len(p.out)-i)
				}
			}
			rd.Requests = append(rd.Requests, p.out[i])
			p.out[i] = Request{}
		}
	}
	rd.Results, p.results = p.results, nil
	rd.Leases, p.events, p.spareEv = p.events, p.spareEv, nil
	rd.Pushes, p.pushes = p.pushes, nil
	rd.Lists, p.lists = p.lists, nil
	rd.Changes, p.changes = p.changes, nil
	return rd
}

// reuseResults takes back the Results of a Ready once the Node has copied
// them into its own, for later Readys to reuse.
func (p *Proposer) reuseResults(results []OpResult) { p.spare = slicepool.Emptied(results) }

// reuseEvents takes back the Leases of a Ready once the Node has copied
// them, as reuseResults does the Results: a renewal pass reports thousands,
// and a slice grown anew for each pass was a tenth of a holder's
// allocations at 100,000 leases.
func (p *Proposer) reuseEvents(events []LeaseEvent) { p.spareEv = slicepool.Emptied(events) }

// reuseRequests takes back the Requests of a Ready once the Node's driver
// has sent or copied each (Node.Advance; the slice, not the operations in
// it, which Advance puts back in their pool), for later Readys to reuse.
func (p *Proposer) reuseRequests(requests []Request) { p.spareRq = slicepool.Emptied(requests) }

// HasReady reports whether Ready has anything.
func (p *Proposer) HasReady() bool {
	if len(p.results) > 0 || len(p.events) > 0 || len(p.pushes) > 0 || len(p.lists) > 0 || len(p.changes) > 0 {
		return true
	}
	for i := range p.out {
		if len(p.out[i].Ops) > 0 {
			return true
		}
	}
	return false
}

// Tick runs every timer that is due: round timeouts, retries, renewals and
// loss notices.
func (p *Proposer) Tick() {
	now := p.clock.Now()
	p.recycleRenews()
	for p.timers.len() > 0 && p.timers.front().at <= now {
		t := p.timers.pop()
		t.fire(p, now)
	}
}

// NextTick is the earliest time at which Tick has work (or, while stale
// timers are being cleared, a time no later than that).
func (p *Proposer) NextTick() (time.Duration, bool) {
	for n := 0; p.timers.len() > 0 && p.timers.front().stale(p); n++ {
		if n == maxStalePops {
			// Every operation leaves timers behind (a lease's loss
			// notice, seconds ahead); after a burst of operations, tens of
			// thousands may lie at the front. Popping them all in one call
			// held the node for 30-50 ms (150,000 after the benchmark's
			// throughput run), which a waiter for a key handed to this
			// node's acceptor waited out. So a bounded batch per call: the
			// caller drives the node often, and the front's time is never
			// later than that of any live timer behind it.
			return p.timers.front().at, true
		}
		p.timers.pop()
	}
	if p.timers.len() == 0 {
		return 0, false
	}
	return p.timers.front().at, true
}

// maxStalePops bounds the stale timers one NextTick clears (about 60µs).
const maxStalePops = 256

// HandleNotify wakes the acquires waiting on the keys an acceptor says are
// free.
func (p *Proposer) HandleNotify(n *Notify) {
	if n.Config != p.m.ID {
		return
	}
	if len(n.Changes) > 0 {
		p.handleChanges(n)
	}
	for i, k := range n.Keys {
		ks := p.keys[k]
		if ks == nil || p.localAcquire(ks) == nil {
			// Handed a key nobody here waits for any more: decline, so
			// that the voter tells the next waiter at once.
			p.unwatch(k, &n.From)
			continue
		}
		if i < len(n.Promised) {
			ks.counter = max(ks.counter, n.Promised[i])
			ks.notesOf().freedAt = max(ks.freedAt(), n.Promised[i])
		}
		ks.notesOf().count++
		p.wakeParked(ks)
		if x := ks.active; x != nil && x.kind == kindAcquire && x.phase == phaseBackoff {
			// Backing off after a lost round: the key is free and handed
			// to this node now, so go at once.
			p.startRound(x)
		}
	}
}

// unwatch asks voter to (or, when voter is nil, every voter of the
// configuration) take this node out of key's line of waiters.
func (p *Proposer) unwatch(key string, voter *NodeID) {
	for i, v := range p.m.Voters {
		if voter == nil || *voter == v {
			p.push(i, Op{Kind: OpUnwatch, Key: key})
		}
	}
}

// attach makes ks the key's state again if it was forgotten meanwhile, or
// returns the state that replaced it (carrying over what must not be lost).
func (p *Proposer) attach(ks *keyState) *keyState {
	cur := p.keys[ks.key]
	switch {
	case cur == nil:
		p.keys[ks.key] = ks
		ks.current = true
	case cur != ks:
		p.dropFast(ks) // its promises are cur's to use, if any
		cur.lastDeadline = max(cur.lastDeadline, ks.lastDeadline)
		cur.counter = max(cur.counter, ks.counter)
		ks = cur
	}
	p.busy(ks)
	return ks
}

func (p *Proposer) key(k string) *keyState {
	ks := p.keys[k]
	if ks == nil {
		ks = &keyState{key: k, current: true}
		p.keys[k] = ks
	}
	p.busy(ks)
	return ks
}

// busy takes ks off the idle count: it is in use again.
func (p *Proposer) busy(ks *keyState) {
	if ks.idle {
		ks.idle = false
		p.nidle--
	}
}

func (p *Proposer) newOp(ks *keyState, kind opKind, deadline time.Duration) *op {
	ks = p.attach(ks)
	p.nextOp++
	x := &op{id: p.nextOp, kind: kind, ks: ks, deadline: deadline, started: p.clock.Now()}
	p.ops[x.id] = x
	return x
}

// newRenewOp is newOp for a renewal of the lease held on ks, on a recycled
// op when there is one. A key with a lease is the proposer's current state
// for it (only a key with nothing under way is forgotten, see maybeForget):
// the flag saves the map lookup of attach, one per renewal.
func (p *Proposer) newRenewOp(ks *keyState, deadline time.Duration) *op {
	if !ks.current || ks.idle {
		ks = p.attach(ks)
	}
	x, ok := p.renewOps.Get().(*op)
	if ok {
		// Everything afresh but the buffers, and a timerGen above every
		// timer armed for its earlier lives.
		*x = op{timerGen: x.timerGen + 1, replies: x.replies[:0], sentTo: x.sentTo[:0]}
	} else {
		x = &op{}
	}
	p.nextOp++
	// (No start time: the pass that starts it sets one for all its
	// renewals, renewDue, which spares a clock read per renewal.)
	x.id, x.kind, x.ks, x.deadline = p.nextOp, kindRenew, ks, deadline
	p.renewals++
	return x
}

// recycleRenews makes the renewals finished before this call ready for
// reuse. It runs at the start of Tick: no call is under way then that
// could still use an op it finished.
func (p *Proposer) recycleRenews() {
	for i, x := range p.doneRenews {
		x.ks = nil // let the key's state go while the op waits
		p.renewOps.Put(x)
		p.doneRenews[i] = nil
	}
	p.doneRenews = p.doneRenews[:0]
}

func (p *Proposer) finish(x *op, r OpResult) {
	if x.kind == kindForget {
		p.forgetting--
	}
	switch {
	case x.kind != kindRenew:
		delete(p.ops, x.id)
	case x.phase != phaseDone:
		p.doneRenews = append(p.doneRenews, x)
		p.renewals--
	}
	accepting := x.phase == phaseAccept // (reportSwept: the phase ends here)
	x.phase = phaseDone
	x.timerGen++
	p.endRound(x)
	if cap(x.replies) > 0 && len(p.spareReplies) < maxSpareReplies {
		// No round of x will take another reply (it is out of rounds),
		// and only a Step appends to a buffer: the next round can have it.
		clear(x.replies)
		p.spareReplies = append(p.spareReplies, x.replies[:0])
		x.replies = nil
	}
	ks := x.ks
	if ks.active == x {
		ks.active = nil
	}
	if r.Outcome == Cancelled {
		r.Why = x.lastFailure
		if x.lastLock != nil && x.lastFailure == Locked {
			r.Holder, r.HolderInc, r.Epoch = x.lastLock.Holder, x.lastLock.HolderInc, x.lastLock.Epoch
		}
	}
	if x.kind == kindAcquire && x.watched && r.Outcome != Granted && p.localAcquire(ks) == nil {
		// No acquire of this node waits for the key any more: leave the
		// voters' lines, so that none hands it to this node in vain.
		p.unwatch(ks.key, nil)
	}
	if x.kind == kindAcquire && x.wrote && r.Outcome != Granted {
		// A grant this acquire proposed may have been chosen (and may
		// have expired since) without it ever learning so: the outcome
		// is not known, whatever else was seen.
		r.Unknown = true
	}
	if x.kind == kindForget && x.freed != nil && x.wrote {
		p.reportSwept(x, accepting)
	}
	if x.parent != nil {
		// A step of a voter change: the change reports, not the step.
		p.changeStep(x.parent, x, r)
	} else if x.obs != nil {
		// A read that settles what an observed key's voters report.
		p.observeReadDone(x.obs, r)
	} else if x.kind != kindRenew && x.kind != kindForget {
		r.ID, r.Key, r.Started = x.id, ks.key, x.started
		if r.RoundStarted == 0 {
			r.RoundStarted = x.roundStart
		}
		if i := slices.Index(x.attempted, r.Epoch); i >= 0 && (r.Outcome == Granted || r.Outcome == Released) {
			// The write that took effect may have been seen since the
			// round that first sent it, an earlier one perhaps.
			r.RoundStarted = x.attemptedAt[i]
		}
		r.Internal = x.kind == kindCleanup
		r.Attempted = x.attempted
		if p.results == nil {
			p.results, p.spare = p.spare, nil
		}
		p.results = append(p.results, r)
	}
	if x.kind == kindRelease && ks.lease == nil {
		// However the release ended (freed, found freed already, no
		// quorum), this node's lease on the key did: acquires of this node
		// that waited behind it, asking nobody, go now.
		p.wakeParked(ks)
	}
	p.advance(ks)
}

// reportSwept reports a forget whose write-back freed an expired grant
// (mayFreeExpired), as background work: Released once a majority accepted
// the free value, else of unknown outcome. accepting says whether x was in
// its accept phase when it finished (finish has ended the phase since).
func (p *Proposer) reportSwept(x *op, accepting bool) {
	g := x.freed
	r := OpResult{
		ID: x.id, Key: x.ks.key, Outcome: Released, Epoch: g.Epoch, Holder: g.Holder, HolderInc: g.HolderInc,
		Started: x.started, RoundStarted: x.roundStart, Internal: true, Swept: true, Ballot: x.ballot, Config: x.votes.m.ID,
	}
	if !accepting || x.votes.nyes < x.votes.m.Majority() {
		r.Outcome, r.Unknown = NoQuorum, true
	}
	if p.results == nil {
		p.results, p.spare = p.spare, nil
	}
	p.results = append(p.results, r)
}

// advance starts the next queued operation of a key whose slot is free.
func (p *Proposer) advance(ks *keyState) {
	for ks.active == nil && len(ks.queued()) > 0 {
		w := ks.waits
		x := w.queue[0]
		w.queue = w.queue[1:]
		ks.tidyWaits()
		ks.active = x
		p.startRound(x)
	}
	p.maybeForget(ks)
}

// enqueue queues x for its key's slot; renewals go first.
func (p *Proposer) enqueue(x *op, front bool) {
	ks := x.ks
	x.phase = phaseQueued
	if ks.active == nil && len(ks.queued()) == 0 {
		// The slot is free and nothing waits: start x as advance would,
		// without a queue (a renewal pass would make one per lease).
		ks.active = x
		p.startRound(x)
		p.maybeForget(ks)
		return
	}
	if w := ks.waitsOf(); front {
		w.queue = slices.Insert(w.queue, 0, x)
	} else {
		w.queue = append(w.queue, x)
	}
	p.advance(ks)
}

// working reports whether an operation of this node is running or queued
// on key.
func (p *Proposer) working(key string) bool {
	ks := p.keys[key]
	return ks != nil && (ks.active != nil || len(ks.queued()) > 0)
}

func (p *Proposer) removeQueued(x *op) {
	ks := x.ks
	if i := slices.Index(ks.queued(), x); i >= 0 {
		ks.waits.queue = slices.Delete(ks.waits.queue, i, i+1)
		ks.tidyWaits()
	}
	if ks.active == x {
		ks.active = nil
	}
}

// maybeForget drops the state of a key this node no longer uses, keeping
// fast-path state for the most recent MaxIdleKeys of them. A key whose last
// reported deadline is still ahead is kept: a later acquire on this node must
// not take the key back from its own stale grant before that deadline.
func (p *Proposer) maybeForget(ks *keyState) {
	if !ks.unused() || ks.idle {
		return
	}
	now := p.clock.Now()
	if p.keys[ks.key] != ks {
		return // already forgotten
	}
	if ks.fastVoters == nil && ks.lastDeadline <= now {
		delete(p.keys, ks.key)
		ks.current = false
		return
	}
	ks.idle = true
	ks.idleSeq++
	p.nidle++
	p.idle = append(p.idle, idleKey{ks, ks.idleSeq})
	for p.nidle > p.cfg.MaxIdleKeys && len(p.idle) > 0 {
		e := p.idle[0]
		p.idle = p.idle[1:]
		old := e.ks
		if !old.idle || e.seq != old.idleSeq {
			continue // used since: a later entry stands for it, if any
		}
		forget := p.forgettable(old)
		p.dropFast(old)
		if old.lastDeadline > now {
			// Cannot forget it yet; look again when it comes round.
			old.idleSeq++
			p.idle = append(p.idle, idleKey{old, old.idleSeq})
			if len(p.idle) <= p.nidle {
				break // every idle key is waiting for its deadline
			}
			continue
		}
		old.idle = false
		p.nidle--
		if p.keys[old.key] == old {
			delete(p.keys, old.key)
			old.current = false
		}
		if forget != nil {
			p.forgetRegisters(old.key, *forget)
		}
	}
	if len(p.idle) > 2*p.cfg.MaxIdleKeys+16 {
		// Drop entries of keys used again since, so the list stays small.
		live := p.idle[:0]
		for _, e := range p.idle {
			if e.ks.idle && e.seq == e.ks.idleSeq {
				live = append(live, e)
			}
		}
		p.idle = live
	}
}

// A key this node released, and forgets as idle, is one the voters need
// not keep either, once every voter accepted the release: the node tells
// them to forget it (OpForget at the release's ballot), as a voter's sweep
// would after asking them all (acceptor_registers.go), without the asking.
// The acknowledgments of the release's accept are that answer: each voter
// held the free value at that ballot, and a voter that has moved on since
// holds a higher one and drops nothing. Under per-entity locking
// (invoice/<id>, each key locked once) this keeps a voter's registers to
// about the keys its proposers still keep, MaxIdleKeys each, where sweeps
// alone fell behind the keys coming in. Waiting for the idle eviction
// rather than forgetting at the release keeps hot keys' registers, and
// with them the one-round-trip fast path of the node that touches the key
// again: a key's fast path dies with this node's state anyway.

// forgettable returns the ballot at which every voter accepted ks's last
// write, the free value of a release, or nil if that is not known.
func (p *Proposer) forgettable(ks *keyState) *Ballot {
	fp, voters := ks.fastPath(), ks.fastVoters
	if fp == nil || fp.base.Held || fp.base.Config != nil || ks.key == ConfigKey || p.m.Pending {
		return nil
	}
	if !p.rules.forgetsEvicted(p, voters) {
		return nil
	}
	b := p.ownBallot(fp.accepted)
	return &b
}

// everyVoterAcked reports whether every voter acknowledged the release
// (acked): only then does each hold its free value at its ballot (design.md
// R72).
func (p *Proposer) everyVoterAcked(acked *voterIncs) bool {
	for _, v := range p.m.Voters {
		if acked.get(v) == 0 {
			return false
		}
	}
	return true
}

// forgetRegisters tells every voter to forget key if it still holds the
// free value accepted at b. Nothing comes back that matters: a voter that
// keeps the register is swept later.
func (p *Proposer) forgetRegisters(key string, b Ballot) {
	for i := range p.m.Voters {
		p.push(i, Op{Kind: OpForget, Key: key, Ballot: b})
	}
	p.stats.Forgets++
}

// idleKey is an entry of the idle list; seq tells a stale entry (the key
// was used and went idle again since) from the current one.
type idleKey struct {
	ks  *keyState
	seq uint32
}
