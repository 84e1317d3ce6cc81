package quorum

import (
	"fmt"
	"slices"
	"time"
)

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

type phase uint8

const (
	phaseQueued  phase = iota // waiting for the key's slot
	phasePrepare              // prepare sent, collecting promises
	phaseAccept               // accept sent, collecting acks
	phaseBackoff              // between rounds
	phaseWaiting              // acquire parked until the key frees
	phaseDone
)

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

// holdsAll says whether every pair of o is in v.
func (v voterIncs) holdsAll(o voterIncs) bool {
	for _, x := range o {
		if !slices.Contains(v, x) {
			return false
		}
	}
	return true
}

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

// okReplies are the replies that granted the ballot.
func okReplies(all []reply) []reply {
	n := 0
	for _, r := range all {
		if r.res.OK {
			n++
		}
	}
	if n == len(all) {
		return all
	}
	ok := make([]reply, 0, n)
	for _, r := range all {
		if r.res.OK {
			ok = append(ok, r)
		}
	}
	return ok
}

// dropFast forgets ks's fast path.
func (p *Proposer) dropFast(ks *keyState) {
	if ks.fastVoters != nil || ks.fastRID != 0 {
		if r, ok := p.rounds.get(ks.fastRID); ok && r.late == ks {
			p.rounds.remove(ks.fastRID)
		}
		ks.fastVoters, ks.fastRID = nil, 0
	}
}

// roundRef is what Proposer.rounds knows of a round: the operation whose
// round is in flight, or the key whose fast path a round that ended left.
type roundRef struct {
	x    *op
	late *keyState
}

// startRound begins a round of x: straight to accept when the fast path
// holds, else a prepare with a fresh ballot.
func (p *Proposer) startRound(x *op) {
	now := p.clock.Now()
	if x.cancelled {
		p.finish(x, OpResult{Outcome: Cancelled, Unknown: x.unknown})
		return
	}
	x.noticesAt = x.ks.noticeCount()
	if now >= x.deadline {
		p.giveUp(x)
		return
	}
	ks := x.ks
	x.attempts++
	x.streak++
	p.stats.Rounds++
	p.newRound(x)
	// Read t0 before anything of the round is sent (PaxosLease): every
	// acceptor that accepts this round does so after t0 in real time.
	x.t0, x.roundStart = now, now
	if x.kind == kindAcquire && p.lockedByOwnLease(x, now) {
		return
	}
	if fp, voters := ks.fastPath(), ks.fastVoters; fp != nil && !x.noFast && x.kind != kindRead {
		p.dropFast(ks) // spent; a successful accept renews it
		x.ballot = p.ownBallot(fp.next)
		v, res, write := p.change(x, fp.base, nil, now)
		switch {
		case write:
			p.stats.FastRounds++
			x.fast = true
			p.sendAccepts(x, v, *voters)
			return
		case res.Outcome == Locked && res.Holder == p.cfg.ID && ks.lease != nil:
			// Held by this node's own live lease: no need to ask anyone.
			p.conclude(x, res)
			return
		}
		// Anything else needs what the acceptors hold now, not what this
		// node last wrote: prepare.
	}
	x.noFast = false
	x.fast = false
	x.phase = phasePrepare
	if (x.kind == kindRead && x.attempts == 1) || (x.kind == kindForget && !x.writeBack) {
		// Peek first: most reads find the value chosen and need no ballot.
		// (A forget peeks, and prepares only to write the key back.)
		x.peek = true
		for i := range p.m.Voters {
			p.push(i, Op{ID: x.rid, Kind: OpPeek, Key: ks.key})
		}
		return
	}
	x.peek = false
	x.ballot = p.newBallot(ks)
	watch := x.kind == kindAcquire && x.opts.Wait
	x.watched = x.watched || watch
	ifFree := p.rules.asksIfFree(x)
	for i := range p.m.Voters {
		p.push(i, Op{ID: x.rid, Kind: OpPrepare, Key: ks.key, Ballot: x.ballot, Watch: watch, IfFree: ifFree})
	}
}

// lockedByOwnLease concludes an acquire that waits behind this node's own
// lease on the key: nobody need be asked. A prepare would only promise a
// ballot above the holder's next one and cost its renewal or release the
// one-round-trip path; the release wakes this acquire.
func (p *Proposer) lockedByOwnLease(x *op, now time.Duration) bool {
	l := x.ks.lease
	if l == nil {
		return false
	}
	p.conclude(x, OpResult{Outcome: Locked, Holder: p.cfg.ID, HolderInc: p.cfg.Incarnation, Epoch: l.epoch,
		Remaining: max(l.deadline-now, 0)})
	return true
}

// asksIfFree reports whether x's prepare asks IfFree: an acquire's
// (design.md R27), and a forget's write-back, which asks as an acquire does:
// it must not cost a holder, or the waiters a key is handed to, their
// ballot (design.md R76).
func asksIfFree(x *op) bool { return x.kind == kindAcquire || x.kind == kindForget }

// newBallot returns a ballot of this proposer for ks that it has never used
// on any key: above the highest counter seen on ks (so that it can win) and
// above every counter this incarnation used before. A per-key counter alone
// is not enough: the state of an idle key is forgotten (maybeForget), and a
// counter started again would reuse a ballot that may carry a value at some
// acceptor already; two values at one ballot break Paxos (design.md R4).
func (p *Proposer) newBallot(ks *keyState) Ballot {
	c := p.rules.ballotCounter(p, ks)
	ks.counter, p.ballots = c, max(p.ballots, c)
	return p.ownBallot(c)
}

// nextCounter is the counter of a new ballot on ks: above the highest seen
// on ks and every one this incarnation used (design.md R4).
func (p *Proposer) nextCounter(ks *keyState) uint64 { return max(ks.counter, p.ballots) + 1 }

// ownBallot is this proposer's ballot with counter c.
func (p *Proposer) ownBallot(c uint64) Ballot {
	return Ballot{Counter: c, Incarnation: p.cfg.Incarnation, Node: p.cfg.ID}
}

func (p *Proposer) newRound(x *op) {
	p.endRound(x)
	p.nextRID++
	x.rid = p.rounds.add(roundRef{x: x}, p.nextRID)
	x.votes = newTally(p.rules.quorum(p))
	if x.replies == nil {
		if n := len(p.spareReplies); n > 0 {
			x.replies, p.spareReplies = p.spareReplies[n-1], p.spareReplies[:n-1]
		} else {
			x.replies = make([]reply, 0, len(x.votes.m.Voters))
		}
	}
	x.replies = x.replies[:0]
	x.timerGen++
	x.phaseAt = p.clock.Now()
	wait := p.cfg.RoundTimeout
	if x.kind == kindRenew {
		wait = p.roundTimer()
	}
	p.arm(timer{at: x.phaseAt + wait, kind: timerRound, on: x, gen: x.timerGen})
}

