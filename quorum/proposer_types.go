package quorum

import (
	"fmt"
	"slices"
	"time"
)

// The proposer's types: what its callers pass and get back (options,
// results, lease events, observed states), and what it keeps: an operation
// in progress (op), a key's state (keyState) with its fast path and its
// waiters, a lease held, a timer.

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

// KeyChange is a state of an observed key as a majority of voters holds it.
type KeyChange struct {
	Key string
	// Value is the register's value: free, or held by Holder (HolderInc)
	// under Epoch, with the holder's Data.
	Value Value
	// Live: Value is held and its lease is not known to have ended (a
	// majority of voters report its timer run out at one ballot that
	// began a lease period: see the top of proposer_observe.go).
	Live bool
	// Ballot orders the states of a key: a state of another content comes
	// with a higher one.
	Ballot Ballot
	// Remaining is the longest time a voter reported the lease still had
	// to run, on its own clock, when it reported (zero if not live).
	Remaining time.Duration
	// Round is the registration round (Proposer.Observe) that this state is
	// at least as new as: a majority answered it, or a read began after it
	// was sent.
	Round uint64
}

// opKind is what an operation does.
type opKind uint8

const (
	kindAcquire opKind = iota + 1
	kindRenew
	kindRelease
	kindRead
	// kindCleanup frees a grant to this node that no lease of this node
	// stands for (a cancelled acquire, an outcome never learned, a renewal
	// that landed after its lease was reported lost).
	kindCleanup
	// kindConfig writes ConfigKey, compare-and-set on the configuration
	// read; kindMigrate writes a key again under a new configuration. Both
	// are steps of a voter change.
	kindConfig
	kindMigrate
	// kindForget asks every voter what it holds for a key and, when all
	// hold one free value at one ballot, tells them to forget the key
	// (see acceptor_registers.go). When all hold it free but not at one
	// ballot, it writes the key back first (writeBack).
	kindForget
	// kindUpdate writes a new Data into this node's own grant, renewing
	// the lease as it does (proposer_value.go).
	kindUpdate
)

// outcomeLost is an internal outcome: a renewal found its grant gone.
const outcomeLost Outcome = 100

// phase is where an operation stands.
type phase uint8

const (
	phaseQueued  phase = iota // waiting for the key's slot
	phasePrepare              // prepare sent, collecting promises
	phaseAccept               // accept sent, collecting acks
	phaseBackoff              // between rounds
	phaseWaiting              // acquire parked until the key frees
	phaseDone
)

// op is one operation in progress.
type op struct {
	// noticesAt is ks.noticeCount() when the op's current round began: a
	// Notify that came after it (notices moved) may have overtaken the
	// round's replies (see park).
	noticesAt  uint64
	id         OpID
	kind       opKind
	ks         *keyState
	opts       AcquireOptions // acquire
	epoch      uint64         // renew, release: the lease's epoch
	deadline   time.Duration  // give up at
	started    time.Duration
	roundStart time.Duration // when the current round began

	phase     phase
	rid       uint64 // wire id of the round in flight
	ballot    Ballot
	phaseAt   time.Duration // when the phase in flight began
	next      Ballot        // accept: promised next
	t0        time.Duration
	timerGen  uint64
	votes     tally
	replies   []reply
	lives     []Life // lives the round's promisers heard from first (heardLives)
	proposed  Value
	attempts  int
	streak    int  // rounds since the acquire last parked (a duel's length)
	fast      bool // this round skipped the prepare
	peek      bool // this round only looks (reads)
	writeBack bool // forget: the voters disagreed, and the key is written back first (maybeWriteBack)
	noFast    bool // the next round must prepare (to register a watch)
	unknown   bool // an accept of an unfinished round may have landed
	wrote     bool // some accept of this operation was sent
	cancelled bool
	readLive  bool          // read: a lease of the value was live at a voter
	readOrder bool          // read: a majority holding nothing of the key is reported at a ballot it promised (observers)
	readEpoch uint64        // read: the epoch it reports if its write-back is chosen
	contended bool          // the last round failed on refusals, not silence
	favoured  bool          // the last round lost while x's own grant led (ownGrantLeads)
	watched   bool          // some prepare of x asked the voters to watch the key for it
	timeLeft  time.Duration // kindMigrate: how long the new voters must time the lease
	freed     *Value        // forget: the expired grant its write-back frees (maybeWriteBack)
	prepRID   uint64        // the prepare round before the accepts out (Proposer.latePrep)
	sentTo    voterIncs     // the voters the accepts went to, and their incarnations
	// sentToBuf holds sentTo for up to four voters (three voters, and
	// the first four of five): no allocation per accept round (there
	// were three, as the list grew), and the op still fits its size
	// class (896 bytes).
	sentToBuf   [4]voterInc
	repair      *OpResult       // the conclusion to report once the base is written back
	lastLock    *OpResult       // the last Locked seen (waiting acquires)
	data        string          // update: the new Data
	obs         *observation    // read: the observation it settles (proposer_observe.go)
	attempted   []uint64        // epochs written (acquire, release, cleanup)
	attemptedAt []time.Duration // when the round that first wrote each began
	leases      []Ballot        // acquire: the Lease ballot of each grant it wrote
	targets     []uint64        // cleanup: the epochs of this node's grants to free
	// lastFailure is why the last attempt did not succeed: Locked or
	// NoQuorum (for a cancelled acquire's result).
	lastFailure Outcome
	parent      *changeOp   // the voter change this is a step of
	cfgExpect   uint64      // kindConfig: the configuration the register must hold
	cfgWrite    *Membership // kindConfig: what to write there
}

