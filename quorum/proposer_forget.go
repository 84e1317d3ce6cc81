package quorum

// Forgetting keys: a sweep's peeks, write-backs and forgets (design.md
// R70, R71, R73–R76), and the forgets of the idle keys this node drops
// (R72).

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
		// below the release it missed. Peeks alone would find them so at
		// every sweep, for good (design.md R74).
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
// read would write back too (design.md R74). Not only when every voter
// holds a free value: a voter that missed a release keeps the grant below
// it, and the key would never be forgotten.
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
// a crashed node held was kept for good (design.md R75). So when the
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

// reportSwept reports a forget whose write-back freed an expired grant
// (mayFreeExpired), as background work: Released once a majority accepted
// the free value, else of unknown outcome. accepting says whether x was in
// its accept phase when it finished (finish has ended the phase since).
func (p *Proposer) reportSwept(x *op, accepting bool) {
	g := x.freed
	r := OpResult{
		ID: x.id, Key: x.ks.key, Outcome: Released, Epoch: g.Epoch, Holder: g.Holder, HolderInc: g.HolderInc,
		Started: x.started, RoundStarted: x.roundStart, Internal: true, Swept: true, Ballot: x.ballot, Config: x.votes.m.ID,
	}
	if !accepting || x.votes.nyes < x.votes.m.Majority() {
		r.Outcome, r.Unknown = NoQuorum, true
	}
	if p.results == nil {
		p.results, p.spare = p.spare, nil
	}
	p.results = append(p.results, r)
}

// maybeForget drops the state of a key this node no longer uses, keeping
// fast-path state for the most recent MaxIdleKeys of them. A key whose last
// reported deadline is still ahead is kept: a later acquire on this node must
// not take the key back from its own stale grant before that deadline.
func (p *Proposer) maybeForget(ks *keyState) {
	if !ks.unused() || ks.idle {
		return
	}
	now := p.clock.Now()
	if p.keys[ks.key] != ks {
		return // already forgotten
	}
	if ks.fastVoters == nil && ks.lastDeadline <= now {
		delete(p.keys, ks.key)
		ks.current = false
		return
	}
	ks.idle = true
	ks.idleSeq++
	p.nidle++
	p.idle = append(p.idle, idleKey{ks, ks.idleSeq})
	for p.nidle > p.cfg.MaxIdleKeys && len(p.idle) > 0 {
		e := p.idle[0]
		p.idle = p.idle[1:]
		old := e.ks
		if !old.idle || e.seq != old.idleSeq {
			continue // used since: a later entry stands for it, if any
		}
		forget := p.forgettable(old)
		p.dropFast(old)
		if old.lastDeadline > now {
			// Cannot forget it yet; look again when it comes round.
			old.idleSeq++
			p.idle = append(p.idle, idleKey{old, old.idleSeq})
			if len(p.idle) <= p.nidle {
				break // every idle key is waiting for its deadline
			}
			continue
		}
		old.idle = false
		p.nidle--
		if p.keys[old.key] == old {
			delete(p.keys, old.key)
			old.current = false
		}
		if forget != nil {
			p.forgetRegisters(old.key, *forget)
		}
	}
	if len(p.idle) > 2*p.cfg.MaxIdleKeys+16 {
		// Drop entries of keys used again since, so the list stays small.
		live := p.idle[:0]
		for _, e := range p.idle {
			if e.ks.idle && e.seq == e.ks.idleSeq {
				live = append(live, e)
			}
		}
		p.idle = live
	}
}

// A key this node released, and forgets as idle, is one the voters need
// not keep either, once every voter accepted the release: the node tells
// them to forget it (OpForget at the release's ballot), as a voter's sweep
// would after asking them all (acceptor_registers.go), without the asking.
// The acknowledgments of the release's accept are that answer: each voter
// held the free value at that ballot, and a voter that has moved on since
// holds a higher one and drops nothing. Under per-entity locking
// (invoice/<id>, each key locked once) this keeps a voter's registers to
// about the keys its proposers still keep, MaxIdleKeys each, where sweeps
// alone fell behind the keys coming in. Waiting for the idle eviction
// rather than forgetting at the release keeps hot keys' registers, and
// with them the one-round-trip fast path of the node that touches the key
// again: a key's fast path dies with this node's state anyway.

// forgettable returns the ballot at which every voter accepted ks's last
// write, the free value of a release, or nil if that is not known.
func (p *Proposer) forgettable(ks *keyState) *Ballot {
	fp, voters := ks.fastPath(), ks.fastVoters
	if fp == nil || fp.base.Held || fp.base.Config != nil || ks.key == ConfigKey || p.m.Pending {
		return nil
	}
	if !p.rules.forgetsEvicted(p, voters) {
		return nil
	}
	b := p.ownBallot(fp.accepted)
	return &b
}

// everyVoterAcked reports whether every voter acknowledged the release
// (acked): only then does each hold its free value at its ballot (design.md
// R72).
func (p *Proposer) everyVoterAcked(acked *voterIncs) bool {
	for _, v := range p.m.Voters {
		if acked.get(v) == 0 {
			return false
		}
	}
	return true
}

// forgetRegisters tells every voter to forget key if it still holds the
// free value accepted at b. Nothing comes back that matters: a voter that
// keeps the register is swept later.
func (p *Proposer) forgetRegisters(key string, b Ballot) {
	for i := range p.m.Voters {
		p.push(i, Op{Kind: OpForget, Key: key, Ballot: b})
	}
	p.stats.Forgets++
}