// roundTimer is how long a renewal waits for its majority before it is
// tried again: RoundTimeout, or longer when phases have been taking longer
// (an overloaded node, a renewal batch of many thousand leases), up to
// 8×RoundTimeout, as TCP sizes its retransmission timer. A renewal has time
// (it starts a third of the way into its lease), and retrying sooner than
// answers can come would only double the load that made them slow: every
// lease of the batch would time out at once and go back to a two-phase
// round. (Only the wait adapts: how late a round may still send its
// accepts does not. Acquires keep RoundTimeout: a lost round of theirs
// costs one key, not a batch.)
func (p *Proposer) roundTimer() time.Duration {
	rto := p.srtt + 4*p.rttvar
	return min(max(rto, p.cfg.RoundTimeout), 8*p.cfg.RoundTimeout)
}

// observeRTT feeds how long a phase took to reach its majority into the
// round timer.
func (p *Proposer) observeRTT(d time.Duration) {
	if p.srtt == 0 {
		p.srtt, p.rttvar = d, d/2
		return
	}
	diff := p.srtt - d
	if diff < 0 {
		diff = -diff
	}
	p.rttvar = (3*p.rttvar + diff) / 4
	p.srtt = (7*p.srtt + d) / 8
}

func (p *Proposer) push(voter int, o Op) {
	r := &p.out[voter]
	if r.Ops == nil {
		r.Config, r.From, r.To = p.m.ID, p.cfg.ID, p.m.Voters[voter]
		r.Ops = newOps()
	}
	r.Ops = append(growOps(r.Ops), o)
}

// sendAccepts sends v at x.ballot to every voter whose incarnation is known,
// promising the next ballot of this proposer at the same time.
func (p *Proposer) sendAccepts(x *op, v Value, incs voterIncs) {
	x.phase = phaseAccept
	x.proposed = v
	if x.parent == nil && x.kind != kindRead && x.kind != kindRenew && x.kind != kindUpdate && x.kind != kindForget && x.repair == nil {
		if !slices.Contains(x.attempted, v.Epoch) {
			x.attempted = append(x.attempted, v.Epoch)
			x.attemptedAt = append(x.attemptedAt, x.roundStart)
		}
		if v.Held {
			x.leases = append(x.leases, v.Lease)
		}
	}
	x.next = p.newBallot(x.ks)
	if !x.fast {
		// From the prepare to the accept: a new round id, and the
		// prepare's is kept while the accepts are out, so that a voter
		// whose promise comes in late still gets the accept (latePromise).
		prep := x.rid
		p.newRound(x)
		x.prepRID = prep
		p.latePrep[prep] = x
	}
	if cap(x.sentTo) == 0 {
		x.sentTo = x.sentToBuf[:0]
	}
	x.sentTo = x.sentTo[:0]
	for i, id := range p.m.Voters {
		if inc := p.rules.acceptInc(p, x, id, incs); inc != 0 {
			p.push(i, p.acceptOp(x, inc))
			x.sentTo = append(x.sentTo, voterInc{id, inc})
		}
	}
	x.unknown, x.wrote = true, true
}

// acceptInc is the life of voter that x's accept is addressed to, given the
// voters that promised its ballot; 0 sends it nothing (design.md R23).
func (p *Proposer) acceptInc(x *op, voter NodeID, promised voterIncs) uint64 {
	if inc := promised.get(voter); inc != 0 || x.fast {
		// On the fast path, a voter whose promise of this ballot this
		// node does not hold gets nothing. The fast path's ballot is
		// safe only at the voters that promised it when they accepted
		// the base, in the lives that promised: another voter, or
		// another life of one, may have accepted a newer value since
		// (after a restart of every voter, say), and accepting this
		// ballot would put the stale value above it.
		return inc
	}
	// Not among the voters that promised: it may accept if it promised
	// nothing higher (the value is safe: a majority promised this ballot
	// and reported what it held). Never heard from: nothing.
	return p.incs[voter]
}

// acceptOp is x's accept, addressed to a voter's incarnation inc.
func (p *Proposer) acceptOp(x *op, inc uint64) Op {
	return Op{ID: x.rid, Kind: OpAccept, Key: x.ks.key, Ballot: x.ballot, Inc: inc, Value: x.proposed,
		Next: x.next, Migrate: x.kind == kindMigrate && x.timeLeft > 0}
}

// maybeCompleteFree sends x's accept, now that a majority took it, to the
// voters a fast round left out: a release on the fast path goes only to
// the voters whose promise of its ballot this node held when it began, and
// a voter whose acknowledgment of the grant came later kept the grant, so
// that no voter would ever forget the key (a register is forgotten only
// once every voter holds one free value at one ballot, see
// acceptor_registers.go). Sending is safe now, not before: the value is
// chosen at x.ballot, so any voter that has promised nothing higher may
// accept it. Their acknowledgments come back as late acceptances of the
// round (Proposer.rounds), each added to the fast path (each promised
// x.next with it).
func (p *Proposer) maybeCompleteFree(x *op) {
	if !x.fast || x.proposed.Held || (x.kind != kindRelease && x.kind != kindCleanup) {
		return
	}
	for i, id := range p.m.Voters {
		if inc := p.incs[id]; inc != 0 && x.sentTo.get(id) == 0 {
			p.push(i, p.acceptOp(x, inc))
			x.sentTo = append(x.sentTo, voterInc{id, inc})
		}
	}
}

// latePromise takes a promise that came in after x's prepare round had its
// majority and moved on to accept: the voter gets the accept too, so that
// it takes part in the fast path the round leaves, like the others.
func (p *Proposer) latePromise(x *op, from NodeID, inc uint64, res *Result) {
	if !res.OK || x.phase != phaseAccept || x.sentTo.get(from) != 0 {
		return
	}
	if i := p.m.index(from); i >= 0 {
		p.push(i, p.acceptOp(x, inc))
		x.sentTo = append(x.sentTo, voterInc{from, inc})
	}
}

// endRound forgets x's round in flight, and the prepare before it.
func (p *Proposer) endRound(x *op) {
	if x.rid != 0 {
		if ks := x.ks; ks != nil && ks.fastRID == x.rid && ks.fastVoters != nil {
			// The round left ks's fast path: late acceptances join it.
			p.rounds.set(x.rid, roundRef{late: ks})
		} else {
			p.rounds.remove(x.rid)
		}
		x.rid = 0
	}
	if x.prepRID != 0 {
		delete(p.latePrep, x.prepRID)
		x.prepRID = 0
	}
}

