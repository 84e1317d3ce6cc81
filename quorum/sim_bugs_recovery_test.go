package quorum

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Rules of recovery the random runs do not break often enough to catch,
// each in a scenario that needs it: the scenario passes with the rule and
// breaks an invariant without it.

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
