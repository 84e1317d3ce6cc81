package quorum

import (
	"strings"
	"testing"
	"time"
)

// A voter restarted on a wiped data directory under its name must not take
// its own empty directory for proof that it never voted.
//
// Voters n0 n1 n2 with data directories, started with the operator's word
// that the mesh is new (NewMesh); n2 never hears from the proposers, so it
// never votes. n0 and n1 grant k0 to n3. n0's directory is then replaced
// by an empty one and n0 restarts under its name; n1 is slow (30 ms a
// message for 150 ms) while n2 answers at once that it never voted. On its
// own word and n2's, {n0, n2} would look like a majority that never voted:
// n0 would vote at once, with nothing of k0, and n4 would be granted k0
// through n0 and n2 while n3's lease runs (I1). n0 must wait for n1, hear
// that it voted, and recover as a voter that forgot (quarantine, catch-up).
func TestScenarioWipedDiskVotesOnlyOnOthersWord(t *testing.T) {
	caught := 0
	for seed := int64(1); seed <= 20; seed++ {
		if s := wipedDiskAmongNeverVoted(t, seed, ""); len(s.fail) > 0 {
			t.Fatalf("seed %d: %s", seed, failureReport(s))
		}
		s := wipedDiskAmongNeverVoted(t, seed, "trust-own-empty-disk")
		if len(s.fail) > 0 {
			if v := violation(s.fail[0]); !strings.HasPrefix(v, "I1:") {
				t.Fatalf("seed %d, the rule broken: the first violation is not I1: %s", seed, v)
			}
			caught++
		}
	}
	if caught == 0 {
		t.Fatalf("with the rule broken (trust-own-empty-disk) no seed of 20 broke I1: the scenario no longer reaches the hole")
	}
	t.Logf("the rule broken: I1 in %d of 20 seeds", caught)
}

func wipedDiskAmongNeverVoted(t *testing.T, seed int64, bug string) *sim {
	t.Helper()
	cfg := faultFree(seed, 3, 2, 1, 1)
	cfg.Bug = bug
	cfg.Disks, cfg.NewMesh, cfg.WallBack, cfg.DisklessVoter = true, true, false, false
	cfg.Duration, cfg.HealAt = 8*time.Second, 6*time.Second
	var slowUntil time.Duration
	cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
		if s.now < slowUntil && (from.idx == 1 || to.idx == 1) {
			return 30 * time.Millisecond, true
		}
		return 0, false
	}
	cfg.Script = func(s *sim) {
		n0, n1, n2, n3, n4 := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[4]
		cutBoth(s, 2, 3, true)
		cutBoth(s, 2, 4, true)
		holder, rival := n3.clients[0], n4.clients[0]
		holder.holdTime = time.Hour
		rival.holdTime = 100 * time.Millisecond
		var grant func()
		grant = func() {
			for _, v := range []*simNode{n0, n1, n2} {
				if !liveAcceptor(v) {
					if s.now > time.Second {
						t.Fatalf("seed %d: %s does not vote at %v", seed, v.id, s.now)
					}
					s.after(10*time.Millisecond, grant)
					return
				}
			}
			holder.acquire("k0", true, time.Second)
			s.flush(n3)
		}
		s.at(100*time.Millisecond, grant)
		s.at(1500*time.Millisecond, func() {
			if holder.grant == nil {
				t.Fatalf("seed %d: n3 was not granted k0 by 1.5s", seed)
			}
			if d := n2.disk.saved; d != nil && d.Voted {
				t.Fatalf("seed %d: n2 voted: the scenario needs a voter that never did", seed)
			}
			s.crash(n0)
			n0.disk = &simDisk{} // wiped under its name
			slowUntil = s.now + 150*time.Millisecond
			cutBoth(s, 2, 4, false)
			s.start(n0)
			rival.acquire("k0", true, 2*time.Second)
			s.flush(n4)
		})
		s.at(1700*time.Millisecond, func() {
			if bug == "" && liveAcceptor(n0) {
				t.Errorf("seed %d: n0 votes 200ms after its restart on an empty directory", seed)
			}
		})
	}
	s := newSim(cfg)
	s.run()
	return s
}