// Step takes an acceptor's response.
func (p *Proposer) Step(resp *Response) {
	if resp.Members != nil && (resp.Status == StatusWrongConfig || resp.Status == StatusNotVoter) {
		p.learn(resp.From, *resp.Members)
	}
	if resp.Config != p.m.ID {
		return
	}
	if resp.Inc != 0 {
		p.incs[resp.From] = resp.Inc
	}
	switch resp.Status {
	case StatusOK, StatusRecovering:
		// A recovering acceptor refuses every operation (ReasonNoVote).
	default:
		// One of another configuration votes on nothing here; the rounds
		// it was asked about wait for the other voters.
		return
	}
	for i := range resp.Results {
		p.handleResult(resp.From, resp.Inc, &resp.Results[i])
	}
}

func (p *Proposer) handleResult(from NodeID, inc uint64, res *Result) {
	r, _ := p.rounds.get(res.ID)
	x := r.x
	if x == nil {
		// A round that already ended; a voter's late accept still adds to
		// the fast path it left: that voter promised its ballot too.
		if ks := r.late; ks != nil {
			if v := ks.fastVoters; res.OK && v != nil && v.get(from) == 0 {
				ks.fastVoters = p.incsShared.with(*v, voterInc{from, inc})
			}
			return
		}
		if o := p.obsRounds[res.ID]; o != nil {
			p.observeAnswer(o, from, inc, res)
			return
		}
		if y := p.latePrep[res.ID]; y != nil {
			p.latePromise(y, from, inc, res)
			return
		}
		return
	}
	if res.Promised.Counter > x.ks.counter {
		x.ks.counter = res.Promised.Counter
	}
	x.ks.epochSeen = max(x.ks.epochSeen, res.MaxEpoch, res.Value.Epoch)
	if !p.rules.countVote(&x.votes, from, res.OK) {
		return // not a voter, or a duplicate
	}
	switch res.Reason {
	case ReasonHandoff:
		x.votes.handedOff = true
		x.votes.refusedByRival = true
	case ReasonPromised, ReasonHeld:
		x.votes.refusedByRival = true
	}
	x.replies = append(x.replies, reply{from, inc, *res})
	switch {
	case x.kind == kindForget:
		p.stepForget(x)
	case x.peek:
		if x.votes.nyes+x.votes.nno >= x.votes.m.Majority() && !p.maybeConcludeEarly(x) {
			// No agreement to be seen: read properly, with a ballot.
			p.startRound(x)
		}
	case x.votes.reached():
		p.roundWon(x)
	case x.phase == phasePrepare && p.maybeConcludeEarly(x):
	case x.votes.lost() && p.mayStillConclude(x):
		// The ballot cannot win, but what the voters that have not
		// answered yet report may settle x without one (an acquire that
		// finds the key held by a majority waits for it instead of
		// duelling its holder): wait for them, or for the round timer.
		// With an even number of voters, half of them refusing is not a
		// majority; a waiter that took every such round for lost at once
		// never parked on a key held in a configuration of six, and kept
		// outbidding the holder.
	case x.votes.lost() || p.fastRoundLost(x):
		p.roundLost(x)
	}
}

// roundLost runs when too many refused x's round for its ballot to win:
// other proposers are at work on the key, which is not the same as no
// quorum. It jumps the ballot counter ahead by a random stride, growing
// with each loss (those that beat us did so with the highest ballot they
// knew plus one, and matching them only restarts the duel), and tries
// again.
func (p *Proposer) roundLost(x *op) {
	if x.kind == kindConfig && p.refusedForNoDisk(x) {
		return
	}
	p.stats.Conflicts++
	x.contended = x.votes.refusedByRival
	if x.contended {
		x.ks.counter += uint64(p.rand.Intn(1 << min(x.streak+1, 10)))
	}
	if x.kind == kindAcquire && p.handedOff(x) {
		return
	}
	x.favoured = p.ownGrantLeads(x)
	p.retry(x)
}

// handedOff ends or parks an acquire whose round lost because the key was
// just handed to the waiters in line (design.md R28): for a try, that is a
// locked key; a waiting acquire joined the line and is told when its turn
// comes (or tries again after a grace).
func (p *Proposer) handedOff(x *op) bool {
	if !x.votes.handedOff || x.cancelled || x.unknown {
		return false
	}
	if !x.opts.Wait {
		p.finish(x, OpResult{Outcome: Locked})
		return true
	}
	p.park(x, OpResult{Outcome: Locked, Remaining: 2 * p.cfg.RoundTimeout})
	return true
}

// refusedForNoDisk ends a configuration write that voters refused for want
// of a disk: they refuse to vote on voter changes, and trying again is no
// use (design.md R60).
func (p *Proposer) refusedForNoDisk(x *op) bool {
	who := noDiskVoters(x.replies)
	if x.cfgWrite == nil || len(who) == 0 {
		return false
	}
	p.finish(x, OpResult{Outcome: Refused, Unknown: (x.phase == phaseAccept && x.votes.nyes > 0) || x.unknown,
		Err: fmt.Errorf("%w: voter changes need every voter to keep its state on disk, and %v keep none (set a data directory)", ErrBadChange, who)})
	return true
}

// fastRoundLost reports whether a fast-path accept round can no longer
// reach a majority: it went only to the voters that promised its ballot
// (sometimes just a majority of them), and too many of those refused. The
// others were never asked and will not answer, so without this the round
// would wait out its timer: a release whose accepts went to two voters of
// three, one of which had promised a waiter's ballot meanwhile, kept the
// key's slot, and every acquire of the node queued behind it, for a round
// timeout and a half.
func (p *Proposer) fastRoundLost(x *op) bool {
	if !x.fast || x.phase != phaseAccept {
		return false
	}
	pending := len(x.sentTo) - x.votes.nyes - x.votes.nno
	return x.votes.nyes+max(pending, 0) < x.votes.m.Majority()
}

// ownGrantLeads reports whether the acquire x lost a round only to ballots
// while its own grant, written in an earlier round, is the highest value
// the voters reported: every other acquire then finds the key locked by it,
// so x is the one to finish the key, and backing off only leaves it
// blocked for longer.
func (p *Proposer) ownGrantLeads(x *op) bool {
	if x.kind != kindAcquire || len(x.leases) == 0 {
		return false
	}
	if x.phase == phaseAccept {
		// Some voters accepted x's grant, at the highest ballot x knows
		// of: rivals that prepare now find it there, above the rest.
		return x.votes.nyes > 0 && x.proposed.heldBy(p.cfg.ID, p.cfg.Incarnation)
	}
	base, _ := highest(informative(x.replies))
	return base.heldBy(p.cfg.ID, p.cfg.Incarnation) && slices.Contains(x.leases, base.Lease)
}

