package quorum

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Rules of recovery the random runs do not break often enough to catch,
// each in a scenario that needs it: the scenario passes with the rule and
// breaks an invariant without it (or, for a rule whose breach no checker
// can see, shows the rule's own effect).

// A memory-only voter that restarts with a majority of the voters concludes
// a full restart (FloorOnly) only once every voter has answered, not as
// soon as a majority says it is recovering: the voters that kept their
// state know what the restarted ones forgot. Here a majority restarts at
// once (its voters leave quarantine together) and is cut off from the
// rest. With the rule they wait for the rest; without it they go live on
// each other's word with empty registers, and two things break.
//
// The order of ballots (I8): n0 is granted k0 at the first ballot of its
// new life, below the ballot of the last release, which the voters that
// kept their state still hold. Once the cut heals, a read that meets one
// of those voters takes the old release for the register's value and
// writes it back over the grant: the register goes back while n0 holds
// the key. Exclusion from leases of before the restart holds here: a
// lease on k1 runs across the crash, n1 takes k1 the moment the restarted
// voters vote, and the quarantine has outlasted the lease (I1 holds, and
// the token, on the wall-clock floor, is above the old ones: I2 holds).
//
// Exclusion (I1), when a rolling restart lowered the TTL: the restarted
// voters' quarantine covers their new lives' TTL, and only the horizon the
// voters that kept running report covers the longer lease of before
// (DESIGN §3.2, item 3). Without hearing from them, they vote while the
// lease on k1 runs, and n1 is granted k1 beside its holder.
//
// Random runs rarely reach it: a majority crash restarts its voters up to
// 300ms apart, and the first to leave quarantine goes live alone; the next
// ones catch up from it and from the voters that kept their state. (One
// run in 1,600 of majority crashes every second, memory only, no drift,
// broke I1 after a TTL roll.)
func TestCheckerCatchesFullRestartOnAMajority(t *testing.T) {
	t.Run("ballots", func(t *testing.T) { majorityRestartCatches(t, "floor-on-majority", "I8", false, false) })
	t.Run("rolled-ttl", func(t *testing.T) { majorityRestartCatches(t, "floor-on-majority", "I1", false, true) })
}

// A voter that restarts from its disk raises its promise floor to the
// ballot mark the disk keeps (durable.go). The same scenario with disks:
// the restarted majority now goes live without the other voters by rule
// (restartedMajority: each restarted from its disk, so no newer
// configuration can have been chosen without them), and its marks are
// all that keeps n0's first ballots from ranking below the release the
// others hold. With the marks n0's grant is at a ballot above every one
// the restarted voters knew; without them it is at n0's first ballot, and
// the read writes the old release back over it (I8). No random run was
// known to catch this mutation.
func TestCheckerCatchesForgottenBallotMark(t *testing.T) {
	majorityRestartCatches(t, "ignore-ballot-mark", "I8", true, false)
}

// majorityRestartCatches runs the scenario of majorityRestartsApart on ten
// seeds, with three and five voters: with bug each run must break want
// first; without it none may break anything, and n0 must be granted k0.
func majorityRestartCatches(t *testing.T, bug, want string, disks, retime bool) {
	t.Helper()
	caught := 0
	for seed := int64(1); seed <= 10; seed++ {
		for _, voters := range []int{3, 5} {
			what := fmt.Sprintf("seed %d, %d voters", seed, voters)
			s, granted := majorityRestartsApart(seed, voters, "", disks, retime, false)
			switch {
			case len(s.fail) > 0:
				t.Errorf("%s: %s", what, failureReport(s))
			case !granted:
				t.Errorf("%s: n0 was never granted k0: the scenario shows nothing", what)
			}
			s, granted = majorityRestartsApart(seed, voters, bug, disks, retime, false)
			switch {
			case len(s.fail) == 0:
				t.Errorf("%s, with %s: no violation (n0 granted: %v, floor only: %d)", what, bug, granted, s.stats.FloorOnly)
			case !strings.HasPrefix(violation(s.fail[0]), want):
				t.Errorf("%s, with %s: the first violation is not %s: %s", what, bug, want, firstLine(s.fail[0]))
			default:
				caught++
				if caught == 1 {
					t.Logf("%s, with %s: %s", what, bug, firstLine(s.fail[0]))
				}
			}
		}
	}
	t.Logf("%s broke %s in %d runs of 20", bug, want, caught)
}

