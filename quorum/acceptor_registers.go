package quorum

import "time"

// register is one key as an acceptor keeps it.
type register struct {
	promise Ballot
	// promisedBy is the round (Op.ID) of the prepare that made the
	// promise, zero when an accept's Next or a catch-up made it: only a
	// prepare of that very round may be answered again at that ballot.
	promisedBy uint64
	accepted   Ballot
	value      Value
	maxEpoch   uint64
	// copied: accepted and value came from a catch-up, not from an
	// accept (Result.Copy).
	copied bool
	// looks counts the sweeps that looked at the register since a round
	// last used it (it wraps; see SweepCandidates).
	looks uint8
	// pickedIn is the RegisterIdle period (from 1) in which a sweep last
	// picked the register while it held a grant this voter does not time
	// (pickExpired); in the padding after looks, so the register stays 256
	// bytes.
	pickedIn uint32
	// until is when this acceptor's exclusion timer for value's grant
	// runs out, on its own clock; hasTimer is false when value is free, or
	// a grant this acceptor only learned by a write-back (see Value).
	until    time.Duration
	hasTimer bool
	// line is the key's line of waiters and its hand-off, nil while
	// nobody waits and no hand-off runs: most registers never have one,
	// and a held lease's register lives as long as the lease.
	line *waitLine
	// key names the register; usedAt is when it was last used, and older
	// and newer its neighbours in the acceptor's list of registers by
	// last use (acceptor_registers.go).
	key          string
	usedAt       time.Duration
	older, newer *register
}

// remaining is how long the exclusion timer still runs at now.
func (r *register) remaining(now time.Duration) time.Duration {
	if !r.hasTimer || !r.value.Held {
		return 0
	}
	if left := r.until - now; left > 0 {
		return left
	}
	return 0
}

// Registers are finite. An acceptor that kept every key ever touched would
// grow without bound under per-entity locking (invoice/<id>), and any member
// could pin its memory with prepares of made-up keys. So a key that no
// voter needs any more is forgotten, and two floors stand for every
// forgotten register (design.md R69):
//
//   - the promise floor, the highest ballot any dropped register promised
//     or accepted: a new register starts promised to it, so a round begun
//     before the drop, or a message late from it, cannot win;
//   - the epoch floor, the highest epoch any dropped register knew: a new
//     register starts knowing it, so the next grant of a forgotten key
//     still gets a token above every earlier one.
//
// A voter cannot drop a register on its own, even a free one: another
// voter that missed the release may still hold the grant before it, and
// with the free value gone from a majority that grant is again the highest
// value a majority reports (the simulator found this). So a key is
// forgotten only once every voter holds one free value at one ballot: a
// voter's node picks its idle free registers (each key is one voter's to
// pick, by hash; a copy, or a register kept long, is also the pick of the
// voter holding it, less often: SweepCandidates),
// asks every voter what it holds (a peek), and if all agree, tells them
// all to forget the key at that ballot (OpForget). A voter drops the
// register only if it still holds exactly that, free, with nobody
// waiting; afterwards nothing older than that ballot can come back: every
// voter's register was at it or above, and the floors refuse older
// writes. While a voter is down nothing is forgotten.
//
// If they do not agree, but none times a lease and the value at the
// highest ballot is free (copies that voters demoted after a majority
// loss, a register one voter kept when the others forgot the key, a grant
// one voter holds below the release it missed), the sweep writes the key
// back first, as a read would, and forgets it at the write's ballot once
// every voter accepted it (see Proposer.maybeWriteBack).
//
// Nor is a grant kept for good once its lease has run out. A grant whose
// holder crashed, was shut down without releasing, or lost its lease and
// never freed it was kept by every voter until someone acquired the key
// again, which under per-entity locking nobody does: every key a crashed
// node held stayed (design.md R75). So a sweep also picks a held
// register that this voter no longer times (sweepable), and if every
// voter answers its peek, none reports time left on the lease, and the
// value at the highest ballot is that grant, it frees it as a takeover
// would, epoch kept, and forgets the key at the free value's ballot once
// every voter accepted it. The write-back's prepare is IfFree, so a voter
// still timing the lease refuses it, and its answers are checked again
// (Proposer.mayFreeExpired says why this is safe). A holder whose lease
// is live renews it, so its register is not idle at the voters that time
// it; a voter that misses the renewals (cut off from the holder, or left
// out of its one-round-trip path) picks it once per RegisterIdle, and the
// peeks, finding it timed elsewhere, leave it.
//
// Nor is anything forgotten while a voter change is pending. A voter that
// restarts then catches up from the voters before the change as well
// (acceptor_catchup.go), and the change lists and moves the keys those
// hold; but a voter the change removes is asked by no forget of the new
// configuration, and may hold a value the current voters have since moved
// past: had they forgotten the key, that value would again be the highest
// a catch-up or a listing finds, and a released grant would come back
// (the simulator found this: an observer saw an older token after a newer
// one). Until the change is settled the voters keep every register, so
// what a removed voter holds is at most as high as what they hold; once it
// is settled, the removed voter is asked nothing again.
//
// Picked are the registers idle longest once there are more than
// MaxRegisters, and any idle for longer than RegisterIdle. The voter
// configuration's register is never forgotten.
//
// Most keys are forgotten without a sweep, though: a node that drops an
// idle key it released (past its MaxIdleKeys) tells every voter to forget
// it at the release's ballot, when every voter acknowledged that release
// (Proposer.forgettable): the acknowledgments say what the peeks would.
// Sweeps are left the keys nobody dropped that way (a release a voter
// missed, a node that crashed, holding or not, keys only read).

