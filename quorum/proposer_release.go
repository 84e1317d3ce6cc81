package quorum

import (
	"fmt"
	"slices"
	"time"
)

// Releasing a lease (design.md R13, R25), and cleanups: freeing the grants
// to this node that no lease of it stands for (R31, R33).

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

// released runs when a majority accepted a release's or a cleanup's free
// value.
func (p *Proposer) released(x *op, res OpResult) {
	res.Outcome = Released
	p.finish(x, res) // a release's wakes the acquires waiting behind the lease
	if x.kind == kindCleanup {
		p.wakeParked(x.ks)
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