// forget starts asking the voters to forget key (see
// acceptor_registers.go). Its outcome is not reported.
func (p *Proposer) forget(key string) {
	ks := p.key(key)
	x := p.newOp(ks, kindForget, p.clock.Now()+p.cfg.RoundTimeout)
	p.forgetting++
	p.enqueue(x, false)
}

// stepForget moves a forget on once every voter answered its round: the
// peeks (maybeForgetKey), the write-back's prepare (maybeWriteBack) or its
// accept (forgetWrittenBack). A write-back that any voter refuses ends at
// once: someone else is at work on the key (or a voter cannot vote), and
// the key is theirs, not the sweep's.
func (p *Proposer) stepForget(x *op) {
	switch {
	case x.writeBack && x.votes.nno > 0:
		p.finish(x, OpResult{})
	case x.votes.nyes+x.votes.nno < len(x.votes.m.Voters):
	case x.peek:
		p.maybeForgetKey(x)
	case x.phase == phasePrepare:
		p.maybeWriteBack(x)
	default:
		p.forgetWrittenBack(x)
	}
}

// maybeForgetKey ends a forget once every voter answered its peek: if all
// hold one free value at one ballot, with no timer running, each is told
// to forget the key at that ballot. If all hold it free but not at one
// ballot, the key is written back first (maybeWriteBack).
func (p *Proposer) maybeForgetKey(x *op) {
	switch {
	case p.rules.forgets(x):
		for i := range x.votes.m.Voters {
			p.push(i, Op{Kind: OpForget, Key: x.ks.key, Ballot: x.replies[0].res.Accepted})
		}
	case p.rules.writesBack(p, x.replies) && x.ks.key != ConfigKey && !p.m.Pending:
		// Free at the highest ballot, no timer anywhere, but not one free
		// value at one ballot everywhere: copies a voter demoted when it
		// went live after a majority loss (demoteCopies: no two voters
		// ever agree on one), a register a voter kept when the others
		// forgot the key (its forget was lost), or a grant a voter holds
		// below the release it missed (TestAudit11SweepLeavesARelease-
		// AVoterMissed). Peeks alone would find them so at every sweep,
		// for good.
		x.writeBack = true
		p.startRound(x)
		return
	}
	p.finish(x, OpResult{})
}

// oneFreeValue reports whether every voter answered x's peeks with one
// free value at one ballot, no timer running: the key can be forgotten as
// it stands (design.md R71). (A copy counts: every voter answered, and all
// hold one free value at one ballot; dropping it loses nothing a read
// needs. Refusing copies kept every key a restarted voter copied for
// good.)
func oneFreeValue(x *op) bool {
	for i := range x.replies {
		r := &x.replies[i].res
		if !r.OK || r.Value.Held || r.Remaining > 0 || r.Value.Config != nil || r.Accepted != x.replies[0].res.Accepted {
			return false
		}
	}
	return true
}

// mayWriteBack reports whether a sweep may write a key back on these
// answers of every voter: each answered, no voter times a lease of it or
// holds a voter configuration in it, and the value at the highest ballot
// is free. With no timer at any voter no lease of the key runs (a lease's
// accept majority times it, and voters that lost their timers in a
// restart waited out every lease of before), so the free value is what a
// read would write back too. (Before, every voter had to hold a free
// value: a voter that missed a release kept the grant below it, and the
// key was never forgotten; fault sweep-needs-every-free.)
//
// The value at the highest ballot may also be a grant whose lease has run
// out at every voter (mayFreeExpired): the write-back then frees it, as a
// takeover would, before the key is forgotten.
func (p *Proposer) mayWriteBack(replies []reply) bool {
	for i := range replies {
		r := &replies[i].res
		if !r.OK || r.Value.Config != nil || p.rules.sweepYields(r) {
			return false
		}
	}
	v, _ := highest(replies)
	return !v.Held || p.rules.freesExpired(p, v)
}

// timesALease reports whether a voter's answer says it times a lease of
// the key: a sweep's write-back yields to it (design.md R76).
func timesALease(r *Result) bool { return r.Remaining > 0 }

// A sweep frees an expired grant. A grant whose holder crashed, was shut
// down without releasing, or lost its lease and never freed it, stays in
// every voter's register until someone acquires the key again, and a key
// locked once per entity (invoice/<id>) never is: without this, every key
// a crashed node held was kept for good (issue 11 finding 6). So when the
// value a sweep's peeks find at the highest ballot is a grant, and every
// voter answered and none times a lease of the key (none reports time
// left, none holds a configuration, no voter change is pending), the
// write-back writes it free, keeping its epoch, as the holder's release
// would have; the forget then drops it at the write's ballot once every
// voter acknowledged it.
//
// Safe as a takeover is, and more cautious: an acquire may take a key
// over when a majority reports no live timer of the grant, since the
// majority that accepted its latest lease period meets it, and a timer of
// that period outlasts the holder's deadline on any clock within the
// drift bound (D_P ≤ γ·D_A, as in blocked). The write-back asks every
// voter, twice: the peeks, then an IfFree prepare, which a voter still
// timing the lease refuses (and whose answers mayWriteBack checks again,
// Remaining included: the holder's own node is not refused, and never
// frees its own grant here, that is its cleanup's work). A renewal that
// lands between the peeks and the prepare starts a timer that refuses it;
// one that lands after the promise is below the promised ballot, and
// refused. An acquire that races the sweep wins or loses by ballots like
// any two writes: if its grant was chosen before a voter promised the
// sweep's ballot, that voter times it and the write-back ends; if not,
// its accept is refused where the sweep was promised, and its next round
// reads the free value and grants above its epoch.
//
// The free value keeps the grant's epoch, so every register and floor
// knows it and the next grant's token is above it (C2). The holder, if it
// is only cut off, learns nothing new: its lease ran out on its own clock
// before any voter's timer did, its renewal finds the key not its own
// (lost), and its release, which only a held lease starts, says NotHeld
// unless that very release wrote the free value (change, kindRelease).
// The node reports the free as background work (OpResult.Swept).
//
// The cost is a sweep's usual one: a key freed this way costs the peeks,
// a prepare and an accept at every voter, and the forget, once (three
// voters that pick it at one sweep duel, and two of them stop at the
// prepare, as for any write-back). A live lease costs peeks only where
// a voter no longer times it though the others do (one cut off from the
// holder, or left out of its one-round-trip path): that voter picks it
// once per RegisterIdle, and the peeks leave it. Before, such a register
// was looked at and never picked.

