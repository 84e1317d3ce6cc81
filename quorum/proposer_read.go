package quorum

import "time"

// Reads: peeks first, and a prepare and a write-back when the peeks do not
// show a chosen value (design.md R15, R16, R84).

// Read learns key's register by a majority round, linearizably. The result
// comes through Ready: ReadDone or NoQuorum.
func (p *Proposer) Read(key string, deadline time.Duration) (OpID, error) {
	if key == "" {
		return 0, ErrBadKey
	}
	if deadline == 0 {
		deadline = p.clock.Now() + 3*p.cfg.RoundTimeout
	}
	ks := p.key(key)
	x := p.newOp(ks, kindRead, deadline)
	p.enqueue(x, false)
	return x.id, nil
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

// writtenBackEpoch is the epoch a read reports once its write-back is
// chosen: readEpoch of what its promises reported (design.md R16), not the
// written value's own, which is 0 for an empty register.
func writtenBackEpoch(x *op) uint64 { return x.readEpoch }

// readWrittenBack runs when a majority accepted a read's write-back: the
// value is chosen now.
func (p *Proposer) readWrittenBack(x *op, res OpResult) {
	res.Outcome, res.Value = ReadDone, x.proposed
	res.Holder, res.HolderInc = x.proposed.Holder, x.proposed.HolderInc
	res.Live, res.Accepted = x.readLive, x.ballot
	res.Epoch = p.rules.writtenBackEpoch(x)
	p.finish(x, res)
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

// readSettlesLive reports whether a read may report base, which a majority
// of voters accepted at hi (every one of them, if it prepared), live or
// not as those voters' timers say (live: some timer of it runs). A grant
// live at one of them is live. One whose timers all ran out ended only if
// hi began a lease period (base.Lease): each of them started its timer on
// accepting hi, so each answered after the holder's deadline for that
// period, and a renewal after it that succeeded would have reached one of
// them first (as for an observer: design.md R83). At a write-back's
// ballot, voters that never timed the grant answer "no timer" at any time,
// and a renewal through other voters may succeed after they answer: the
// read writes the value back instead, which no renewal it missed lets
// through (readChange; design.md R84).
func readSettlesLive(base Value, hi Ballot, live bool) bool {
	return live || !base.Held || hi == base.Lease
}
