package quorum

import (
	"slices"
	"time"
)

// Acquiring a key: the change function that writes a grant (design.md R8,
// R9, R11, R32, R34), the locks that make an acquire wait (R10, R29) and
// how it waits for its turn (R28, R30), and how it ends.

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

// acquireChange is an acquire's change function: a grant to this node, above
// every epoch heard, unless a lease of base's grant runs (blocked).
func (p *Proposer) acquireChange(x *op, base Value, replies []reply, now time.Duration) (Value, OpResult, bool) {
	me, inc := p.cfg.ID, p.cfg.Incarnation
	ks := x.ks
	// (A fast path's round has no replies: what earlier rounds heard
	// counts, or its grant could take an epoch a majority loss hid from
	// its base, a token granted twice: design.md R11.)
	maxEpoch := max(base.Epoch, ks.epochSeen)
	for i := range replies {
		maxEpoch = max(maxEpoch, replies[i].res.MaxEpoch, replies[i].res.Value.Epoch)
	}
	mine := base.heldBy(me, inc)
	if mine && ks.lease == nil && slices.Contains(x.leases, base.Lease) && p.recentGrant(x, base.Epoch, now) {
		// This very operation wrote that grant (the Lease ballot says
		// so, not merely the epoch) in an earlier round whose outcome
		// it never learned, a moment ago. The epoch was never
		// reported: keep it (anyone who read the register saw it) and
		// give it a fresh lease.
		v := base
		v.TTL, v.Lease = x.opts.TTL, x.ballot
		if maxEpoch > base.Epoch {
			// A higher epoch was reported since it was written: the
			// epoch may have been granted to another meanwhile (the
			// grant took it on a fast path whose base a majority loss
			// had made stale). Take a fresh one above what was heard.
			v.Epoch = p.rules.nextEpoch(p, maxEpoch)
		}
		return v, OpResult{}, true
	}
	// Otherwise a grant of this node that no lease stands for is
	// taken over by a new grant with a new epoch (blocked lets this
	// node past its own timers).
	if res, locked := p.blocked(x, base, replies, now); locked {
		return Value{}, res, false
	}
	if base.Held && !mine && replies == nil {
		// Cannot happen (a fast path's base is this node's own write);
		// if it did, prepare instead.
		return Value{}, OpResult{}, false
	}
	return Value{
		Held: true, Holder: me, HolderInc: inc,
		Epoch: p.rules.nextEpoch(p, maxEpoch), TTL: x.opts.TTL, Lease: x.ballot, Data: x.opts.Data,
	}, OpResult{}, true
}

// recentGrant reports whether the grant of epoch e that x wrote in an
// earlier round is recent enough to be taken up again under its epoch: so
// recent that a majority of voters cannot have lost their state since and
// voted again. After such a loss the old grant may be all the survivors
// hold while a later grant, of a higher epoch, went with the others, and
// keeping the old epoch would hand out a lower token (design.md R32).
// Voting again takes a restarted voter its quarantine, at least the
// longest lease it accepts, so at least this lease's TTL if it would
// accept this write; and an accept reaches only the voter lives that
// answered this round. Measured from the first round that wrote e to the
// end of this one's send window, against the holder's duration (below
// γ·TTL: a lower bound, on any clock, of the quarantine).
func (p *Proposer) recentGrant(x *op, e uint64, now time.Duration) bool {
	i := slices.Index(x.attempted, e)
	return i >= 0 && now+p.sendWindow(x)-x.attemptedAt[i] < x.opts.HolderTTL
}

// blocked reports whether an acquire must wait, and on whom.
func (p *Proposer) blocked(x *op, base Value, replies []reply, now time.Duration) (OpResult, bool) {
	me, inc := p.cfg.ID, p.cfg.Incarnation
	ks := x.ks
	// Our own grant is ours to take back only when no lease of this node
	// stands for it and the last deadline this node reported has passed.
	reclaimable := ks.lease == nil && now >= ks.lastDeadline
	if base.heldBy(me, inc) && !reclaimable {
		wait := time.Duration(0)
		if ks.lease != nil {
			wait = ks.lease.deadline - now
		} else {
			wait = ks.lastDeadline - now
		}
		return OpResult{Outcome: Locked, Holder: me, HolderInc: inc, Epoch: base.Epoch, Remaining: max(wait, 0)}, true
	}
	var res OpResult
	locked := false
	for i := range replies {
		r := &replies[i].res
		if r.Remaining <= 0 {
			continue
		}
		if r.Value.heldBy(me, inc) && reclaimable {
			continue
		}
		v, locks := p.rules.lockingGrant(r.Value, base)
		if !locks {
			continue
		}
		if !locked || v.Epoch > res.Epoch || (v.Epoch == res.Epoch && r.Remaining > res.Remaining) {
			res = OpResult{Outcome: Locked, Holder: v.Holder, HolderInc: v.HolderInc, Epoch: v.Epoch, Remaining: r.Remaining,
				Data: base.Data}
		}
		locked = true
	}
	return res, locked
}