// mayFreeExpired reports whether a sweep may free v, a grant at the
// highest ballot every voter answered with no time left on it: not if the
// grant is this node's own (its cleanup frees those, after the deadline it
// reported).
func (p *Proposer) mayFreeExpired(v Value) bool {
	return v.Config == nil && !v.heldBy(p.cfg.ID, p.cfg.Incarnation)
}

// A sweep's write-back. The voters answered a forget's peeks with no
// timer and a free value at the highest ballot, but not one free value at
// one ballot, and a forget needs that (a voter drops only what every
// voter was seen to hold). So the forget writes the key back as
// a read that writes back does, and as the key's own release would have:
// it prepares a fresh ballot at every voter and, if every voter promised
// it and the answers still allow it (mayWriteBack), has every voter accept
// the value of the highest ballot they reported. Once every voter acknowledged that, each
// holds one free value at one ballot, which is what the peeks of the next
// sweep would find: the forget tells them to forget it at that ballot at
// once (as a node forgets a release that every voter acknowledged,
// Proposer.forgettable).
//
// Safe as a read's write-back is: the value is the highest every voter
// reported after promising the ballot, so a value chosen before is that
// one (and it is free: nothing is written unless that value is free and
// no voter times a lease). The write changes no epoch (every register
// keeps the highest epoch it knew, and the drop raises the floors to it),
// and the ballots and marks are those of any round.
//
// It yields to anyone at work on the key: the prepare asks as an acquire
// does (Op.IfFree: no promise while a lease runs or the key is handed to
// its waiters), and any refusal, a reply timing a lease, or a grant at
// the highest ballot, ends the
// forget without writing or trying again. An acquire that prepared just
// before the write-back and has not written yet is the one it can cost a
// round (its accept finds the higher promise; its next round wins, at
// once: a first round lost to a promised ballot goes again without
// backing off).
//
// It does not storm. A forget writes back at most once, and only after
// peeks of every voter; sweeps pick a key only while it is idle and
// droppable at the sweeping voter, and no oftener than the sweeps come
// (sweepEvery). A write-back every voter acknowledged ends in the forget;
// one that did not touched the key at the voters it reached, so that below
// MaxRegisters it is looked at again only after another RegisterIdle.

// maybeWriteBack sends the write-back's accepts once every voter promised
// its ballot, if every voter still holds the key free.
func (p *Proposer) maybeWriteBack(x *op) {
	if !p.mayWriteBack(x.replies) {
		p.finish(x, OpResult{}) // taken meanwhile: leave it
		return
	}
	if p.clock.Now() >= x.t0+p.sendWindow(x) || p.m.Pending {
		// Late; or a voter change began (this node adopted it, and the
		// round started again under it), and nothing is forgotten while
		// one is pending: leave it.
		p.finish(x, OpResult{})
		return
	}
	base, _ := highest(x.replies)
	incs := make(voterIncs, 0, len(x.replies))
	for _, r := range x.replies {
		incs = append(incs, voterInc{r.from, r.inc})
	}
	p.stats.WriteBacks++
	if base.Held {
		// An expired grant (mayFreeExpired): free it, epoch kept.
		g := base
		x.freed = &g
		base = Value{Epoch: g.Epoch}
		p.stats.FreedExpired++
	}
	p.sendAccepts(x, base, incs)
}

// forgetWrittenBack tells every voter to forget the key once every voter
// accepted the write-back: each then holds its free value at x.ballot.
func (p *Proposer) forgetWrittenBack(x *op) {
	if x.votes.nyes == len(x.votes.m.Voters) {
		for i := range x.votes.m.Voters {
			p.push(i, Op{Kind: OpForget, Key: x.ks.key, Ballot: x.ballot})
		}
	}
	p.finish(x, OpResult{})
}

// maybeConcludeEarly ends a prepare round that a majority answered, some of
// them refusing the ballot, when what they reported settles the operation
// without a write: an acquire that finds the key held by a live lease, or a
// read that finds a value a majority accepted at one ballot. Contenders for
// a held key then wait instead of fighting over ballots.
func (p *Proposer) maybeConcludeEarly(x *op) bool {
	if told(x.replies) < x.votes.m.Majority() {
		return false
	}
	info := informative(x.replies)
	base, hi := highest(info)
	switch x.kind {
	case kindAcquire:
		return p.acquireConcludesEarly(x, base, hi, info)
	case kindRead:
		return p.readConcludesEarly(x, base, hi, info)
	}
	return false
}

// acquireConcludesEarly ends an acquire's prepare round, before it has a
// majority of promises, if the answers info (base at hi the highest) show
// the key locked by a grant that will end: it waits for it (design.md R29).
func (p *Proposer) acquireConcludesEarly(x *op, base Value, hi Ballot, info []reply) bool {
	if x.cancelled {
		return false
	}
	res, locked := p.blocked(x, base, info, p.clock.Now())
	if !locked || !p.rules.parksBehind(p, x, base, hi, info) {
		return false
	}
	p.conclude(x, res)
	return true
}

// readConcludesEarly ends a read's peeks or prepare round if the answers
// info (base at hi the highest) show base chosen: a majority accepted it
// at hi, none as a copy (design.md R15), and its lease's end, if they say
// it ended, is settled (readSettlesLive).
func (p *Proposer) readConcludesEarly(x *op, base Value, hi Ballot, info []reply) bool {
	if x.readOrder && hi.IsZero() {
		return false // a ballot must order the empty register: prepare
	}
	same := 0
	live := false
	for i := range info {
		r := &info[i].res
		if r.Accepted == hi && !r.Copy {
			same++
			if r.Remaining > 0 && base.Held {
				live = true
			}
		}
	}
	if same < x.votes.m.Majority() || !p.rules.readSettlesLive(base, hi, live) {
		return false
	}
	p.conclude(x, OpResult{
		Outcome: ReadDone, Value: base, Live: live, Epoch: readEpoch(base, info),
		Holder: base.Holder, HolderInc: base.HolderInc, Accepted: hi,
	})
	return true
}

// readSettlesLive reports whether a read may report base, which a majority
// of voters accepted at hi (every one of them, if it prepared), live or
// not as those voters' timers say (live: some timer of it runs). A grant
// live at one of them is live. One whose timers all ran out ended only if
// hi began a lease period (base.Lease): each of them started its timer on
// accepting hi, so each answered after the holder's deadline for that
// period, and a renewal after it that succeeded would have reached one of
// them first (the proof of rule O4, proposer_observe.go). At a write-back's
// ballot, voters that never timed the grant answer "no timer" at any time,
// and a renewal through other voters may succeed after they answer: the
// read writes the value back instead, which no renewal it missed lets
// through (proposer_change.go, kindRead).
func readSettlesLive(base Value, hi Ballot, live bool) bool {
	return live || !base.Held || hi == base.Lease
}