// register returns key's register, making it from the floors if there is
// none, and notes that it was used now.
func (a *Acceptor) register(key string) *register {
	r := a.regs[key]
	if r == nil {
		r = &register{promise: a.promiseFloor, maxEpoch: a.epochFloor, key: key}
		a.regs[key] = r
		a.link(r)
	}
	a.touch(r)
	r.looks = 0
	return r
}

// The registers are in a list by last use, oldest first, linked through the
// registers themselves: no entry of its own per use, and nothing to compact.

// touch notes that r was used now: it goes to the newest end of the list.
func (a *Acceptor) touch(r *register) {
	r.usedAt = a.clock.Now()
	if a.newest != r {
		a.unlink(r)
		a.link(r)
	}
}

// link puts r, which is in no list, at the newest end.
func (a *Acceptor) link(r *register) {
	r.older, r.newer = a.newest, nil
	if a.newest != nil {
		a.newest.newer = r
	} else {
		a.oldest = r
	}
	a.newest = r
}

// unlink takes r out of the list.
func (a *Acceptor) unlink(r *register) {
	if r.older != nil {
		r.older.newer = r.newer
	} else {
		a.oldest = r.newer
	}
	if r.newer != nil {
		r.newer.older = r.older
	} else {
		a.newest = r.older
	}
	r.older, r.newer = nil, nil
}

// droppable reports whether r may be dropped at now: free (or empty), no
// timer running, nobody waiting, no hand-off; never the configuration
// (design.md R70).
func (a *Acceptor) droppable(key string, r *register, now time.Duration) bool {
	return key != ConfigKey && !r.value.Held && a.unused(r, now)
}

// sweepable reports whether a sweep may pick r at now: droppable, or a
// grant whose lease this voter no longer times (its holder crashed, or
// lost it and never freed it), with nobody waiting and no hand-off, at
// most once per RegisterIdle period (pickExpired). The sweep frees such a
// grant before it forgets the key, and only if every voter reports no
// time left on it (Proposer.mayWriteBack).
func (a *Acceptor) sweepable(key string, r *register, now time.Duration) bool {
	return a.rules.droppable(a, key, r, now) || a.rules.picksExpired(a, key, r, now)
}

// picksExpired reports whether a sweep picks r, a grant this voter no
// longer times, at now: nobody waits, no hand-off runs, and not yet in this
// RegisterIdle period (design.md R75). A grant whose lease is timed here
// is never picked (design.md R76).
func (a *Acceptor) picksExpired(key string, r *register, now time.Duration) bool {
	return key != ConfigKey && r.value.Held && r.value.Config == nil && a.unused(r, now) && a.pickExpired(r, now)
}

