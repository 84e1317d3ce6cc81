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
	skipUnderRace(t)
	t.Parallel()
	runs := 0
	for seed := int64(1); seed <= 1000; seed++ {
		for _, voters := range []int{3, 5, 7} {
			cfg := defaultSimConfig(seed, voters)
			if !cfg.Wipes {
				continue
			}
			runs++
			cfg.Bug = "trust-own-empty-disk"
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
	t.Fatalf("trust-own-empty-disk broke nothing in the family's %d runs of seeds 1-1000", runs)
}