// parksBehind reports whether an acquire that finds the key locked by
// base's grant (hi the highest ballot the answers info report) waits for
// it, without a ballot: only behind a grant that will end (design.md R29).
// Not while the grant is not yet seen held by a majority: it may be a
// rival's write that is never finished (waiting for its lease would stall
// the key: two acquires that each got their grant to one acceptor parked
// behind each other's for a whole TTL; the round goes on instead, and a
// majority of promises builds on what they hold). Nor when it was accepted
// below a ballot that a voter had promised when it said the key was free:
// these voters may not have heard of its release yet. But always when the
// holder's release is seen under way (releaseUnderWay): then the grant is
// the holder's to finish freeing, and only it can.
func (p *Proposer) parksBehind(x *op, base Value, hi Ballot, info []reply) bool {
	return releaseUnderWay(info, base) || (majorityHolds(info, base, x.votes.m.Majority()) && hi.Counter >= x.ks.freedAt())
}

// releaseUnderWay reports whether replies show the release of base's grant
// begun and not chosen: base, the value of the highest ballot a majority
// reports, is a grant, and a voter holds the free value of its epoch,
// accepted at a lower ballot. Only the node a grant names frees its epoch
// (its release, or its cleanup of a grant no lease stands for; every other
// write of a free value copies one), and here a write-back of the grant (a
// read's, or a voter change's, at a higher ballot) overtook the free value
// before a majority took it. No value chosen after a free value of an
// epoch is a grant of that epoch, so the release is not chosen; only the
// holder's next round can free the key (the others build on the grant,
// the highest value), and it goes on until it is. Meanwhile every acquire
// is refused where the grant's lease runs, and the promises it wins where
// the free value is only outbid the holder's next round: in a
// configuration of six, three voters holding each value, soak seed 301772
// kept a released key from its waiters for 404 ms that way. So an acquire
// that sees this waits to be told the key is free, as behind any lease
// (the voters that answered it before taking the release have it in their
// line, and tell their first waiter when they take it).
//
// This decides nothing about safety, only that an acquire writes nothing
// yet. It must not: a free value does not name whose grant it freed, and
// two acquires that raced can write grants of one epoch, so a free value
// of the epoch does not prove that the grant base holds was released.
func releaseUnderWay(replies []reply, base Value) bool {
	if !base.Held || base.Config != nil {
		return false
	}
	for i := range replies {
		if v := &replies[i].res.Value; !v.Held && v.Config == nil && v.Epoch == base.Epoch {
			return true
		}
	}
	return false
}

// told counts the replies that say what the acceptor holds; a voter that
// cannot vote (recovering, say) tells nothing.
func told(replies []reply) int {
	n := 0
	for i := range replies {
		switch replies[i].res.Reason {
		case ReasonNone, ReasonPromised, ReasonHeld:
			n++
		}
	}
	return n
}

// mayStillConclude reports whether a prepare round of x that can no
// longer win may yet be settled by maybeConcludeEarly once the voters that
// have not answered do: fewer than a majority told what they hold, or a
// live grant (for a read, an accepted ballot) leads what they told and the
// others could make up a majority holding it.
func (p *Proposer) mayStillConclude(x *op) bool {
	if x.phase != phasePrepare || !((x.kind == kindAcquire && !x.cancelled) || x.kind == kindRead) {
		return false
	}
	maj := x.votes.m.Majority()
	left := len(x.votes.m.Voters) - x.votes.nyes - x.votes.nno
	info := informative(x.replies)
	switch {
	case left == 0:
		return false
	case len(info) < maj:
		return len(info)+left >= maj
	}
	var same int
	var settles bool
	if x.kind == kindAcquire {
		same, settles = p.lockVotes(x, info)
	} else {
		same, settles = readVotes(x, info)
	}
	return settles && same < maj && same+left >= maj
}

// lockVotes counts the answers info of an acquire's prepare round that
// hold the grant that locks it, if one does (blocked): a majority of them
// would settle the acquire (acquireConcludesEarly).
func (p *Proposer) lockVotes(x *op, info []reply) (int, bool) {
	base, _ := highest(info)
	if _, locked := p.blocked(x, base, info, p.clock.Now()); !locked {
		return 0, false
	}
	same := 0
	for i := range info {
		if info[i].res.Value.sameGrant(base) {
			same++
		}
	}
	return same, true
}

// readVotes counts the answers info of a read's round that accepted the
// highest ballot they report, none as a copy: a majority of them would
// settle the read (readConcludesEarly).
func readVotes(x *op, info []reply) (int, bool) {
	_, hi := highest(info)
	if x.readOrder && hi.IsZero() {
		return 0, false
	}
	same := 0
	for i := range info {
		if r := &info[i].res; r.Accepted == hi && !r.Copy {
			same++
		}
	}
	return same, true
}

// majorityHolds reports whether at least majority of the replies hold
// base's grant.
func majorityHolds(replies []reply, base Value, majority int) bool {
	n := 0
	for i := range replies {
		if replies[i].res.Value.sameGrant(base) {
			n++
		}
	}
	return n >= majority
}

// agreed reports whether the replies all hold one accepted ballot, none of
// them as a copy: the value is then chosen (they are a majority), not
// merely the highest seen.
func agreed(replies []reply) bool {
	for _, r := range replies {
		if r.res.Accepted != replies[0].res.Accepted || r.res.Copy {
			return false
		}
	}
	return true
}

// informative are the replies that say what the acceptor holds: all of
// them, most of the time, and then the very slice (callers only read it;
// a copy per reply was an eighth of what the simulator allocated).
func informative(all []reply) []reply {
	if told(all) == len(all) {
		return all
	}
	out := make([]reply, 0, len(all))
	for _, r := range all {
		switch r.res.Reason {
		case ReasonNone, ReasonPromised, ReasonHeld:
			out = append(out, r)
		}
	}
	return out
}

// highest is the value of the highest accepted ballot among replies.
func highest(replies []reply) (Value, Ballot) {
	var base Value
	var hi Ballot
	for i, r := range replies {
		if i == 0 || hi.Less(r.res.Accepted) {
			base, hi = r.res.Value, r.res.Accepted
		}
	}
	return base, hi
}

