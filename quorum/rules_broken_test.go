package quorum

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// Broken variants of the acceptor's rules (acceptor_rules.go): each breaks
// a rule of docs/design.md on purpose, for a test to show that a checker
// catches the break. addFault (sim_bugs_test.go) installs them by the
// fault's name; a test may install one in an acceptor it made
// (Acceptor.breakWith). Variants of different entries compose; a variant
// that narrows an entry another variant may also break wraps the entry it
// finds, so that the two compose in either order.

// acceptorVariants are the broken variants by fault name.
var acceptorVariants = []struct {
	name string
	brk  func(*acceptorRules)
}{
	{"skip-quarantine", skipQuarantine},
	{"short-quarantine", shortQuarantine},
	{"deaf-to-long-leases", deafToLongLeases},
	{"refuse-long-write-backs", refuseLongWriteBacks},
	{"ballot-reuse", answerEqualPrepares},
	{"skip-prev-catch-up", skipPrevCatchUp},
	{"keep-stale-catch-up", keepStaleCatchUp},
	{"floor-on-majority", floorOnMajority},
	{"new-voters-only", newVotersOnly},
	{"copies-vote", copiesVote},
	{"lost-with-later-lives", lostWithLaterLives},
	{"ignore-quiet", ignoreQuiet},
	{"sticky-lost", stickyLost},
	{"keep-quiet", keepQuiet},
	{"ignore-reserved", ignoreReserved},
	{"ignore-ballot-mark", ignoreBallotMark},
	{"forget-config", forgetConfig},
	{"trust-own-empty-disk", trustOwnEmptyDisk},
	{"fresh-ignores-promises", freshIgnoresPromises},
	{"tell-no-lives", tellNoLives},
	{"forget-amnesia-vote", forgetAmnesiaVote},
	{"trust-forgotten", trustForgotten},
	{"ignore-newer-config", ignoreNewerConfig},
	{"forget-own-vote", forgetOwnVote},
	{"full-restart-ignores-newer", fullRestartIgnoresNewer},
	{"count-copied-config", countCopiedConfig},
	{"forget-held", dropAny},
	{"forget-while-pending", forgetWhilePending},
	{"keep-expired-grants", keepExpiredGrants},
	{"free-live-grants", freeLiveGrants},
	{"own-bucket-sweeps", ownBucketSweeps},
	{"own-bucket-noncopies", ownBucketNoncopies},
	{"list-counts-copies", listCountsCopies},
	// Broken by tests directly, named by no fault of addFault.
	{"", keepCopies},
	{"", ignoreLostWith},
}

// skipQuarantine votes as soon as it has caught up (R35).
func skipQuarantine(r *acceptorRules) {
	r.quarantineOver = func(*Acceptor, time.Duration) bool { return true }
	r.horizonOver = func(*Acceptor, time.Duration) bool { return true }
}

// shortQuarantine quarantines for this life's own length only: it asks
// nobody's horizon, waits out none it hears, and learns held values in a
// catch-up without a timer (R36).
func shortQuarantine(r *acceptorRules) {
	r.horizonPeers = func(*Acceptor) []NodeID { return nil }
	r.waitOut = func(*Acceptor, time.Duration) {}
	r.timeMerged = func(*Acceptor, *register, *Entry) {}
}

// deafToLongLeases learns nothing of leases above MaxTTL, from refused
// accepts or from gossip (R37).
func deafToLongLeases(r *acceptorRules) {
	r.hearLease = func(*Acceptor, *Op) {}
	r.hearPeerTTL = func(*Acceptor, time.Duration) {}
}

// refuseLongWriteBacks refuses every accept of a lease longer than MaxTTL,
// a write-back that starts no timer included (R37).
func refuseLongWriteBacks(r *acceptorRules) {
	r.tooLong = func(a *Acceptor, op *Op) bool { return op.Value.TTL > a.cfg.MaxTTL }
}

// answerEqualPrepares answers any prepare equal to the promise, as a
// duplicate (R5).
func answerEqualPrepares(r *acceptorRules) {
	r.repeatsPrepare = func(*register, *Op) bool { return true }
}