// majorityRestartsApart runs the scenario of
// TestCheckerCatchesFullRestartOnAMajority: w takes and releases k0, then
// holds k1; a majority of voters crashes and restarts at once (with the
// TTL rolled to a quarter if retime), cut off from the others until after
// n1 tries to take k1 and n0 is granted k0; then a node that cannot reach
// n0 reads k0. It reports whether n0 was granted k0.
func majorityRestartsApart(seed int64, voters int, bug string, disks, retime, trace bool) (*sim, bool) {
	cfg := faultFree(seed, voters, 2, 1, 2)
	cfg.Bug, cfg.Trace = bug, trace
	cfg.Disks, cfg.WallBack, cfg.TTL = disks, false, time.Second
	cfg.Retime, cfg.RetimeTTL = retime, cfg.TTL/4
	cfg.MaxRegisters, cfg.RegisterIdle, cfg.MaxIdleKeys = 0, 0, 0 // k0's registers stay
	// The restarted voters leave quarantine together, and each hears the
	// other say it is recovering before either votes.
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) { return time.Millisecond, from != to }
	cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second // the cuts are the faults
	maj := voters/2 + 1
	// The first voters vote from about 1s; lives that start after the
	// crash run RetimeTTL if retime (simConfig.Retime: from 7s/3 on).
	crashAt := 2500 * time.Millisecond
	ttl := cfg.TTL
	if retime {
		ttl = cfg.RetimeTTL
	}
	var granted bool
	cfg.Script = func(s *sim) {
		w, h, r := s.nodes[voters].clients[0], s.nodes[0].clients[0], s.nodes[voters+1].clients[0]
		h1 := s.nodes[1].clients[0]
		w.holdTime, h.holdTime, h1.holdTime = 50*time.Millisecond, 3*time.Second, 100*time.Millisecond
		// w takes and releases k0 twice: the registers hold a release at
		// a ballot above the first of a new life's. Then it takes k1 and
		// holds it across the crash.
		for _, at := range []time.Duration{1500 * time.Millisecond, 1800 * time.Millisecond} {
			s.at(at, func() { w.acquire("k0", true, time.Second); s.flush(w.n) })
		}
		s.at(2100*time.Millisecond, func() {
			w.holdTime = 10 * time.Second
			w.acquire("k1", true, time.Second)
			s.flush(w.n)
		})
		cut := func(on bool) {
			for i := 0; i < maj; i++ {
				for j := maj; j < voters; j++ {
					s.cut[[2]int{i, j}], s.cut[[2]int{j, i}] = on, on
				}
			}
		}
		s.at(crashAt, func() {
			for _, n := range s.nodes[:maj] {
				s.crash(n)
			}
			for _, n := range s.nodes[:maj] {
				s.start(n)
			}
			cut(true)
		})
		liveAt := crashAt + cfg.timingOf(ttl).Quarantine() // of the restarted lives
		s.at(liveAt, func() { h1.acquire("k1", true, 5*time.Second); s.flush(h1.n) })
		s.at(liveAt+200*time.Millisecond, func() { h.acquire("k0", true, 5*time.Second); s.flush(h.n) })
		s.at(liveAt+500*time.Millisecond, func() {
			granted = h.grant != nil
			cut(false)
			// The reader cannot reach n0: any majority it gets holds a
			// voter that kept its state.
			s.cut[[2]int{voters + 1, 0}], s.cut[[2]int{0, voters + 1}] = true, true
			r.read("k0")
			s.flush(r.n)
		})
		s.at(liveAt+2*time.Second, func() { granted = granted || h.grant != nil })
	}
	s := newSim(cfg)
	s.run()
	return s, granted
}