func (p *Proposer) roundWon(x *op) {
	p.observeRTT(p.clock.Now() - x.phaseAt)
	switch x.phase {
	case phasePrepare:
		p.decide(x)
	case phaseAccept:
		p.accepted(x)
	}
}

// decide applies x's change to what a majority reported and either ends x
// or goes on to accept.
func (p *Proposer) decide(x *op) {
	now := p.clock.Now()
	x.unknown = false // the prepare has read past every earlier write of x
	// The value to build on comes from the voters that promised; what the
	// others said (a live lease, a higher epoch) still counts.
	base, _ := highest(okReplies(x.replies))
	if x.cancelled {
		if base.heldBy(p.cfg.ID, p.cfg.Incarnation) && x.ks.lease == nil {
			p.spawnCleanup(x.ks, 0, x.attempted)
		}
		p.finish(x, OpResult{Outcome: Cancelled})
		return
	}
	v, res, write := p.change(x, base, x.replies, now)
	if !write {
		if !agreed(okReplies(x.replies)) {
			// The conclusion rests on a value a majority may not hold yet
			// (a rival's write that might never be chosen): write it back
			// first, so that no later reader sees the register go back.
			x.repair = &res
			v = base
		} else {
			p.conclude(x, res)
			return
		}
	}
	if now >= x.t0+p.sendWindow(x) {
		// Too late to send accepts for this round: a restarted acceptor's
		// quarantine only covers rounds that end within the window.
		p.stats.Timeouts++
		p.retry(x)
		return
	}
	incs := make(voterIncs, 0, len(x.replies))
	for _, r := range x.replies {
		if r.res.OK {
			incs = append(incs, voterInc{r.from, r.inc})
		}
	}
	p.sendAccepts(x, v, incs)
}

// sendWindow bounds how long after t0 a round may send accepts.
func (p *Proposer) sendWindow(x *op) time.Duration {
	w := p.cfg.RoundTimeout
	if x.kind == kindAcquire || x.kind == kindRenew || x.kind == kindUpdate {
		if hw := x.opts.HolderTTL; hw > 0 && hw < w {
			w = hw
		}
	}
	return w
}

// accepted runs when a majority accepted x's value.
func (p *Proposer) accepted(x *op) {
	now := p.clock.Now()
	ks := x.ks
	x.unknown = false
	x.replies = okReplies(x.replies)
	if x.repair != nil {
		res := *x.repair
		x.repair = nil
		x.unknown = false
		p.conclude(x, res)
		return
	}
	if x.kind != kindRead {
		// A majority promised x.next as it accepted our value. (Not after a
		// read's write-back: that value is someone else's, and nothing can
		// be concluded from it without asking again.) The buffer is free:
		// a spent fast path is used only within the startRound that spent
		// it.
		p.dropFast(ks)
		// x.next and x.ballot are this node's ballots (newBallot, or the
		// fast path's Next, itself one).
		fp := &ks.fastBuf
		fp.next, fp.base, fp.accepted = x.next.Counter, x.proposed, x.ballot.Counter
		ks.fastVoters = p.incsShared.ofReplies(x.replies)
		ks.fastRID = x.rid // the round's end keeps its id for late acceptances
		p.maybeCompleteFree(x)
	}
	if x.next.Counter > ks.counter {
		ks.counter = x.next.Counter
	}
	if x.kind == kindRenew {
		p.renewed(x, now) // (reports no result: nothing to gather for one)
		return
	}
	quorum := make([]NodeID, 0, len(x.replies))
	for _, r := range x.replies {
		quorum = append(quorum, r.from)
	}
	res := OpResult{Quorum: quorum, Ballot: x.ballot, Epoch: x.proposed.Epoch, Config: x.votes.m.ID}
	switch x.kind {
	case kindAcquire:
		p.granted(x, res, now)
	case kindRelease, kindCleanup:
		p.released(x, res)
	case kindRead:
		p.readWrittenBack(x, res)
	case kindUpdate:
		p.updated(x, res)
	case kindConfig, kindMigrate:
		p.reconfigWritten(x, res)
	}
}

// granted runs when a majority accepted an acquire's grant.
func (p *Proposer) granted(x *op, res OpResult, now time.Duration) {
	ks := x.ks
	if x.cancelled {
		// Granted to nobody: free it now. No deadline was reported, so
		// nothing local stands in the way.
		p.spawnCleanup(ks, 0, x.attempted)
		p.finish(x, OpResult{Outcome: Cancelled})
		return
	}
	t0 := p.rules.holderStart(x, now)
	deadline := t0 + x.opts.HolderTTL
	if now >= deadline-x.opts.Notice {
		// The round took so long that the lease would be reported lost
		// on arrival. Take it again; the next round reclaims our own
		// grant with a fresh lease.
		p.retry(x)
		return
	}
	p.installLease(ks, x.proposed.Epoch, deadline, now, x.opts)
	res.Outcome, res.Deadline, res.LeaseStart, res.Value = Granted, deadline, t0, x.proposed
	p.stats.Granted++
	p.finish(x, res)
}

// released runs when a majority accepted a release's or a cleanup's free
// value.
func (p *Proposer) released(x *op, res OpResult) {
	res.Outcome = Released
	p.finish(x, res) // a release's wakes the acquires waiting behind the lease
	if x.kind == kindCleanup {
		p.wakeParked(x.ks)
	}
}

// readWrittenBack runs when a majority accepted a read's write-back: the
// value is chosen now.
func (p *Proposer) readWrittenBack(x *op, res OpResult) {
	res.Outcome, res.Value = ReadDone, x.proposed
	res.Holder, res.HolderInc = x.proposed.Holder, x.proposed.HolderInc
	res.Live, res.Accepted = x.readLive, x.ballot
	res.Epoch = p.rules.writtenBackEpoch(x)
	p.finish(x, res)
}

// reconfigWritten runs when a majority accepted a step of a voter change:
// a configuration written, or a key moved.
func (p *Proposer) reconfigWritten(x *op, res OpResult) {
	res.Outcome, res.Value = Granted, x.proposed
	if x.kind == kindMigrate {
		res.Outcome = ReadDone
	}
	p.finish(x, res)
}

// holderStart is when the holder's clock started for the lease period x
// wrote: t0, read before anything of the round was sent (PaxosLease), so
// that every acceptor that accepted it did so after t0 in real time and
// times it from then or later (design.md R18). Read at the confirmation
// (now), it would be late by the whole round.
func holderStart(x *op, now time.Duration) time.Duration { return x.t0 }

