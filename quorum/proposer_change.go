package quorum

import (
	"slices"
	"time"
)

// outcomeLost is an internal outcome: a renewal found its grant gone.
const outcomeLost Outcome = 100

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

// renewChange is a renewal's change function: the exact grant, this node's
// of the lease's epoch, with a fresh lease period (design.md R13).
func (p *Proposer) renewChange(x *op, base Value) (Value, OpResult, bool) {
	l := x.ks.lease
	if l == nil || l.epoch != x.epoch {
		// Released or reported lost while the renewal waited.
		return Value{}, OpResult{}, false
	}
	if !base.heldBy(p.cfg.ID, p.cfg.Incarnation) || base.Epoch != x.epoch {
		return Value{}, OpResult{Outcome: outcomeLost}, false
	}
	v := base
	v.TTL, v.Lease = l.opts.TTL, x.ballot
	return v, OpResult{}, true
}

// releaseChange is a release's change function: the exact grant, this
// node's of the lease's epoch, written free with its epoch kept (design.md
// R13).
func (p *Proposer) releaseChange(x *op, base Value) (Value, OpResult, bool) {
	if !base.Held && base.Epoch == x.epoch && slices.Contains(x.attempted, x.epoch) {
		// Freed already: by an earlier round of this release whose
		// outcome was not learned. Write it back so that it is chosen
		// before saying so. (Freed at this epoch before this release
		// wrote anything: by a sweep, after the lease had run out at
		// every voter, mayFreeExpired. Not held, then, as after a
		// takeover.)
		return base, OpResult{}, true
	}
	// Only the exact grant: this node, this incarnation, this epoch.
	// (A higher MaxEpoch proves nothing: a rival's acquire that was
	// never chosen may have proposed a higher epoch, from a wall clock
	// running ahead.)
	if !base.heldBy(p.cfg.ID, p.cfg.Incarnation) || base.Epoch != x.epoch {
		return Value{}, OpResult{Outcome: NotHeld, Epoch: x.epoch}, false
	}
	return Value{Epoch: x.epoch}, OpResult{}, true
}

// cleanupChange is a cleanup's change function: a grant of this node, of
// an epoch it is to free, that no lease of this node stands for, written
// free after the last deadline this node reported (design.md R33).
func (p *Proposer) cleanupChange(x *op, base Value, now time.Duration) (Value, OpResult, bool) {
	ks := x.ks
	if !base.Held && slices.Contains(x.attempted, base.Epoch) {
		return base, OpResult{}, true // as for a release
	}
	if !base.heldBy(p.cfg.ID, p.cfg.Incarnation) || !slices.Contains(x.targets, base.Epoch) ||
		(ks.lease != nil && ks.lease.epoch == base.Epoch) || now < ks.lastDeadline || p.releasing(ks, base.Epoch) {
		// (A release of a lease of that epoch under way: the grant is
		// the lease's, not the one the cleanup was for. The same node
		// can write one epoch twice when its first write reached no
		// voter; the release frees it, and says so.)
		return Value{}, OpResult{Outcome: NotHeld, Epoch: base.Epoch}, false
	}
	return Value{Epoch: base.Epoch}, OpResult{}, true
}

// migrateChange is the change function that moves a key into a new
// configuration: the value as it is, a lease timed for what is left of it
// (design.md R61, R63).
func (p *Proposer) migrateChange(x *op, base Value, replies []reply) (Value, OpResult, bool) {
	if !base.Held && base.Epoch == 0 && base.Config == nil {
		return Value{}, OpResult{Outcome: ReadDone}, false // nothing was ever chosen
	}
	x.timeLeft = 0
	if base.Held {
		x.timeLeft = p.rules.movedTTL(p, base, replies)
	}
	if x.timeLeft > 0 {
		v := base
		v.TTL = x.timeLeft
		return v, OpResult{}, true
	}
	return base, OpResult{}, true
}

// configChange is the change function of a configuration write: compare
// and set on the configuration read, carrying the epoch floors its voters
// reported (design.md R58, R64).
func (p *Proposer) configChange(x *op, base Value, replies []reply) (Value, OpResult, bool) {
	cur := p.m
	if base.Config != nil {
		cur = *base.Config
	}
	switch {
	case p.rules.sameConfig(cur, *x.cfgWrite):
		// An earlier round of this very write got there: write it
		// back, so that it is chosen before it is reported (and
		// adopted as written, whatever floor that round gave it).
		*x.cfgWrite = cur.clone()
		return base, OpResult{}, true
	case cur.ID != x.cfgExpect:
		// Someone else changed the configuration first.
		return Value{}, OpResult{Outcome: Locked}, false
	}
	p.rules.raiseConfigFloor(x.cfgWrite, replies)
	w := x.cfgWrite.clone()
	return Value{Config: &w}, OpResult{}, true
}

