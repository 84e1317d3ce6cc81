package quorum

import (
	"testing"
	"time"
)

// An observer that missed a key's release and then meets the voters
// having forgotten the key. n3 takes k0 and releases it; n4 observes k0,
// and every link between n4 and the voters is cut from before the release
// until after the voters forgot k0 (an owner's sweep: RegisterIdle is
// short). So n4 last saw k0 held, and from the heal on every voter
// answers its registrations with an empty register, at ballot 0. An
// observer that takes those answers for older than the grant it saw
// reports k0 held, and live, for good; it must report it free within a
// few round trips of the heal.
//
// With the fault observe-forgotten-held (the rule before: an empty
// register is older than any state at a real ballot) the stale held state
// is still what n4 reports at the end.
func TestObserveForgottenKeyAfterAMissedRelease(t *testing.T) {
	const (
		observer = 4
		cutAt    = 600 * time.Millisecond
		healAt   = 1600 * time.Millisecond
	)
	for _, bug := range []string{"", "observe-forgotten-held"} {
		t.Run("fault="+bug, func(t *testing.T) {
			cfg := faultFree(1, 3, 2, 1, 1)
			cfg.Observe = 300 * time.Millisecond
			cfg.RegisterIdle = 150 * time.Millisecond
			cfg.Duration = 4 * time.Second
			cfg.Bug = bug
			var atHeal []string
			cfg.Script = func(s *sim) {
				c := s.nodes[3].clients[0]
				s.at(300*time.Millisecond, func() {
					c.holdTime = 400 * time.Millisecond // released at about 700ms
					c.acquire("k0", true, time.Second)
					s.flush(c.n)
				})
				s.at(cutAt, func() {
					for v := 0; v < 3; v++ {
						cutBoth(s, v, observer, true)
					}
				})
				s.at(healAt, func() {
					for v := 0; v < 3; v++ {
						if s.nodes[v].node.acc.regs["k0"] != nil {
							atHeal = append(atHeal, string(s.nodes[v].id)+" still holds k0")
						}
						cutBoth(s, v, observer, false)
					}
					n := s.nodes[observer]
					log := s.check.obs[obsLife{n.idx, n.inc, "k0"}]
					if log == nil || len(log.states) == 0 {
						atHeal = append(atHeal, "the observer reported nothing")
						return
					}
					if last := log.states[len(log.states)-1]; !last.Value.Held || !last.Live {
						atHeal = append(atHeal, "the observer saw the release: "+last.Value.String())
					}
				})
			}
			s := newSim(cfg)
			s.run()
			if len(s.fail) > 0 {
				t.Fatal(failureReport(s))
			}
			if len(s.check.grants["k0"]) != 1 {
				t.Fatalf("k0 granted %d times, want once", len(s.check.grants["k0"]))
			}
			if len(atHeal) > 0 {
				t.Fatalf("at the heal the scenario is not the one wanted: %v", atHeal)
			}
			n := s.nodes[observer]
			log := s.check.obs[obsLife{n.idx, n.inc, "k0"}]
			freeAt := time.Duration(-1)
			for i, st := range log.states {
				if !st.Value.Held || !st.Live {
					if freeAt < 0 {
						freeAt = log.at[i]
					}
				} else {
					freeAt = -1
				}
			}
			last := log.states[len(log.states)-1]
			t.Logf("%d states; last %v live=%v at ballot %v (reported at %v)", len(log.states), last.Value, last.Live, last.Ballot, log.at[len(log.at)-1])
			if bug != "" {
				if freeAt >= 0 {
					t.Fatalf("with %s the observer reported k0 free at %v: the scenario no longer reaches the bug", bug, freeAt)
				}
				return
			}
			if bound := healAt + 5*cfg.RoundTimeout; freeAt < 0 || freeAt > bound {
				t.Fatalf("k0 was released and forgotten, and the observer reports it free from %v (want by %v): last state %v live=%v",
					freeAt, bound, last.Value, last.Live)
			}
			t.Logf("free from %v (heal at %v)", freeAt, healAt)
		})
	}
}
