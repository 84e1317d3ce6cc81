package quorum

import "time"

// Broken variants of the proposer's rules (proposerRules), each named for
// the fault a test switches on (the Bug names of addFault, sim_bugs_test.go)
// and breaking the rule of docs/design.md its field cites, to show that the
// checkers catch it. A variant that changes a rule another may change too
// builds on what it finds there, so that faults joined by "+" compose.

// breakRules breaks, with variant, the rules of p, a proposer running.
func breakRules(p *Proposer, variant func(*proposerRules)) { variant(&p.rules) }

// aliveMajority takes a majority of the voters alive (as alive says, like
// gossip) for a majority of the configuration (R1).
func aliveMajority(alive func() []NodeID) func(*proposerRules) {
	return func(r *proposerRules) {
		r.quorum = func(p *Proposer) Membership { return Membership{ID: p.m.ID, Voters: alive()} }
	}
}

// countMessages counts every message of a voter as a vote (R3): a
// duplicated promise or acknowledgment makes a majority of one voter.
func countMessages(r *proposerRules) {
	r.countVote = func(t *tally, from NodeID, ok bool) bool {
		if t.m.index(from) < 0 {
			return false
		}
		if ok {
			t.nyes++
		} else {
			t.nno++
		}
		return true
	}
}

// perKeyBallots counts ballots per key only (R4), from 1 again after the
// key's state is forgotten.
func perKeyBallots(r *proposerRules) {
	r.ballotCounter = func(p *Proposer, ks *keyState) uint64 { return ks.counter + 1 }
}

// anyTimerLocks takes any live timer of a grant not behind base for a lock
// (R10), and parks behind it seen at one voter or more (R29).
func anyTimerLocks(r *proposerRules) {
	r.lockingGrant = func(timed, base Value) (Value, bool) {
		switch {
		case timed.Epoch < base.Epoch || (timed.Epoch == base.Epoch && !base.Held):
			return Value{}, false
		case timed.Epoch == base.Epoch:
			return base, true
		}
		return timed, true
	}
	r.parksBehind = func(*Proposer, *op, Value, Ballot, []reply) bool { return true }
}

// readEmptyEpoch reports the written value's epoch for a read that wrote
// back, 0 for an empty register (R16).
func readEmptyEpoch(r *proposerRules) {
	r.writtenBackEpoch = func(x *op) uint64 { return x.proposed.Epoch }
}

// clockAtGrant reads the holder's t0 when a majority has accepted (R18).
func clockAtGrant(r *proposerRules) {
	r.holderStart = func(x *op, now time.Duration) time.Duration { return now }
}

// fastAnyVoter sends fast-path accepts to voters that did not promise the
// ballot too (R23).
func fastAnyVoter(r *proposerRules) {
	r.acceptInc = func(p *Proposer, x *op, voter NodeID, promised voterIncs) uint64 {
		if inc := promised.get(voter); inc != 0 {
			return inc
		}
		return p.incs[voter]
	}
}

// keepFastOnAdopt keeps fast paths across adopting a configuration (R24).
func keepFastOnAdopt(r *proposerRules) {
	r.fastPathOnAdopt = func(*Proposer, *keyState) {}
}

// noEpochFloor takes the highest epoch seen + 1 for a new grant, without
// the wall clock's floor (R34).
func noEpochFloor(r *proposerRules) {
	r.nextEpoch = func(p *Proposer, maxSeen uint64) uint64 { return maxSeen + 1 }
}

// skipMigration settles a voter change without listing or moving the keys
// (R61).
func skipMigration(r *proposerRules) {
	r.listingsNeeded = func(*changeOp) int { return 0 }
}

// listFromOne moves the keys one old voter lists, not a majority's (R62).
func listFromOne(r *proposerRules) {
	r.listingsNeeded = func(*changeOp) int { return 1 }
}

// migrateFullTTL times a moved lease for a full TTL, not what is left of
// it (R63).
func migrateFullTTL(r *proposerRules) {
	r.movedTTL = func(p *Proposer, base Value, replies []reply) time.Duration { return base.TTL }
}

// configWithoutFloors writes configurations without the epoch floors the
// voters reported, as before floors were carried (R64).
func configWithoutFloors(r *proposerRules) {
	r.sameConfig = func(cur, write Membership) bool { return cur.Equal(write) }
	r.raiseConfigFloor = func(*Membership, []reply) {}
}