// A voter that restarts from its disk does not vote again in a
// configuration that a chosen newer one replaced (DESIGN §3.2, item 4;
// §7): with voters that restarted with it it counts itself a majority
// only if none of them accepted a newer configuration
// (restartedMajority, newerMaybeChosen), and it adopts one that a
// majority accepted at one ballot (chosenNewer). The scenario: n3 adds n4
// to {n0 n1 n2}; the write is chosen, but nothing from a node on the new
// configuration reaches n0 or n1 until the heal (n3's pushes among it),
// and both restart from their disks at once. In "restarted" all three
// voters accepted the new configuration; in "elsewhere" n0 was cut off
// from n3 during the write, so n1 and n2 chose it. With the rule n0 and
// n1 adopt it (restarted) or wait to hear of it (elsewhere); any two of
// the three checks keep them so, and "ignore-newer-config" turns off all
// three: they go live on the founding configuration on each other's word,
// and accept n5's grant of k1 there.
//
// No invariant breaks either way, and we found no way one could: this
// tests the rule's own effect, which no checker sees. A newer
// configuration decides only through majorities of its voters, and each
// meets every majority of the one before (a change adds or removes one
// voter), so it decides nothing until a majority of the voters before it
// has adopted it, and each saves an adoption before acting on it. Voters
// that restarted together on the old configuration are a majority of it:
// the new one has granted nothing, and what they lost of the old one is
// what any restarted majority loses (the marks on their disks keep
// ballots and epochs above it, their horizons outlast its leases). A
// voter that adopted the new one says so in its catch-up answer
// (StatusWrongConfig), and the configuration register on their disks
// hands it to any change started on the old one. Random runs with the
// rule broken (voter changes, a majority crash about every second, disks;
// seeds 1-300 with 3 and 5 voters) broke nothing, and neither did this
// scenario with n5 holding k1 across the heal and other nodes waiting for
// it on the new configuration.
func TestDurableRestartNeverVotesInAReplacedConfiguration(t *testing.T) {
	for _, where := range []string{"restarted", "elsewhere"} {
		t.Run(where, func(t *testing.T) {
			for _, bug := range []string{"", "ignore-newer-config"} {
				s, votes := restartAfterUnpushedChange(t, where, bug)
				switch {
				case len(s.fail) > 0:
					t.Errorf("bug %q: %s", bug, failureReport(s))
				case bug == "" && len(votes) > 0:
					t.Errorf("with the rule, n0 or n1 voted in the founding configuration after the change: %s", votes[0])
				case bug != "" && len(votes) == 0:
					t.Errorf("with %s, n0 and n1 never voted in the founding configuration: the scenario shows nothing", bug)
				case bug != "":
					t.Logf("with %s: %s (%d votes in all)", bug, votes[0], len(votes))
				}
			}
		})
	}
}