// pickExpired reports whether a sweep may pick r, a register holding a
// grant this voter no longer times, now, and notes it: at most once per
// RegisterIdle period. Such a register is most often a live lease this
// voter was left out of (one lost accept keeps it off the lease's
// one-round-trip renewals for good, and a restart every lease at once),
// which the peeks then find timed elsewhere. Over MaxRegisters a sweep
// looks at registers whatever their idleness, an eighth of a retry
// interval apart: without the bound each such lease cost three peeks at
// every sweep, for good (1,848 peeks in 4 s at 24 leases; design.md R78).
// A grant that did expire everywhere is freed
// at its first pick, and the free register is then swept as any other.
func (a *Acceptor) pickExpired(r *register, now time.Duration) bool {
	period := uint32(now/a.cfg.RegisterIdle) + 1 // 0: never picked
	if r.pickedIn == period {
		return false
	}
	r.pickedIn = period
	return true
}

// unused reports whether nothing at this voter depends on r at now: no
// timer running, nobody waiting, no hand-off.
func (a *Acceptor) unused(r *register, now time.Duration) bool {
	return (r.line == nil || len(r.line.watchers) == 0 && (r.line.handedTo == "" || now >= r.line.handedUntil)) &&
		r.remaining(now) == 0
}

// drop forgets key's register, raising the floors to what it knew.
func (a *Acceptor) drop(key string, r *register) {
	a.promiseFloor = maxBallot(a.promiseFloor, maxBallot(r.promise, r.accepted))
	a.epochFloor = max(a.epochFloor, r.maxEpoch, r.value.Epoch)
	delete(a.regs, key)
	a.unlink(r)
	a.stats.Dropped++
}

// handleForget drops key's register if it still holds what every voter
// was seen to hold: the value accepted at op.Ballot, free, nobody waiting;
// and no voter change is pending here (the peeks may have been answered
// before it was).
func (a *Acceptor) handleForget(op *Op, now time.Duration) Result {
	if op.Key == "" {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonInvalid}
	}
	if a.rules.forgetsNothing(a) {
		return Result{ID: op.ID, OK: true}
	}
	if r := a.regs[op.Key]; r != nil && r.accepted == op.Ballot && a.rules.droppable(a, op.Key, r, now) {
		a.drop(op.Key, r)
	}
	return Result{ID: op.ID, OK: true}
}

// forgetsNothing reports whether the acceptor forgets nothing now: while a
// voter change is pending, a voter that restarts catches up from the
// voters before it too, and a removed voter may hold a value the current
// voters moved past (design.md R73).
func (a *Acceptor) forgetsNothing() bool { return a.m.Pending }