// maxSpareReplies bounds the reply buffers a proposer keeps for reuse.
const maxSpareReplies = 256

type reply struct {
	from NodeID
	inc  uint64
	res  Result
}

// roundRef is what Proposer.rounds knows of a round: the operation whose
// round is in flight, or the key whose fast path a round that ended left.
type roundRef struct {
	x    *op
	late *keyState
}

// keyState is what a proposer keeps for one key.
type keyState struct {
	key    string
	active *op // the operation that owns the key's slot
	// waits holds the operations waiting for the slot and the acquires
	// waiting for the key to free; nil while there are none (most keys,
	// held leases among them, most of the time).
	waits *keyWaits
	lease *heldLease
	// lastDeadline is the latest deadline this node reported for the key
	// (or the moment it released it). The node never takes the key back
	// from a grant of its own before then.
	lastDeadline time.Duration
	counter      uint64 // highest ballot counter seen on this key
	// fastVoters are the voters that promised the fast path's ballot (a
	// shared set: sharedIncs); nil while the key has no fast path.
	fastVoters *voterIncs
	fastBuf    fastPath // the fast path while fastVoters is set; reused by each accept
	fastRID    uint64   // the accept round that left the fast path (Proposer.rounds)
	idle       bool     // idle: counted in Proposer.nidle
	current    bool     // the state Proposer.keys holds for the key
	// idleSeq tells the current idle-list entry from stale ones. 32 bits
	// (in the word of the two flags) are plenty: the list is compacted
	// at 2·MaxIdleKeys+16 entries, so no stale entry outlives more than
	// that many more entries of its key.
	idleSeq uint32
	// notes is what Notifies for the key said; nil until one arrives (a
	// held lease's key hears none: 16 bytes less on every held lease).
	notes *keyNotes
	// epochSeen is the highest epoch any voter reported for the key
	// (MaxEpoch, a value's epoch) in answer to this node: a fast path's
	// round hears nothing, and its next epoch must still be above it.
	epochSeen uint64
}

// keyNotes are what Notifies for a key said (HandleNotify).
type keyNotes struct {
	count uint64 // how many arrived
	// freedAt is the highest ballot counter a voter had promised when it
	// said the key was free (Notify.Promised): a lease seen accepted below
	// it may have been released since (see maybeConcludeEarly).
	freedAt uint64
}

// noticeCount is how many Notifies for the key arrived.
func (ks *keyState) noticeCount() uint64 {
	if ks.notes == nil {
		return 0
	}
	return ks.notes.count
}

// notesOf is ks.notes, made if there is none.
func (ks *keyState) notesOf() *keyNotes {
	if ks.notes == nil {
		ks.notes = &keyNotes{}
	}
	return ks.notes
}

// freedAt is keyNotes.freedAt, 0 before any Notify.
func (ks *keyState) freedAt() uint64 {
	if ks.notes == nil {
		return 0
	}
	return ks.notes.freedAt
}

func (ks *keyState) unused() bool {
	return ks.active == nil && ks.waits == nil && ks.lease == nil
}

// keyWaits are a key's operations that wait.
type keyWaits struct {
	queue  []*op // operations waiting for the slot
	parked []*op // acquires waiting for the key to free
}

// queued are the operations waiting for the key's slot.
func (ks *keyState) queued() []*op {
	if ks.waits == nil {
		return nil
	}
	return ks.waits.queue
}

// parkedOps are the acquires (and cleanups) waiting for the key to free.
func (ks *keyState) parkedOps() []*op {
	if ks.waits == nil {
		return nil
	}
	return ks.waits.parked
}

// waitsOf is ks.waits, made if there is none.
func (ks *keyState) waitsOf() *keyWaits {
	if ks.waits == nil {
		ks.waits = &keyWaits{}
	}
	return ks.waits
}

// tidyWaits lets go of ks.waits once nothing waits.
func (ks *keyState) tidyWaits() {
	if w := ks.waits; w != nil && len(w.queue) == 0 && len(w.parked) == 0 {
		ks.waits = nil
	}
}

// fastPath is what a proposer knows after its accept at some ballot
// succeeded with Next: a majority promised Next at the moment they accepted
// base, so no other value can have been accepted between the two ballots,
// and the next operation may go straight to accept at Next. Both ballots
// are this node's (newBallot), so their counters are all it keeps (ownBallot);
// the voters that promised Next are keyState.fastVoters.
type fastPath struct {
	next     uint64 // Next's counter
	accepted uint64 // the counter of the ballot base was accepted at
	base     Value
}