// restartAfterUnpushedChange runs the scenario of
// TestDurableRestartNeverVotesInAReplacedConfiguration and lists the
// votes n0 and n1 cast in the founding configuration after their restart.
func restartAfterUnpushedChange(t *testing.T, where, bug string) (*sim, []string) {
	t.Helper()
	cfg := onDisks(bug, 3, 3, 1, 2, 8*time.Second, 6*time.Second) // the lost pushes are the fault
	cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
		if !s.healed && from != to && to.idx < 2 && s.boot.Newer(from.node.Membership()) {
			return time.Hour, true // lost: n0 and n1 have restarted by then
		}
		return time.Millisecond, from != to
	}
	changeAt, crashAt := 1500*time.Millisecond, 2*time.Second
	var votes []string
	cfg.Script = func(s *sim) {
		p, c := s.nodes[3], s.nodes[5].clients[0]
		c.holdTime = 50 * time.Millisecond
		// Every voter votes: a restart then waits out its quarantine and
		// catches up.
		s.at(time.Second, func() { c.acquire("k0", true, time.Second); s.flush(c.n) })
		if where == "elsewhere" {
			s.at(changeAt-100*time.Millisecond, func() { s.cut[[2]int{0, 3}], s.cut[[2]int{3, 0}] = true, true })
		}
		s.at(changeAt, func() { changeFrom(t, s, p, simChange{add: "n4"}) })
		s.at(crashAt, func() {
			delete(s.cut, [2]int{0, 3})
			delete(s.cut, [2]int{3, 0})
			if !s.boot.Newer(p.node.Membership()) {
				t.Fatalf("n3's change was not chosen")
			}
			for i, v := range s.nodes[:2] {
				accepted := v.node.acc.newerConfigAccepted() != 0
				switch {
				case s.boot.Newer(v.node.Membership()):
					t.Fatalf("%s adopted the new configuration before the restart", v.id)
				case accepted != (i == 1 || where == "restarted"):
					t.Fatalf("%s accepted the new configuration: %v", v.id, accepted)
				}
				s.crash(v)
			}
			for _, v := range s.nodes[:2] {
				s.start(v)
				v, answered := v, v.node.answered
				v.node.answered = func(req *Request, resp *Response) {
					answered(req, resp)
					if req.Config != s.boot.ID || resp.Status != StatusOK {
						return
					}
					for i, op := range req.Ops {
						if op.Kind == OpAccept && resp.Results[i].OK {
							votes = append(votes, fmt.Sprintf("t=%v: %s accepted %q from %s in configuration 1", s.now, v.id, op.Key, req.From))
						}
					}
				}
			}
		})
		// n5 never heard of the change, and cannot reach n2 to hear of
		// it: it asks n0 and n1 for a key.
		liveAt := crashAt + cfg.quarantine()
		s.at(liveAt+200*time.Millisecond, func() {
			s.cut[[2]int{5, 2}], s.cut[[2]int{2, 5}] = true, true
			c.acquire("k1", true, time.Second)
			s.flush(c.n)
		})
	}
	s := newSim(cfg)
	s.run()
	return s, votes
}

// A configuration write carries the highest epoch the voters that answered
// its prepare reported (raiseConfigFloor). Soak seed 816052
// with 3 voters: k2's grant of epoch E lived only at n1 and n2, which
// restarted together (n2 from its disk, its epoch mark above E) while the
// change removing n1 was pending; the next change left n4 the only voter,
// and n4, which had never heard of E, granted it again. With the floors,
// the settling write of the first change carries n2's mark into the
// configuration every later one copies. The run is the soak's, replayed:
// with the rule broken (no floors, and a write that finds its own
// configuration with another floor taken for someone else's, as before)
// it must break I2 or I3, and with the rule nothing. The seed's path
// changes with either half of the rule, so the run shows the rule as a
// whole; the floors' own effect is that every configuration after the
// restart carries n2's mark. (Random runs reach it about once in 50,000.)
// The seed was found while copies taken in a catch-up were reported as
// votes, and while voters refused a write-back of a lease longer than their
// MaxTTL; since neither holds (Result.Copy; design.md R37) its path
// differs, so both runs keep those rules broken (copies-vote,
// refuse-long-write-backs): with them alone the run breaks nothing. They
// also keep a new disk told "never voted" by a voter that accepted
// nothing, promises or not (fresh-ignores-promises): the founding voters'
// start takes another path with design.md R55 as it is.
func TestCheckerCatchesConfigWithoutFloors(t *testing.T) {
	replayCatchesOn(t, 816052, 3, "copies-vote+refuse-long-write-backs+fresh-ignores-promises", "config-without-floors", "I2", "I3")
}
