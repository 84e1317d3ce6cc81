package quorum

import (
	"strings"
	"testing"
	"time"
)

// A rolling restart that lowers MaxTTL, on voters without data directories,
// and a majority of them losing their state together before a lease of the
// old MaxTTL ends. The voters' horizons (CatchUpResponse.Horizon) cannot
// tell the restarted voters of that lease: every voter that accepted it is
// one of them, and the voter that kept its state runs the new MaxTTL
// already, so it refused the lease. They used to quarantine for the new
// MaxTTL alone and grant the key while the holder's deadline ran (I1). Two
// things now carry the lease's length to them: the refusing voter keeps it
// as its horizon (hearLease), and a quarantined voter keeps it from the
// holder's renewals that it refuses.
//
// Three voters n0, n1, n2 and a node n3 that does not vote, all at a TTL
// and MaxTTL of 1 s; the roll to 250 ms starts at 2 s (simConfig.Retime)
// with n1. At 4.5 s (after n1's horizon of 1 s, heard in its catch-up, has
// lapsed) n3 takes k0 for 1 s on n0 and n2; n1 refuses it, above its
// MaxTTL. n0 and n2 crash at 4.6 s and come back at 4.65 s at 250 ms. n1's
// client then tries k0 every 50 ms; the checkers must see no grant while
// n3's deadline runs.
func TestScenarioLoweredTTLAcrossAMajorityLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refusalLost cuts n1 off from n3 while n3 takes k0: n1 never
		// sees the accept it would refuse, and only n3's renewals reach
		// the restarted voters.
		refusalLost bool
	}{{"refused", false}, {"refusal lost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			caught, refused := 0, 0
			for seed := int64(1); seed <= 8; seed++ {
				s, heard := loweredTTLAcrossMajorityLoss(t, seed, "", tc.refusalLost)
				if len(s.fail) > 0 {
					t.Fatalf("seed %d: %s", seed, failureReport(s))
				}
				if heard {
					refused++
				}
				if s, _ := loweredTTLAcrossMajorityLoss(t, seed, "deaf-to-long-leases", tc.refusalLost); len(s.fail) > 0 {
					if v := violation(s.fail[0]); !strings.HasPrefix(v, "I1:") {
						t.Fatalf("seed %d, the rule broken: the first violation is not I1: %s", seed, v)
					}
					caught++
				}
			}
			if caught == 0 {
				t.Errorf("with the rule broken (deaf-to-long-leases) no seed of 8 broke I1: the scenario no longer reaches the hole")
			}
			if !tc.refusalLost && refused == 0 {
				t.Errorf("n1 refused the lease in none of 8 seeds: the refusal is not exercised")
			}
			t.Logf("n1 refused the lease in %d of 8 seeds; the rule broken: I1 in %d of 8", refused, caught)
		})
	}
}

func loweredTTLAcrossMajorityLoss(t *testing.T, seed int64, bug string, refusalLost bool) (s *sim, heard bool) {
	s, heard, _ = loweredTTLRun(t, seed, bug, refusalLost, false)
	return s, heard
}

// lostThenCrashed is what loweredTTLRun saw when it crashed the holder's
// node as soon as it was told its lease was lost: the deadline that lease
// had, when the crash came, and when the rival was first granted the key.
type lostThenCrashed struct {
	deadline, crashed, rival time.Duration
}

func loweredTTLRun(t *testing.T, seed int64, bug string, refusalLost, crashOnLoss bool) (s *sim, heard bool, lc lostThenCrashed) {
	t.Helper()
	cfg := faultFree(seed, 3, 2, 1, 1)
	cfg.Bug = bug
	cfg.Disks, cfg.WallBack = false, false
	cfg.Retime, cfg.RetimeTTL = true, cfg.TTL/4
	cfg.HealAt = 6 * time.Second // the roll starts at a third of it
	cfg.Duration = 10 * time.Second
	cfg.Script = func(s *sim) {
		heard, lc = false, lostThenCrashed{}
		holder, rival := s.nodes[3].clients[0], s.nodes[1].clients[0]
		holder.holdTime = 5 * time.Second
		rival.holdTime = 100 * time.Millisecond
		cut := func(on bool) { s.cut[[2]int{3, 1}], s.cut[[2]int{1, 3}] = on, on }
		s.at(s.retimeAt(), func() {
			s.crash(s.nodes[1])
			s.start(s.nodes[1])
		})
		s.at(4500*time.Millisecond, func() {
			if got := s.nodes[1].ttl; got != cfg.RetimeTTL {
				t.Fatalf("n1 runs a TTL of %v, not %v", got, cfg.RetimeTTL)
			}
			if st := s.nodes[1].node.acc.State(); st != Live {
				t.Fatalf("n1 does not vote: %v", st)
			}
			if h := s.nodes[1].node.acc.Horizon(); h != cfg.RetimeTTL {
				t.Fatalf("n1 reports a horizon of %v before the grant; the scenario needs its own MaxTTL, %v", h, cfg.RetimeTTL)
			}
			cut(refusalLost)
			holder.acquire("k0", true, time.Second)
			s.flush(holder.n)
		})
		s.at(4600*time.Millisecond, func() {
			if holder.grant == nil {
				t.Fatalf("n3 was not granted k0")
			}
			cut(false)
			// What n1 will tell the restarted voters: the lease's TTL if
			// the accept reached it (only in some seeds: an accept goes
			// to the voters that promised, and n1's promise may come
			// late), never with the accept cut off or the rule broken.
			heard = s.nodes[1].node.acc.Horizon() == cfg.TTL
			if heard && (refusalLost || bug != "") {
				t.Errorf("n1 reports a horizon of %v after the grant, though it should have heard nothing of it", cfg.TTL)
			}
			s.crash(s.nodes[0])
			s.crash(s.nodes[2])
		})
		s.at(4650*time.Millisecond, func() {
			s.start(s.nodes[0])
			s.start(s.nodes[2])
		})
		if crashOnLoss {
			var g *grantRec
			for at := 4510 * time.Millisecond; at < 6*time.Second; at += time.Millisecond {
				s.at(at, func() {
					switch {
					case lc.crashed == 0 && holder.grant != nil:
						g = holder.grant
					case lc.crashed == 0 && g != nil:
						lc.deadline, lc.crashed = g.end, s.now
						s.crash(holder.n)
					}
					if lc.rival == 0 && rival.grant != nil {
						lc.rival = rival.grant.start
					}
				})
			}
		}
		for i := range 12 {
			s.at(4950*time.Millisecond+time.Duration(i)*50*time.Millisecond, func() {
				if rival.state == cIdle {
					rival.acquire("k0", false, 40*time.Millisecond)
					s.flush(rival.n)
				}
			})
		}
	}
	s = newSim(cfg)
	s.run()
	return s, heard, lc
}

