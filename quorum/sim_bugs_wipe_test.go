package quorum

import (
	"strings"
	"testing"
)

// A voter on a wiped directory counting its own emptiness as a vote of
// "never voted" (trust-own-empty-disk), caught by the seeds of
// TestSimulation that run the wipe family (simConfig.Wipes, one seed in
// fourteen): the wiped voter hears "never voted" from the deaf voters
// before the voters that voted answer, goes live with no quarantine and no
// registers, and a majority with the deaf voters grants a key whose lease
// runs (I1), or a token again (I2), or a read sees the register go back
// (I8). Without the rule broken the family's runs are TestSimulation's.
func TestCheckerCatchesTrustedEmptyDiskAtRandom(t *testing.T) {
	wipeFamilyCatches(t, "trust-own-empty-disk", 1000)
}

// A voter that promised a ballot, its accept still on the way, telling a
// wiped voter's new life that it never voted (fresh-ignores-promises):
// caught by the family's early wipes (wipes.hold), in which the first
// wipe comes at the wiped voter's first vote for another node's ballot
// while the accepts to the other voters that vote are slow. The new life
// goes live at once, the late accept completes the grant with the wiped
// life's, and a majority with the deaf voters grants the key again (I1).
// Thin: 1 run in 832 of seeds 1-8000 (seed 320 with 3 voters); none
// without the rule broken.
func TestCheckerCatchesFreshAnswerOfAPromisedVoterAtRandom(t *testing.T) {
	wipeFamilyCatches(t, "fresh-ignores-promises", 1000)
}

// wipeFamilyCatches runs the wipe family's seeds of TestSimulation, up to
// last, with bug, until one breaks I1, I2 or I8.
func wipeFamilyCatches(t *testing.T, bug string, last int64) {
	skipUnderRace(t)
	t.Parallel()
	runs := 0
	for seed := int64(1); seed <= last; seed++ {
		for _, voters := range []int{3, 5, 7} {
			cfg := defaultSimConfig(seed, voters)
			if !cfg.Wipes {
				continue
			}
			runs++
			cfg.Bug = bug
			s := newSim(cfg)
			s.run()
			if len(s.fail) == 0 {
				continue
			}
			if v := violation(s.fail[0]); !strings.HasPrefix(v, "I1") && !strings.HasPrefix(v, "I2") && !strings.HasPrefix(v, "I8") {
				t.Fatalf("seed %d, %d voters: the rule broken first broke another rule: %s", seed, voters, firstLine(s.fail[0]))
			}
			t.Logf("caught at seed %d, %d voters, run %d of the family: %s", seed, voters, runs, firstLine(s.fail[0]))
			return
		}
	}
	t.Fatalf("%s broke nothing in the family's %d runs of seeds 1-%d", bug, runs, last)
}