// readChange is a read's change function: done if the promises agree on
// one value a majority accepted (design.md R15), else the value of the
// highest ballot written back.
func (p *Proposer) readChange(x *op, base Value, replies []reply) (Value, OpResult, bool) {
	chosen := len(replies) > 0
	live := false
	for i := range replies {
		r := &replies[i].res
		if r.Accepted != replies[0].res.Accepted || r.Copy {
			chosen = false
		}
		if r.Remaining > 0 && base.Held && r.Value.Epoch == base.Epoch && r.Value.Holder == base.Holder {
			live = true
		}
	}
	x.readLive = live
	if chosen && !p.rules.readSettlesLive(base, replies[0].res.Accepted, live) {
		chosen = false // a lease's end only a write-back settles
	}
	// What the read reports, now or once its write-back is chosen: the
	// register's epoch, or, when a majority holds nothing for the key,
	// an epoch no grant of it ever exceeded (readEpoch; design.md R16).
	x.readEpoch = readEpoch(base, replies)
	if chosen {
		res := OpResult{
			Outcome: ReadDone, Value: base, Live: live, Epoch: x.readEpoch,
			Holder: base.Holder, HolderInc: base.HolderInc, Accepted: replies[0].res.Accepted,
		}
		if x.readOrder && res.Accepted.IsZero() {
			// A majority promised x.ballot holding nothing of the
			// key: every value chosen before is below it, every one
			// chosen after above (an observer's read of a key it
			// saw held: proposer_observe.go).
			res.Ballot = x.ballot
		}
		return Value{}, res, false
	}
	// Not yet chosen: write it back so that no later read sees less.
	// The write keeps base.Lease, so it starts no timer.
	//
	// It reports the lease live as the promises said (readLive), once
	// the write-back is chosen, and a lease they saw ended has. A
	// renewal that succeeds reaches a majority before the holder's
	// deadline at the time, set by the last period that succeeded
	// before it. Below this read's ballot, that majority meets the
	// promises in a voter that took the renewal before it promised
	// (after, it refuses it), and times it. Above, it meets the
	// write-back's majority in a voter that took the write-back first
	// (after, it refuses it), so after every promise came in; take the
	// first such renewal: the period before it is below this ballot,
	// and its majority meets the promises in a voter that said its
	// timer had run out, after that period's deadline. Too late.
	return base, OpResult{}, true
}

// readEpoch is the epoch a read reports: the register's; or, when a
// majority holds nothing for the key (its registers were dropped, or it was
// never written), the highest epoch any voter of the round reported (its
// epoch floor, or a value it holds: a rival's grant that may never be
// chosen, a refusing voter's included). The key is free, and every grant
// it had was at or below that epoch: an upper bound on the past, which the
// clients' model checks as such (quorumtest Output.AtLeast), and no promise
// about the next grant's token.
func readEpoch(base Value, replies []reply) uint64 {
	if base.Held || base.Epoch != 0 || base.Config != nil {
		return base.Epoch
	}
	var e uint64
	for i := range replies {
		e = max(e, replies[i].res.MaxEpoch)
	}
	return e
}

// movedTTL is how long the new voters of a change time base's lease, which
// it moves: what is left of it (timeLeft), at most its TTL; 0 if no timer
// of it runs (design.md R63). A full TTL kept a crashed holder's key
// blocked up to a TTL longer per change.
func (p *Proposer) movedTTL(base Value, replies []reply) time.Duration {
	return min(p.timeLeft(base, replies), base.TTL)
}

// writtenBackEpoch is the epoch a read reports once its write-back is
// chosen: readEpoch of what its promises reported (design.md R16), not the
// written value's own, which is 0 for an empty register.
func writtenBackEpoch(x *op) uint64 { return x.readEpoch }

// timeLeft is how long the lease of base may still run, on this node's
// clock: the longest remaining time a voter of the round reported for the
// grant, stretched for the worst clock-rate difference, or zero when no
// timer of it runs. A voter of any majority that accepted the lease's
// latest period is among the replies (one change apart, majorities of the
// old and the new voters meet), and its timer outlasts the holder's
// deadline; the longest stretched remaining time does too.
func (p *Proposer) timeLeft(base Value, replies []reply) time.Duration {
	var left time.Duration
	for i := range replies {
		if r := &replies[i].res; r.Remaining > 0 && r.Value.sameGrant(base) {
			left = max(left, r.Remaining)
		}
	}
	if left == 0 {
		return 0
	}
	return time.Duration(float64(left) * (1 + p.cfg.Drift) / (1 - p.cfg.Drift))
}

// recentGrant reports whether the grant of epoch e that x wrote in an
// earlier round is recent enough to be taken up again under its epoch: so
// recent that a majority of voters cannot have lost their state since and
// voted again. After such a loss the old grant may be all the survivors
// hold while a later grant, of a higher epoch, went with the others, and
// keeping the old epoch would hand out a lower token (the simulator found
// it). Voting again takes a restarted voter its quarantine, at least the
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

// sameButFloor reports whether a and b are one configuration, perhaps with
// different epoch floors: two rounds of one write, each raising the floor
// to what its voters reported (raiseConfigFloor; design.md R64).
func sameButFloor(a, b Membership) bool {
	a.EpochFloor = b.EpochFloor
	return a.Equal(b)
}

// raiseConfigFloor raises the epoch floor of a configuration write to the
// highest epoch the voters that answered its round reported (each at least
// its acceptor's floor, which after a restart from disk is its epoch mark):
// a voter that lost its registers knows the epochs it accepted only by its
// mark, and the voters of a later configuration may not include it. A
// grant of epoch E that lived only at two voters that restarted together
// was granted again by the voter the next two changes left alone
// (design.md R64).
func raiseConfigFloor(write *Membership, replies []reply) {
	for i := range replies {
		write.EpochFloor = max(write.EpochFloor, replies[i].res.MaxEpoch)
	}
}