// skipPrevCatchUp, while a change is pending, catches up from the new
// voters only (R39).
func skipPrevCatchUp(r *acceptorRules) {
	r.catchUpPeers = func(a *Acceptor) []NodeID {
		var peers []NodeID
		for _, v := range a.m.Voters {
			if v != a.cfg.ID {
				peers = append(peers, v)
			}
		}
		return peers
	}
	r.caughtUp = func(a *Acceptor) bool { return a.caughtUpFrom(a.m.Voters) }
}

// keepStaleCatchUp keeps what a catch-up merged from a peer that has
// restarted since (R40).
func keepStaleCatchUp(r *acceptorRules) {
	r.peerRestarted = func(*Acceptor, *peerCatchUp, uint64) {}
}

// floorOnMajority concludes a full restart when a majority lost its state,
// without every voter's answer (R41).
func floorOnMajority(r *acceptorRules) {
	r.heardAll = func(*Acceptor, int) bool { return true }
}

// newVotersOnly counts, for a full restart during a pending change, the new
// voters only (R42).
func newVotersOnly(r *acceptorRules) {
	r.lostMajority = func(a *Acceptor) bool { return a.lostIn(a.m.Voters) }
}

// copiesVote reports values copied in a catch-up as accepted (R43).
func copiesVote(r *acceptorRules) {
	r.isCopy = func(*register) bool { return false }
}

// keepCopies, going live after a majority loss, keeps copies at the
// ballots they were accepted at (R44).
func keepCopies(r *acceptorRules) {
	r.demoteCopies = func(*Acceptor) {}
}

// ignoreLostWith counts, for a full restart, only the voters still
// recovering, not those that went live on its word (R45).
func ignoreLostWith(r *acceptorRules) {
	r.countsAsLost = func(p *peerCatchUp) bool { return p.recovering }
}

// lostWithLaterLives says LostWith to later lives of the voter counted, and
// counts such a peer toward a majority restarted from disks once merged
// from (R46).
func lostWithLaterLives(r *acceptorRules) {
	life := r.countedLife
	r.countedLife = func(asker, counted uint64) bool { return life(asker, counted) || asker > counted }
	restarted := r.countsAsRestarted
	r.countsAsRestarted = func(p *peerCatchUp) bool { return restarted(p) && (!p.lostWith || p.done) }
}

// ignoreQuiet says no LostWith to a later life whose disk shows that no
// life since the one counted voted (R46).
func ignoreQuiet(r *acceptorRules) {
	r.quietSince = func([]uint64, uint64) bool { return false }
}

// stickyLost counts a peer that said it restarted as such after it caught
// up from others (R47).
func stickyLost(r *acceptorRules) {
	r.peerCaughtUp = func(*peerCatchUp, bool) {}
}

// keepQuiet, going live, leaves the disk's quiet lives as they are (R48).
func keepQuiet(r *acceptorRules) {
	r.endsQuiet = func(*Acceptor) bool { return false }
}

// ignoreReserved forgets epoch marks: its own after a restart from disk,
// and those of peers recovering from theirs (R51).
func ignoreReserved(r *acceptorRules) {
	r.takeEpochMark = func(*Acceptor, uint64) {}
}

// ignoreBallotMark forgets its ballot mark after a restart from disk (R52).
func ignoreBallotMark(r *acceptorRules) {
	r.takeBallotMark = func(*Acceptor, uint64) {}
}

// forgetConfig, restarted from disk, forgets the configuration it adopted
// and its vote on the configuration register (R53).
func forgetConfig(r *acceptorRules) {
	r.restartConfig = func(m Membership, _ *Durable) (Membership, DurableRegister) { return m, DurableRegister{} }
}

// trustOwnEmptyDisk counts its own new disk among the voters that never
// voted (R55).
func trustOwnEmptyDisk(r *acceptorRules) {
	r.neverVoted = func(a *Acceptor, others int) bool { return others+1 >= a.m.Majority() }
}

// freshIgnoresPromises tells a voter on a new disk that it never voted
// when it accepted nothing, promises or not (R55).
func freshIgnoresPromises(r *acceptorRules) {
	r.answersFresh = func(a *Acceptor, _ NodeID, _ uint64) bool {
		return a.disk != nil && a.diskErr == nil && !a.amnesiac && !a.dur.Voted
	}
}

