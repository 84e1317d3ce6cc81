package quorum

import "time"

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

// timers

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

// timerHeap orders timers by time, then by arming order.
type timerHeap = minHeap[timer, *timer]

func (a *timer) before(b *timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}
