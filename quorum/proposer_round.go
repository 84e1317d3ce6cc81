package quorum

import (
	"slices"
	"time"
)

// The round engine, first half: a round of an operation starts (straight
// to accept on the fast path, else peeks or a prepare at a new ballot), its
// requests go out, and the voters' answers are counted, once per voter,
// until the round is won or lost. proposer_op.go takes it from there.

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
	x.replies, x.lives = x.replies[:0], x.lives[:0]
	x.timerGen++
	x.phaseAt = p.clock.Now()
	wait := p.cfg.RoundTimeout
	if x.kind == kindRenew {
		wait = p.roundTimer()
	}
	p.arm(timer{at: x.phaseAt + wait, kind: timerRound, on: x, gen: x.timerGen})
}

// voters is the configuration whose majority decides a round: the
// proposer's voters, whatever gossip believes alive (design.md R1).
func (p *Proposer) voters() Membership { return p.m }

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

// dropFast forgets ks's fast path.
func (p *Proposer) dropFast(ks *keyState) {
	if ks.fastVoters != nil || ks.fastRID != 0 {
		if r, ok := p.rounds.get(ks.fastRID); ok && r.late == ks {
			p.rounds.remove(ks.fastRID)
		}
		ks.fastVoters, ks.fastRID = nil, 0
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
		p.handleResult(resp.From, resp.Inc, resp.Lives, &resp.Results[i])
	}
}

// heardLives takes, into x's prepare round, the lives a voter that
// promised says it heard from before it first promised (Response.Lives):
// a promise of another life of one of those voters counts for nothing in
// this round, and one already counted is taken back (design.md R55).
func (p *Proposer) heardLives(x *op, lives []Life) {
	for _, l := range lives {
		if !slices.Contains(x.lives, l) {
			x.lives = append(x.lives, l)
		}
	}
	if !slices.ContainsFunc(x.replies, func(r reply) bool { return r.res.OK && p.rules.promiseLost(x, r.from, r.inc) }) {
		return
	}
	kept := x.replies[:0]
	x.votes = newTally(x.votes.m)
	for _, r := range x.replies {
		if r.res.OK && p.rules.promiseLost(x, r.from, r.inc) {
			continue
		}
		p.rules.countVote(&x.votes, r.from, r.res.OK)
		x.votes.refusedFor(r.res.Reason)
		kept = append(kept, r)
	}
	x.replies = kept
}

// promiseLost reports whether, in x's prepare round, a promise of voter
// from's life inc counts for nothing: a voter that promised in the same
// round heard from another life of from before it first promised, one
// that may have gone live on a new disk on its word; an earlier life's
// promises went with its disk. A prepare that counts an earlier life's
// promise together with those of voters that told it "never voted" has
// the promise of one of them too (they meet every majority), given after
// it heard the new life, so the round learns of it before its majority is
// complete. A later life's promise is left out with it, for the round.
func promiseLost(x *op, from NodeID, inc uint64) bool {
	for _, l := range x.lives {
		if l.Node == from && l.Inc != inc {
			return true
		}
	}
	return false
}

func (p *Proposer) handleResult(from NodeID, inc uint64, lives []Life, res *Result) {
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
	if x.phase == phasePrepare && !x.peek {
		if len(lives) > 0 && res.OK {
			p.heardLives(x, lives)
		}
		if res.OK && p.rules.promiseLost(x, from, inc) {
			return // a life's promise, lost with its disk
		}
	}
	if !p.rules.countVote(&x.votes, from, res.OK) {
		return // not a voter, or a duplicate
	}
	x.votes.refusedFor(res.Reason)
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