// tellNoLives says, with a promise, nothing of the lives it heard from
// before its first (R55).
func tellNoLives(r *acceptorRules) {
	r.livesTold = func(*Acceptor, time.Duration) []Life { return nil }
}

// forgetAmnesiaVote, on a new disk, recovered as one that forgot, saves no
// sign that it voted (R56).
func forgetAmnesiaVote(r *acceptorRules) {
	r.savesVoted = func(*Acceptor) bool { return false }
}

// trustForgotten answers, recovering without its earlier disk, as one
// restored from it: Durable on a new disk, never Forgot (R57).
func trustForgotten(r *acceptorRules) {
	r.tellsRecovery = func(a *Acceptor, resp *CatchUpResponse) {
		if a.disk != nil && a.diskErr == nil {
			resp.Durable, resp.EpochFloor = true, a.dur.Reserved
		}
	}
}

// ignoreNewerConfig, restarted, ignores newer configurations others
// accepted (R65).
func ignoreNewerConfig(r *acceptorRules) {
	r.chosenNewer = func(*Acceptor) *Membership { return nil }
	r.newerMaybeChosen = func(*Acceptor) uint64 { return 0 }
	r.peerAcceptedNewer = func(*peerCatchUp) bool { return false }
}

// forgetOwnVote, without its earlier disk, counts itself as one that did
// not accept a newer configuration (R66).
func forgetOwnVote(r *acceptorRules) {
	r.mayHaveAccepted = func(*Acceptor) bool { return false }
}

// fullRestartIgnoresNewer, without its earlier disk, concludes a full
// restart while a newer configuration may have been chosen (R67).
func fullRestartIgnoresNewer(r *acceptorRules) {
	r.newerStopsFullRestart = func(*Acceptor) bool { return false }
}

// countCopiedConfig merges a copy of the configuration register, restored
// from its disk too, and counts it as its own vote (R68).
func countCopiedConfig(r *acceptorRules) {
	r.mergesConfig = func(*Acceptor) bool { return true }
	r.ownConfigVote = func(a *Acceptor) DurableRegister {
		if r := a.regs[ConfigKey]; r != nil {
			return DurableRegister{Promise: r.promise, Accepted: r.accepted, Value: r.value}
		}
		return a.dur.Config
	}
}

// dropAny drops on OpForget whatever the register holds (R70).
func dropAny(r *acceptorRules) {
	r.droppable = func(_ *Acceptor, key string, _ *register, _ time.Duration) bool { return key != ConfigKey }
}

// forgetWhilePending forgets registers while a voter change is pending
// (R73).
func forgetWhilePending(r *acceptorRules) {
	r.forgetsNothing = func(*Acceptor) bool { return false }
}

// keepExpiredGrants picks free registers only for sweeps, never a grant
// whose lease ran out (R75).
func keepExpiredGrants(r *acceptorRules) {
	r.picksExpired = func(*Acceptor, string, *register, time.Duration) bool { return false }
}

// freeLiveGrants picks any grant for sweeps, its lease timed here or not
// (R76).
func freeLiveGrants(r *acceptorRules) {
	r.picksExpired = func(_ *Acceptor, key string, r *register, _ time.Duration) bool {
		return key != ConfigKey && r.value.Held
	}
}

// ownBucketSweeps picks the keys of this voter's bucket only, never
// another's (R77).
func ownBucketSweeps(r *acceptorRules) {
	r.pickedForOthers = func(*register) bool { return false }
}

// ownBucketNoncopies picks another voter's copies, never another's register
// this voter kept (R77).
func ownBucketNoncopies(r *acceptorRules) {
	picked := r.pickedForOthers
	r.pickedForOthers = func(reg *register) bool { return reg.copied && picked(reg) }
}

// listCountsCopies says in a listing's answers that no entry is a copy
// (R87).
func listCountsCopies(r *acceptorRules) {
	r.listsCopy = func(*Acceptor, *register) bool { return false }
}