// lockingGrant reports whether a voter's live timer of timed locks an
// acquire that builds on base, and the grant that locks (design.md R10): a
// live timer is a lock only when it times the grant that base holds. Any
// grant that was chosen is base or behind it: every value written since
// derives from it (a renewal keeps the grant, a release keeps its epoch, a
// later grant takes a higher one and is written only once no lease of it
// is live). So a timer of any other grant (an older one, a released one,
// or one of a higher epoch that two racing acquires each got to one
// acceptor and that no majority accepted) protects no holder: nobody
// learned such a grant was theirs.
func lockingGrant(timed, base Value) (Value, bool) { return timed, timed.sameGrant(base) }

// nextEpoch is the fencing token of a new grant: above every epoch a
// majority knows of, and at least the wall clock in microseconds, so that
// tokens keep increasing even after the voters of a majority lost their
// state (under the assumption on wall clocks the package documentation
// states exactly).
func (p *Proposer) nextEpoch(maxSeen uint64) uint64 {
	e := maxSeen + 1
	if w := p.clock.WallMicros(); w > 0 && uint64(w) > e {
		e = uint64(w)
	}
	return e
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
// configuration of six, three voters holding each value, a released key
// was kept from its waiters for hundreds of milliseconds that way
// (design.md R29). So an acquire
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

// holderStart is when the holder's clock started for the lease period x
// wrote: t0, read before anything of the round was sent (PaxosLease), so
// that every acceptor that accepted it did so after t0 in real time and
// times it from then or later (design.md R18). Read at the confirmation
// (now), it would be late by the whole round.
func holderStart(x *op, now time.Duration) time.Duration { return x.t0 }

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

// park sets aside an acquire that found the key held, until an acceptor
// says the key is free, this node's own lease on it ends, or the holder's
// lease should have run out anyway (a notification can be lost).
func (p *Proposer) park(x *op, res OpResult) {
	ks := x.ks
	now := p.clock.Now()
	p.endRound(x)
	if ks.active == x {
		ks.active = nil
	}
	x.phase = phaseWaiting
	x.lastFailure = Locked
	x.noFast = true // the next attempt prepares, which registers a watch
	x.streak = 0    // each turn at the key starts its backoff afresh
	w := ks.waitsOf()
	w.parked = append(w.parked, x)
	// The remaining time was measured on another node's clock; stretch it
	// for the worst rate difference, then add a little so that waiters on
	// many nodes do not all come back at once.
	wait := time.Duration(float64(res.Remaining) * (1 + p.cfg.Drift) / (1 - p.cfg.Drift))
	wait += time.Duration(p.rand.Int63n(int64(p.cfg.RoundTimeout)/4 + 1))
	at := min(now+wait, x.deadline)
	x.timerGen++
	p.arm(timer{at: at, kind: timerWake, on: x, gen: x.timerGen})
	if ks.noticeCount() != x.noticesAt {
		// An acceptor said the key was free while this round was out:
		// its Notify travels apart from the round's replies and may
		// overtake them, and it will not be sent again. Try again now
		// rather than wait out a lease that has ended.
		p.wakeParked(ks)
		return
	}
	p.advance(ks)
}

func (p *Proposer) unpark(x *op) {
	ks := x.ks
	for i, q := range ks.parkedOps() {
		if q == x {
			ks.waits.parked = append(ks.waits.parked[:i], ks.waits.parked[i+1:]...)
			ks.tidyWaits()
			return
		}
	}
}

// wakeParked retries every operation parked on ks.
func (p *Proposer) wakeParked(ks *keyState) {
	if len(ks.parkedOps()) == 0 {
		return
	}
	parked := ks.waits.parked
	ks.waits.parked = nil
	ks.tidyWaits()
	for _, x := range parked {
		if x.kind == kindCleanup {
			// Waits for a deadline, not for the key.
			w := ks.waitsOf()
			w.parked = append(w.parked, x)
			continue
		}
		x.timerGen++
		p.enqueue(x, false)
	}
}

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
