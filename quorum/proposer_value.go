package quorum

import (
	"fmt"
	"time"
)

// A lease carries a value (Value.Data): the acquire that writes the grant
// sets it (AcquireOptions.Data), renewals and write-backs carry it on, a
// release clears it. The holder changes it with Update, a write through a
// majority like any other: the change function writes only into this
// node's own grant of the lease's epoch (the fencing token), so a holder
// that lost its lease cannot change what its successor published. The
// write is a lease period of its own (its Lease is its ballot): the voters
// start fresh timers, and the holder's deadline moves as for a renewal.

// Update writes data into this node's lease on key of the given epoch,
// renewing the lease. The result comes through Ready: Updated (Deadline is
// the lease's deadline after it), NotHeld (the grant is gone, or the lease
// ended meanwhile), or NoQuorum (Unknown: the new data may have been
// written, and renewals carry on whatever a majority holds). deadline
// (this node's clock; zero: none) is when to give up; an update gives up
// by the lease's notice time in any case.
func (p *Proposer) Update(key string, epoch uint64, data string, deadline time.Duration) (OpID, error) {
	ks := p.keys[key]
	if ks == nil || ks.lease == nil || ks.lease.epoch != epoch {
		return 0, fmt.Errorf("%w: %q epoch %d", ErrNotHeld, key, epoch)
	}
	l := ks.lease
	if limit := l.deadline - l.opts.Notice; deadline == 0 || deadline > limit {
		deadline = limit
	}
	x := p.newOp(ks, kindUpdate, deadline)
	x.epoch, x.opts, x.data = epoch, *l.opts, data
	p.enqueue(x, false)
	return x.id, nil
}

// updated runs when a majority accepted an update: the lease's deadline
// moves as for a renewal.
func (p *Proposer) updated(x *op, res OpResult) {
	ks := x.ks
	l := ks.lease
	if l == nil || l.epoch != x.epoch {
		// Released or reported lost while the update was in flight: its
		// write gave the grant a fresh lease that nobody will use; free it
		// once the deadline this node reported has passed (as renewed
		// does for a renewal).
		p.finish(x, OpResult{Outcome: NotHeld, Epoch: x.epoch})
		p.spawnCleanup(ks, ks.lastDeadline, []uint64{x.epoch})
		return
	}
	if d := x.t0 + l.opts.HolderTTL; d > l.deadline {
		l.deadline = d
		ks.lastDeadline = max(ks.lastDeadline, d)
		p.events = append(p.events, LeaseEvent{Key: ks.key, Epoch: l.epoch, Deadline: d, Started: x.started, Tag: l.tag})
		p.armLease(ks)
	}
	res.Outcome, res.Deadline = Updated, l.deadline
	p.finish(x, res)
}

// updateChange is an update's change function: the exact grant, this
// node's of the lease's epoch, with the new data and a fresh lease period
// (design.md R13, R17).
func (p *Proposer) updateChange(x *op, base Value) (Value, OpResult, bool) {
	l := x.ks.lease
	if l == nil || l.epoch != x.epoch || !base.heldBy(p.cfg.ID, p.cfg.Incarnation) || base.Epoch != x.epoch {
		return Value{}, OpResult{Outcome: NotHeld, Epoch: x.epoch}, false
	}
	v := base
	v.Data, v.TTL, v.Lease = x.data, l.opts.TTL, x.ballot
	return v, OpResult{}, true
}