// breakWith breaks a's rules with each of brks (nil ones break nothing).
func (a *Acceptor) breakWith(brks ...func(*acceptorRules)) {
	for _, brk := range brks {
		if brk != nil {
			brk(&a.rules)
		}
	}
}

// breakAcceptor adds brk to the acceptor rules f breaks.
func (f *nodeRules) breakAcceptor(brk func(*acceptorRules)) { f.acc = thenBreak(f.acc, brk) }

// breakProposer adds brk to the proposer rules f breaks.
func (f *nodeRules) breakProposer(brk func(*proposerRules)) { f.prop = thenBreak(f.prop, brk) }

// thenBreak is first, then then.
func thenBreak[T any](first, then func(*T)) func(*T) {
	if first == nil {
		return then
	}
	return func(t *T) {
		first(t)
		then(t)
	}
}

// brokenEntries names the entries of r that are not the protocol's.
func brokenEntries(r acceptorRules) []string {
	var names []string
	got, def := reflect.ValueOf(r), reflect.ValueOf(defaultAcceptorRules)
	for i := 0; i < got.NumField(); i++ {
		if got.Field(i).Pointer() != def.Field(i).Pointer() {
			names = append(names, got.Type().Field(i).Name)
		}
	}
	return names
}

// TestAcceptorRulesBrokenVariants: every entry of the acceptor's rules is
// broken by some variant, every variant breaks an entry, addFault
// installs each by its name, and the variants of the faults that tests
// join with "+" compose: the joined faults break every entry each breaks.
func TestAcceptorRulesBrokenVariants(t *testing.T) {
	byEntry := make(map[string][]string)
	byFault := make(map[string][]string)
	for _, v := range acceptorVariants {
		broken := brokenEntries(acceptorRulesWith(v.brk))
		if len(broken) == 0 {
			t.Errorf("%q breaks no rule", v.name)
		}
		for _, e := range broken {
			byEntry[e] = append(byEntry[e], v.name)
		}
		if v.name == "" {
			continue
		}
		byFault[v.name] = broken
		if got := brokenEntries(acceptorRulesWith(faultsNamed(v.name).acc)); !slices.Equal(got, broken) {
			t.Errorf("addFault(%q) breaks %v, its variant %v", v.name, got, broken)
		}
	}
	typ := reflect.TypeOf(acceptorRules{})
	for i := 0; i < typ.NumField(); i++ {
		if name := typ.Field(i).Name; len(byEntry[name]) == 0 {
			t.Errorf("no variant breaks %s", name)
		}
	}
	for _, joined := range [][]string{
		{"copies-vote", "keep-stale-catch-up"},
		{"copies-vote", "config-without-floors"},
		{"copies-vote", "no-sweep-write-back", "own-bucket-sweeps", "read-empty-epoch"},
		{"own-bucket-noncopies", "own-bucket-sweeps"},
		{"own-bucket-sweeps", "own-bucket-noncopies"},
		{"lost-with-later-lives", "ignore-quiet"},
	} {
		var want []string
		for _, name := range joined {
			want = append(want, byFault[name]...)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		bug := joined[0]
		for _, name := range joined[1:] {
			bug += "+" + name
		}
		got := brokenEntries(acceptorRulesWith(faultsNamed(bug).acc))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s breaks %v, want %v", bug, got, want)
		}
	}
	// Narrowing variants of one entry compose in either order.
	r := &register{copied: true, looks: 1}
	for _, bug := range []string{"own-bucket-noncopies+own-bucket-sweeps", "own-bucket-sweeps+own-bucket-noncopies"} {
		if rules := acceptorRulesWith(faultsNamed(bug).acc); rules.pickedForOthers(r) {
			t.Errorf("%s picks another voter's copy", bug)
		}
	}
	rules := acceptorRulesWith(faultsNamed("lost-with-later-lives+ignore-quiet").acc)
	if !rules.countedLife(8, 7) || rules.quietSince([]uint64{7}, 7) {
		t.Errorf("lost-with-later-lives+ignore-quiet: LostWith to a later life %v, to a quiet one %v",
			rules.countedLife(8, 7), rules.quietSince([]uint64{7}, 7))
	}
}
