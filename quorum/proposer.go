package quorum

import (
	"fmt"
	"math/rand"
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