// A holder told that its lease is lost acts no more once its node crashes,
// as one that still holds its lease: the checker ends the lost grant's
// interval at the crash, not at its deadline. The lowered-TTL scenario with
// the rule broken (deaf-to-long-leases) grants the key to a rival while the
// lost lease's deadline runs; with the holder's node crashed as soon as it
// is told of the loss, a grant after the crash breaks nothing. (Left alive,
// the same holder's interval runs to its deadline, and the rival's grant
// breaks I1: TestScenarioLoweredTTLAcrossAMajorityLoss.)
func TestCheckerEndsALostGrantAtItsHoldersCrash(t *testing.T) {
	shown := 0
	for seed := int64(1); seed <= 8; seed++ {
		s, _, lc := loweredTTLRun(t, seed, "deaf-to-long-leases", false, true)
		if lc.crashed == 0 {
			t.Fatalf("seed %d: the holder was never told it lost its lease", seed)
		}
		if len(s.fail) > 0 {
			t.Errorf("seed %d: the holder's node crashed at %v, once told its lease (deadline %v) was lost, yet: %s",
				seed, lc.crashed, lc.deadline, s.fail[0])
			continue
		}
		if lc.rival != 0 && lc.rival >= lc.crashed && lc.rival < lc.deadline {
			shown++
		}
	}
	if shown == 0 {
		t.Errorf("in no seed of 8 was the rival granted between the holder's crash and its lost lease's deadline")
	}
	t.Logf("%d of 8 seeds granted the rival between the crash and the lost lease's deadline", shown)
}

// A voter's quarantine covers the longest lease it may have accepted, not
// only the MaxTTL of its new life, and a held value it catches up is timed
// (design.md R36). Here a lowers MaxTTL from 1s to 200ms across a restart;
// p2, cut off from b (the other voter timing p1's lease), must not be
// granted the key while p1 holds it, and is granted it once p1's lease
// ended.
func TestRestartWithLowerMaxTTLKeepsExclusion(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	c.cut["c"] = true // p1's grant lands on a and b
	g := c.mustGrant("p1", "k")
	c.cut["c"] = false
	p1 := c.node("p1")
	grantedAt := c.now
	deadline := grantedAt + (g.Deadline - p1.clock.Now()) // p1's deadline in real time

	short := func(cfg *AcceptorConfig) { cfg.MaxTTL, cfg.Quarantine = 200*time.Millisecond, 200*time.Millisecond }
	c.restartAcceptor("a", short)
	c.node("p1").prop = nil                // p1 neither renews nor releases: its lease runs to its deadline
	c.cutPair[[2]NodeID{"p2", "b"}] = true // p2 reaches only a and c
	p2 := c.node("p2")
	// p2 runs the new settings too: 200 ms leases.
	o := AcquireOptions{TTL: 200 * time.Millisecond, HolderTTL: 180 * time.Millisecond,
		RenewEvery: 60 * time.Millisecond, Notice: 20 * time.Millisecond, Wait: true,
		Deadline: p2.clock.Now() + 3*time.Second}
	op, err := p2.prop.Acquire("k", o)
	if err != nil {
		t.Fatal(err)
	}
	for c.now < grantedAt+3*time.Second {
		if res, ok := c.result("p2", op); ok {
			if res.Outcome == Granted && c.now < deadline {
				t.Fatalf("p2 granted %q at %v while p1 holds it until %v", "k", c.now, deadline)
			}
			break
		}
		c.advance(10 * time.Millisecond)
	}
	if res, ok := c.result("p2", op); !ok || res.Outcome != Granted {
		t.Errorf("p2 never granted the key after p1's lease ended: %v %v", res.Outcome, ok)
	}
}