// forgetAny forgets a key whatever the voters hold (R70).
func forgetAny(r *proposerRules) {
	r.forgets = func(*op) bool { return true }
}

// forgetOnMajority forgets a key a majority holds free too, not only one
// every voter does (R71).
func forgetOnMajority(r *proposerRules) {
	prev := r.forgets
	r.forgets = func(x *op) bool { return prev(x) || x.votes.nyes >= x.votes.m.Majority() }
}

// forgetEvictedOnMajority forgets an evicted key's registers when a
// majority, not every voter, accepted its release (R72).
func forgetEvictedOnMajority(r *proposerRules) {
	r.forgetsEvicted = func(p *Proposer, acked *voterIncs) bool { return len(*acked) >= p.m.Majority() }
}

// noSweepWriteBack never writes a key back to forget it: a sweep that
// finds it free everywhere but at different ballots leaves it (R74).
func noSweepWriteBack(r *proposerRules) {
	r.writesBack = func(*Proposer, []reply) bool { return false }
}

// sweepNeedsEveryFree writes a key back only if every voter holds it free
// (R74): a release one voter missed is never forgotten.
func sweepNeedsEveryFree(r *proposerRules) {
	prev := r.writesBack
	r.writesBack = func(p *Proposer, replies []reply) bool {
		for i := range replies {
			if replies[i].res.Value.Held {
				return false
			}
		}
		return prev(p, replies)
	}
}

// neverFreeExpired never frees a grant whose lease ran out at every
// voter (R75).
func neverFreeExpired(r *proposerRules) {
	r.freesExpired = func(*Proposer, Value) bool { return false }
}

// freeWhateverTimers frees a grant whatever the voters' timers say, with a
// prepare that is not IfFree (R76).
func freeWhateverTimers(r *proposerRules) {
	r.sweepYields = func(*Result) bool { return false }
	r.asksIfFree = func(x *op) bool { return x.kind == kindAcquire }
}

// readExpiryAtWriteBack takes a majority at a write-back's ballot, no
// timer running, for a lease's end (R84).
func readExpiryAtWriteBack(r *proposerRules) {
	r.readSettlesLive = func(Value, Ballot, bool) bool { return true }
}

// observeHighest reports an observed key's highest report, agreed by a
// majority or not (R80).
func observeHighest(r *proposerRules) {
	prev := r.settled
	r.settled = func(p *Proposer, o *observation) (Value, Ballot, bool) {
		var hi obsReport
		present := 0
		for _, id := range p.m.Voters {
			if r, ok := o.reports[id]; ok {
				if present == 0 || hi.accepted.Less(r.accepted) {
					hi = r
				}
				present++
			}
		}
		if present > 0 {
			return hi.value, hi.accepted, true
		}
		return prev(p, o)
	}
}

// observeKeepsBallots orders an observed key's states by ballot across the
// loss of a majority's state (R81).
func observeKeepsBallots(r *proposerRules) {
	r.supersedes = func(was, now Ballot, later bool) bool { return was.Less(now) }
}

// observeExpiryAnyPeriod takes an observed expiry of the grant last
// reported for its end whatever lease period it ends, an earlier one than
// the observer knows of included (R81).
func observeExpiryAnyPeriod(r *proposerRules) {
	r.endsLatestPeriod = func(known, v Value) bool { return true }
}

// observeForgottenHeld takes an observed key's empty register for older
// than any state at a real ballot (R82).
func observeForgottenHeld(r *proposerRules) {
	r.forgotten = func(was, now Ballot) bool { return false }
}

// observeAnyBallotExpiry takes a majority's reports of a lease's timer run
// out, at any ballots, for its end (R83).
func observeAnyBallotExpiry(r *proposerRules) {
	r.leaseEnded = func(p *Proposer, o *observation, v Value) bool {
		n := 0
		for _, id := range p.m.Voters {
			if r, ok := o.reports[id]; ok && !r.live && r.value.sameGrant(v) {
				n++
			}
		}
		return n >= p.m.Majority()
	}
}

// observeIncOrder takes the lower of two incarnations of a voter for its
// earlier life (R85).
func observeIncOrder(r *proposerRules) {
	r.laterLife = func(had obsReport, inc, round uint64) (later, known bool) { return inc > had.inc, true }
}

// countLostPromises counts the promises of a voter's life that others
// heard was followed by one that may have gone live on a new disk (R55).
func countLostPromises(r *proposerRules) {
	r.promiseLost = func(*op, NodeID, uint64) bool { return false }
}