// fastPath is ks's fast path, nil if it has none.
func (ks *keyState) fastPath() *fastPath {
	if ks.fastVoters == nil {
		return nil
	}
	return &ks.fastBuf
}

// voterIncs are acceptors with the incarnation each answered from: a few
// pairs, looked up by scanning (cheaper than a map for a quorum's worth).
type voterIncs []voterInc

type voterInc struct {
	id  NodeID
	inc uint64
}

// get is id's incarnation, 0 if id is not in v.
func (v voterIncs) get(id NodeID) uint64 {
	for _, x := range v {
		if x.id == id {
			return x.inc
		}
	}
	return 0
}

// holdsAll says whether every pair of o is in v.
func (v voterIncs) holdsAll(o voterIncs) bool {
	for _, x := range o {
		if !slices.Contains(v, x) {
			return false
		}
	}
	return true
}

// sharedIncs keeps the voterIncs that fast paths hold, one copy of each
// set: on a node that renews many leases nearly every key's fast path
// holds one of a few sets (the voters that answered, in their lives), and
// an array per key was 80 bytes of each held lease. A shared set is never
// written; a voter that joins one later makes another (with). Only get and
// len read a set, so the same pairs in another order are the same set (a
// set names each voter once). A key keeps a pointer to its set: 8 bytes
// instead of a slice's 24.
type sharedIncs struct {
	sets [8]*voterIncs // the sets handed out last, in turn
	next int
	buf  voterIncs
}

// ofReplies returns the shared set of the voters that sent replies.
func (s *sharedIncs) ofReplies(replies []reply) *voterIncs {
	s.buf = s.buf[:0]
	for _, r := range replies {
		s.buf = append(s.buf, voterInc{r.from, r.inc})
	}
	return s.of(s.buf)
}

// with returns the shared set of v's pairs and x.
func (s *sharedIncs) with(v voterIncs, x voterInc) *voterIncs {
	s.buf = append(append(s.buf[:0], v...), x)
	return s.of(s.buf)
}

// of returns the shared set of the pairs in v, which it does not keep.
func (s *sharedIncs) of(v voterIncs) *voterIncs {
	for _, w := range s.sets {
		if w != nil && len(*w) == len(v) && w.holdsAll(v) && v.holdsAll(*w) {
			return w
		}
	}
	w := new(voterIncs)
	*w = slices.Clip(slices.Clone(v))
	s.sets[s.next] = w
	s.next = (s.next + 1) % len(s.sets)
	return w
}

// heldLease is a lease this node holds.
type heldLease struct {
	epoch    uint64
	deadline time.Duration // t0 of the latest successful grant or renewal + HolderTTL
	// opts are the options of the acquire that took the lease, with no
	// Deadline (that acquire's own), and shared with every lease taken
	// with the same ones (Proposer.leaseOptions): they do not change while
	// the lease is held.
	opts *AcquireOptions
	gen  uint64 // bumps invalidate the lease's timers
	// noticeAt is when the armed notice timer fires (0: none armed). A
	// renewal does not move it: the timer, once due, looks at the deadline
	// then and sets itself again if it moved, so that a node renewing many
	// leases arms one notice timer per lease per TTL, not per renewal.
	noticeAt time.Duration
	index    int32 // in Proposer.held (an int32 and renewing share a word: the lease is 64 bytes)
	renewing bool
	tag      any // Node.TagLease
}

// lastStart is the t0 of the latest successful grant or renewal: the
// deadline is always that t0 + HolderTTL.
func (l *heldLease) lastStart() time.Duration { return l.deadline - l.opts.HolderTTL }

// idleKey is an entry of the idle list; seq tells a stale entry (the key
// was used and went idle again since) from the current one.
type idleKey struct {
	ks  *keyState
	seq uint32
}

// timerKind is what a timer is for.
type timerKind uint8

const (
	timerRound timerKind = iota + 1
	timerRetry
	timerWake
	timerRenew
	timerNotice
	timerChange
	timerObserve
)

// timer is one of the proposer's timers: when it fires, what for, and the
// generation of what it is for that it was armed in (a later one makes it
// stale).
type timer struct {
	at   time.Duration
	seq  uint64
	kind timerKind
	// on is what the timer is for: an *op (timerRound, timerRetry,
	// timerWake), a *keyState (timerNotice) or an *observation
	// (timerObserve); nil for timerRenew and timerChange. One field for
	// the three keeps a timer at 48 bytes: a node holding 100,000 leases
	// keeps a notice timer for each, and more round timers after a burst
	// of renewals.
	on  any
	gen uint64
}

// op is the operation the timer is for, nil if it is for none.
func (t *timer) op() *op {
	x, _ := t.on.(*op)
	return x
}

// ks is the key whose lease the notice timer is for.
func (t *timer) ks() *keyState { return t.on.(*keyState) }

// ob is the observation the timer is for.
func (t *timer) ob() *observation { return t.on.(*observation) }

// timerHeap orders timers by time, then by arming order.
type timerHeap = minHeap[timer, *timer]