// retry ends x's round and schedules another after a random backoff.
func (p *Proposer) retry(x *op) {
	ks := x.ks
	p.dropFast(ks)
	x.repair = nil
	if x.contended {
		x.lastFailure = Locked
	} else {
		x.lastFailure = NoQuorum
	}
	p.endRound(x)
	now := p.clock.Now()
	if now >= x.deadline {
		p.giveUp(x)
		return
	}
	x.phase = phaseBackoff
	shift := min(x.streak, 5)
	wait := time.Duration(p.rand.Int63n(int64(p.backoff())<<shift + 1))
	if x.contended && (x.streak == 1 || x.favoured) {
		// A first round lost to a ballot promised before it (the last
		// holder's next one, usually): now that the counter is known, go
		// again at once; only a second loss means a duel.
		wait = 0
	}
	if !x.contended {
		// Silence or voters that cannot vote yet: asking again at once
		// only adds load. Wait as long as a round may take.
		wait += p.cfg.RoundTimeout / 2
	}
	if x.contended && ks.noticeCount() != x.noticesAt {
		// A voter said the key was free while this round was out (its
		// Notify travels apart from the replies, and may overtake them):
		// what the round heard is older than that. Go again now.
		x.timerGen++
		p.startRound(x)
		return
	}
	x.timerGen++
	p.arm(timer{at: now + wait, kind: timerRetry, on: x, gen: x.timerGen})
}

// backoff is the base of the random wait before a round lost to rival
// ballots is tried again: a few phase times (smoothed), so that a duel
// ends in about the time a round takes, not in fractions of a round
// timeout; at most Backoff.
func (p *Proposer) backoff() time.Duration {
	if p.srtt == 0 {
		return p.cfg.Backoff
	}
	return min(max(2*p.srtt, 50*time.Microsecond), p.cfg.Backoff)
}

// roundTimeout runs when x's round heard no majority in time.
func (p *Proposer) roundTimeout(x *op) {
	if x.phase != phasePrepare && x.phase != phaseAccept {
		return
	}
	p.stats.Timeouts++
	x.contended = false
	p.retry(x)
}

// giveUp ends x when its deadline passed.
func (p *Proposer) giveUp(x *op) {
	switch x.kind {
	case kindAcquire:
		p.acquireGivesUp(x)
	case kindRenew:
		p.finish(x, OpResult{})
		p.renewFailed(x.ks, x.epoch, LostNoQuorum, x.unknown)
	case kindRelease:
		p.releaseGivesUp(x)
	default:
		p.finish(x, OpResult{Outcome: NoQuorum, Unknown: x.unknown})
	}
}

// acquireGivesUp ends an acquire whose deadline passed.
func (p *Proposer) acquireGivesUp(x *op) {
	if x.unknown {
		p.spawnCleanup(x.ks, 0, x.attempted)
	}
	switch {
	case x.lastLock != nil && !x.unknown:
		p.finish(x, *x.lastLock)
	case x.contended || x.attempts == 0:
		// (Never started: this node's own work on the key took the
		// time.)
		// A majority is up, but others kept winning the key: that is
		// a locked key with a holder yet to be named, not no quorum.
		p.finish(x, OpResult{Outcome: Locked, Unknown: x.unknown})
	default:
		p.finish(x, OpResult{Outcome: NoQuorum, Unknown: x.unknown})
	}
}

// releaseGivesUp ends a release whose deadline passed: if its write may
// have landed, a cleanup frees the grant (design.md R31).
func (p *Proposer) releaseGivesUp(x *op) {
	if x.unknown {
		p.finish(x, OpResult{Outcome: NoQuorum, Unknown: true})
		p.spawnCleanup(x.ks, 0, []uint64{x.epoch})
		return
	}
	p.finish(x, OpResult{Outcome: NoQuorum, Unknown: x.unknown})
}

// conclude ends x without writing.
func (p *Proposer) conclude(x *op, res OpResult) {
	ks := x.ks
	res.Ballot = x.ballot
	res.Config = x.votes.m.ID
	res.RoundStarted = x.roundStart // what it saw, it saw in this round
	switch res.Outcome {
	case Locked:
		if x.kind == kindAcquire && x.opts.Wait {
			x.lastLock = &res
			p.park(x, res)
			return
		}
		p.finish(x, res)
	case outcomeLost:
		p.finish(x, OpResult{})
		p.renewFailed(ks, x.epoch, LostTaken, false)
	default:
		p.finish(x, res)
	}
}

// spawnCleanup starts freeing grants to this node, of the given epochs, that
// no lease of this node stands for, no earlier than at. An epoch that a
// release or cleanup already in hand will free is left to it.
func (p *Proposer) spawnCleanup(ks *keyState, at time.Duration, epochs []uint64) {
	var targets []uint64
	for _, e := range epochs {
		if e != 0 && !p.freeing(ks, e) && !slices.Contains(targets, e) {
			targets = append(targets, e)
		}
	}
	if len(targets) == 0 {
		return
	}
	now := p.clock.Now()
	at = max(at, now)
	x := p.newOp(ks, kindCleanup, at+p.cfg.CleanupTimeout)
	x.targets = targets
	if at > now {
		x.phase = phaseWaiting
		w := ks.waitsOf()
		w.parked = append(w.parked, x)
		x.timerGen++
		p.arm(timer{at: at, kind: timerWake, on: x, gen: x.timerGen})
		return
	}
	p.enqueue(x, false)
}

// freeing reports whether a release or cleanup of ks will free epoch e.
func (p *Proposer) freeing(ks *keyState, e uint64) bool {
	frees := func(q *op) bool {
		return q != nil && q.phase != phaseDone &&
			((q.kind == kindRelease && q.epoch == e) || (q.kind == kindCleanup && slices.Contains(q.targets, e)))
	}
	if frees(ks.active) {
		return true
	}
	for _, list := range [][]*op{ks.queued(), ks.parkedOps()} {
		for _, q := range list {
			if frees(q) {
				return true
			}
		}
	}
	return false
}

// releasing reports whether a release of this node's lease of epoch e is
// queued or running on ks.
func (p *Proposer) releasing(ks *keyState, e uint64) bool {
	rel := func(q *op) bool { return q != nil && q.phase != phaseDone && q.kind == kindRelease && q.epoch == e }
	return rel(ks.active) || slices.ContainsFunc(ks.queued(), rel) || slices.ContainsFunc(ks.parkedOps(), rel)
}

// noDiskVoters lists the voters that refused an operation for want of a
// disk (ReasonNoDisk).
func noDiskVoters(rs []reply) []NodeID {
	var who []NodeID
	for i := range rs {
		if rs[i].res.Reason == ReasonNoDisk {
			who = append(who, rs[i].from)
		}
	}
	return who
}