// SweepCandidates returns up to n keys that this voter's node may ask the
// voters to forget: its own to pick (by hash), idle longest once there are
// more than MaxRegisters or idle longer than RegisterIdle, and droppable
// here, or held by a grant this voter no longer times (sweepable). Each
// goes to the back of the list of registers by use, to be looked at again
// later if it is not forgotten.
//
// A register of another voter's bucket is picked too, less often
// (pickedForOthers), since the voter whose key it is may hold no register
// of it, and would never sweep it:
//
//   - a copy (merged in a catch-up, not accepted since) once it outlived a
//     look of this voter's, and then at every fourth look. A voter that
//     goes live after a majority loss need not have copied every bucket
//     before it does: what it missed lives on at the voters it copied
//     from and at those that copied it, for good (design.md R77);
//   - any other once it outlived four looks, and then at every eighth: a
//     register this voter kept when the others forgot the key (the forget
//     to it was lost, or it could not drop the register then), which the
//     key's own voter, holding nothing of it, never looks at again
//     (design.md R77). By then
//     the own voter has picked the key at four looks of its own.
//
// Not every look: picking every idle key of every bucket would multiply
// the peeks made while a voter is down (when no forget succeeds) by the
// number of voters. With n voters, the others add (n-1)/8 of the own
// voter's peeks of a key no forget can free (a quarter more with 3
// voters, half with 5; measured with one voter down and 6 free keys, 136
// → 168 peeks in 5s with 3 voters, 340 → 492 with 5), and copies (n-1)/4;
// a key the own voter forgets at its first look costs nothing more.
func (a *Acceptor) SweepCandidates(n int) []string {
	if a.state != Live {
		return nil
	}
	now := a.clock.Now()
	if now < a.sweptAt+a.sweepEvery() {
		return nil // swept a moment ago: the forgets of then are under way
	}
	a.sweptAt = now
	if n <= 0 || a.rules.forgetsNothing(a) {
		// None wanted now, or a change is pending: look again a retry
		// interval later (NextTick).
		return nil
	}
	self := uint32(a.m.index(a.cfg.ID))
	var keys []string
	// Look at a bounded stretch of the list: with more live leases than
	// MaxRegisters (100,000 held on one node, say) few registers are
	// droppable, and walking the whole list at every sweep, an eighth of a
	// retry interval apart, kept the voters too busy to answer renewals
	// (bench renewal at 100,000 leases lost most of them, "renewal found
	// no quorum", once the leases passed the cap).
	budget := max(4*n, minSweepLook)
	a.sweptFew = false
	for look := min(len(a.regs), budget); look > 0 && a.oldest != nil && len(keys) < n; look-- {
		r := a.oldest
		if len(a.regs) <= a.cfg.MaxRegisters && now-r.usedAt < a.cfg.RegisterIdle {
			break
		}
		own := bucketOf(r.key, uint32(len(a.m.Voters))) == self
		if (own || a.rules.pickedForOthers(r)) && a.sweepable(r.key, r, now) {
			keys = append(keys, r.key)
		}
		a.touch(r) // looked at again later, forgotten or not
		r.looks++
	}
	// A sweep that found few of what it looked for says that what is over
	// the cap is in use: the next waits a whole retry interval.
	a.sweptFew = len(keys) < n/4
	return keys
}

// pickedForOthers reports whether a sweep picks r, a register of another
// voter's bucket, at this look: a copy at its second look and every fourth
// after, any other at its fourth look and every eighth after (the counts
// wrap at 256, a multiple of both; design.md R77).
func (r *register) pickedForOthers() bool {
	if r.copied {
		return r.looks%4 == 1
	}
	return r.looks%8 == 3
}

// minSweepLook is the fewest registers a sweep looks at.
const minSweepLook = 256

// sweepEvery is how long sweeps wait for each other: a retry interval, or
// an eighth of one while there are more registers than MaxRegisters (keys
// come faster than a sweep a retry interval frees them) and the last sweep
// found enough to forget.
func (a *Acceptor) sweepEvery() time.Duration {
	if len(a.regs) > a.cfg.MaxRegisters && !a.sweptFew {
		return a.cfg.RetryInterval / 8
	}
	return a.cfg.RetryInterval
}

// maxEpoch is the highest epoch r's key may have had anywhere, as this
// acceptor reports it: the register's own, or the acceptor's epoch floor if
// that is higher. The floor rises after a register was made (a settled
// configuration's floor, a catch-up's, a restarted voter's mark), and a
// register made before must report it too: a proposer takes its next epoch
// above the highest a majority reports, and a register reporting less than
// the floor let a configuration whose voters all joined after the floor was
// set grant a token below one granted before (design.md R12).
func (a *Acceptor) maxEpoch(r *register) uint64 { return max(r.maxEpoch, a.epochFloor) }

// raiseEpochFloor raises the epoch floor to a settled configuration's
// (Membership.EpochFloor). Every register reports the floor from then on
// (maxEpoch): a voter that joined while the change was pending made its
// registers from a floor of 0, and keeping registers while a change is
// pending showed a read going back to epoch 0 after an earlier one had
// seen a real token.
func (a *Acceptor) raiseEpochFloor(e uint64) { a.epochFloor = max(a.epochFloor, e) }

// mergeFloors raises the floors to another voter's (catch-up).
func (a *Acceptor) mergeFloors(promise Ballot, epoch uint64) {
	a.promiseFloor = maxBallot(a.promiseFloor, promise)
	a.epochFloor = max(a.epochFloor, epoch)
}

// Floors reports the acceptor's promise and epoch floors.
func (a *Acceptor) Floors() (promise Ballot, epoch uint64) { return a.promiseFloor, a.epochFloor }
