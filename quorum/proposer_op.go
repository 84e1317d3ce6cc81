package quorum

import (
	"slices"
	"time"
)

// The round engine, second half: an operation around its rounds. It waits
// for its key's slot; a won prepare is decided by the operation's change
// function (each in its operation's file) and accepted, or concluded
// without a write; a lost or silent round is retried after a backoff; at
// its deadline the operation gives up; finish reports it and starts the
// next on the key. Timers drive the rest.

// newOp makes an operation of kind on ks's key, to give up at deadline.
func (p *Proposer) newOp(ks *keyState, kind opKind, deadline time.Duration) *op {
	ks = p.attach(ks)
	p.nextOp++
	x := &op{id: p.nextOp, kind: kind, ks: ks, deadline: deadline, started: p.clock.Now()}
	p.ops[x.id] = x
	return x
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

// change is the change function of CASPaxos applied to one key: given the
// value of the highest ballot a majority reported (base) and their replies
// (nil on the fast path, where base is this node's own last write), it says
// what to write, or how the operation ends without writing. Each kind of
// operation has its own, in its file.
func (p *Proposer) change(x *op, base Value, replies []reply, now time.Duration) (Value, OpResult, bool) {
	switch x.kind {
	case kindAcquire:
		return p.acquireChange(x, base, replies, now)
	case kindRenew:
		return p.renewChange(x, base)
	case kindUpdate:
		return p.updateChange(x, base)
	case kindRelease:
		return p.releaseChange(x, base)
	case kindCleanup:
		return p.cleanupChange(x, base, now)
	case kindMigrate:
		return p.migrateChange(x, base, replies)
	case kindConfig:
		return p.configChange(x, base, replies)
	case kindRead:
		return p.readChange(x, base, replies)
	}
	return Value{}, OpResult{}, false
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

func (t *timer) stale(p *Proposer) bool {
	if x := t.op(); x != nil {
		return x.timerGen != t.gen || x.phase == phaseDone
	}
	switch t.kind {
	case timerRenew:
		return t.gen != p.renewGen
	case timerChange:
		return p.chg == nil || t.gen != p.chg.gen
	case timerObserve:
		ob := t.ob()
		return ob.gen != t.gen || p.observations[ob.key] != ob
	}
	ks := t.ks()
	return ks.lease == nil || ks.lease.gen != t.gen
}

func (t *timer) fire(p *Proposer, now time.Duration) {
	if t.stale(p) {
		return
	}
	switch t.kind {
	case timerRound:
		p.roundTimeout(t.op())
	case timerRetry:
		if x := t.op(); x.phase == phaseBackoff {
			p.startRound(x)
		}
	case timerWake:
		if x := t.op(); x.phase == phaseWaiting {
			p.unpark(x)
			p.enqueue(x, false)
		}
	case timerRenew:
		p.renewDue(now)
	case timerNotice:
		p.noticeDue(t.ks(), now)
	case timerChange:
		p.changeTimer(p.chg, now)
	case timerObserve:
		p.observeTimer(t.ob(), now)
	}
}

func (p *Proposer) arm(t timer) {
	p.nextRID++ // shared counter: unique, increasing
	t.seq = p.nextRID
	p.timers.push(t)
}

func (a *timer) before(b *timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}
