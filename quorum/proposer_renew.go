package quorum

import "time"

// Leases held: installed by a grant, renewed in batches (design.md R13,
// R22, R26), reported lost before their deadline.

// installLease makes this node the holder of a lease of epoch on ks's key,
// until deadline unless renewed.
func (p *Proposer) installLease(ks *keyState, epoch uint64, deadline, now time.Duration, opts AcquireOptions) {
	l := &heldLease{epoch: epoch, deadline: deadline, opts: p.leaseOptions(opts)}
	ks.lease = l
	ks.lastDeadline = max(ks.lastDeadline, deadline)
	l.index = int32(len(p.held))
	p.held = append(p.held, ks)
	p.armLease(ks)
}

// leaseOptions is opts without its Deadline (an acquire's own, which no
// later operation on the lease reads), shared with the leases installed
// before it with the same options: a node holding 100,000 leases taken
// alike keeps one copy, not one each (64 bytes a lease).
func (p *Proposer) leaseOptions(opts AcquireOptions) *AcquireOptions {
	opts.Deadline = 0
	if p.lastLeaseOpts == nil || *p.lastLeaseOpts != opts {
		p.lastLeaseOpts = &opts
	}
	return p.lastLeaseOpts
}

// armLease sets the lease's notice timer and makes sure the proposer's one
// renewal timer fires in time for it.
func (p *Proposer) armLease(ks *keyState) {
	l := ks.lease
	if at := l.deadline - l.opts.Notice; l.noticeAt == 0 || at < l.noticeAt {
		p.armNotice(ks, at)
	}
	p.armRenew(l.lastStart() + l.opts.RenewEvery)
}

func (p *Proposer) armNotice(ks *keyState, at time.Duration) {
	l := ks.lease
	l.gen++
	l.noticeAt = at
	p.arm(timer{at: at, kind: timerNotice, on: ks, gen: l.gen})
}

// armRenew makes the renewal timer fire at at, unless it fires sooner. One
// timer serves every lease: when it fires, one pass over the leases renews
// all that are due or nearly due, in one batch.
func (p *Proposer) armRenew(at time.Duration) {
	if p.renewArmed && p.renewAt <= at {
		return
	}
	p.renewGen++
	p.renewAt, p.renewArmed = at, true
	p.arm(timer{at: at, kind: timerRenew, gen: p.renewGen})
}

func (p *Proposer) dropLease(ks *keyState) {
	if ks.lease == nil {
		return
	}
	l := ks.lease
	l.gen++
	if l.tag != nil {
		p.tagged--
	}
	// Swap-remove keeps the list dense and the order reproducible.
	last := p.held[len(p.held)-1]
	p.held[l.index] = last
	last.lease.index = l.index
	p.held = p.held[:len(p.held)-1]
	ks.lease = nil
}

// renewDue starts a renewal of every lease that is at least halfway to its
// renewal time, so that leases taken at different moments fall into one
// batch: one message per voter renews them all. At most maxRenewBatch start
// in one pass; the rest follow a renewal round's time later (renewPace), so
// that a node holding very many leases sends them in batches each voter
// answers well within the round timer, instead of one batch so large that
// its round times out and every renewal in it is retried.
func (p *Proposer) renewDue(now time.Duration) {
	p.renewArmed = false
	next, any := time.Duration(0), false
	started := 0
	i := p.renewFrom
	for seen := 0; seen < len(p.held); seen++ {
		if i >= len(p.held) {
			i = 0
		}
		ks := p.held[i]
		l := ks.lease
		if l.renewing {
			i++
			continue
		}
		if now < l.lastStart()+l.opts.RenewEvery/2 {
			if due := l.lastStart() + l.opts.RenewEvery; !any || due < next {
				next, any = due, true
			}
			i++
			continue
		}
		if started == maxRenewBatch {
			// The next pass starts here. Each pass but the last of a
			// round stops at a full batch; the last looks at every
			// lease, and so finds when the next round is due.
			next, any = now+p.renewPace(), true
			break
		}
		started++
		l.renewing = true
		x := p.newRenewOp(ks, l.deadline-l.opts.Notice)
		// One start for the pass: the driver counts and times the
		// renewals of a pass together (LeaseEvent.Started).
		x.started = now
		x.epoch = l.epoch
		x.opts = *l.opts
		p.enqueue(x, true)
		if i < len(p.held) && p.held[i] == ks {
			i++
		} else {
			// The renewal ended at once, and the lease with it: the one
			// moved into its place (dropLease) is next. (No renewal is
			// known to end inside enqueue. If one did after the walk
			// wrapped, the lease moved here may have been seen already,
			// and one not seen would wait for the next pass.)
			seen--
		}
	}
	p.renewFrom = i
	if any {
		p.armRenew(next)
	}
}

// maxRenewBatch bounds the renewals one pass of renewDue starts.
const maxRenewBatch = 4096

// renewPace is how long renewDue waits before the next batch when it had
// more leases due than one batch: about a renewal round's time (smoothed),
// at least 1ms, at most a round timeout.
func (p *Proposer) renewPace() time.Duration {
	return min(max(p.srtt, time.Millisecond), p.cfg.RoundTimeout)
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

// renewed runs when a renewal was accepted by a majority.
func (p *Proposer) renewed(x *op, now time.Duration) {
	ks := x.ks
	l := ks.lease
	p.finish(x, OpResult{})
	if l == nil || l.epoch != x.epoch {
		// The lease ended here (released, or reported lost) while the
		// renewal was in flight; the renewal gave the grant a fresh lease
		// at the acceptors that nobody will use. Free it once the deadline
		// this node reported has passed.
		p.spawnCleanup(ks, ks.lastDeadline, []uint64{x.epoch})
		return
	}
	l.renewing = false
	if d := p.rules.holderStart(x, now) + l.opts.HolderTTL; d > l.deadline {
		l.deadline = d
		ks.lastDeadline = max(ks.lastDeadline, d)
		p.events = append(p.events, LeaseEvent{Key: ks.key, Epoch: l.epoch, Deadline: d, Started: x.started, Tag: l.tag})
	}
	p.stats.Renewed++
	p.armLease(ks)
}

// renewFailed ends a lease whose renewal failed for good.
func (p *Proposer) renewFailed(ks *keyState, epoch uint64, why LostReason, unknown bool) {
	l := ks.lease
	if l == nil || l.epoch != epoch {
		return
	}
	p.lose(ks, why)
}

// noticeDue runs at a lease's notice time: unless a renewal moved the
// deadline, the lease is reported lost now, before its deadline passes.
func (p *Proposer) noticeDue(ks *keyState, now time.Duration) {
	l := ks.lease
	if l == nil {
		return
	}
	l.noticeAt = 0
	if at := l.deadline - l.opts.Notice; now < at {
		p.armNotice(ks, at) // renewed since the timer was set
		return
	}
	p.lose(ks, LostNoQuorum)
}

func (p *Proposer) lose(ks *keyState, why LostReason) {
	l := ks.lease
	p.events = append(p.events, LeaseEvent{Key: ks.key, Epoch: l.epoch, Deadline: l.deadline, Lost: true, Reason: why, Tag: l.tag})
	p.stats.Lost++
	p.dropLease(ks)
	// The grant may still stand at the acceptors. Once the deadline this
	// node reported has passed, free it so that waiters need not wait out
	// the acceptors' timers.
	if why == LostNoQuorum {
		p.spawnCleanup(ks, ks.lastDeadline, []uint64{l.epoch})
	}
	p.wakeParked(ks)
}
