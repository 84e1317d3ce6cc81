package quorum

import (
	"testing"
	"time"
)

// A voter on a new, empty data directory under a name that voted
// (design.md R54, R55): a Fresh answer from such a voter does not count as
// one from a voter restarted from its disk. The scripts
// testdata/scenarios/wiped_disk*.txt show that its empty disk is no
// evidence that it never voted (R55), and new_disk_vote_saved*.txt that,
// once it recovered as a voter that forgot, its disk says it voted (R56).

// A voter restarted from its disk may go live on the word of a majority
// restarted from disks (design.md R54); a voter that answers Fresh (its
// disk holds no vote) does not count among them: it may be a new disk under
// a name that voted, which went live with no registers.
//
// The run breaks R55 (trust-own-empty-disk: a new disk counts itself as
// never having voted) to reach such a voter:
//
//	1.1s  n0 cut off (it has never voted); n3 takes and frees k0 at E
//	      through {n1 n2}.
//	1.8s  n1's disk is replaced by an empty one and n1 restarts, cut off
//	      from n2 (and from n3). n0 answers its probe Fresh: n1 goes live
//	      at once, its new disk saying it never voted. Wall clocks of new
//	      lives are an hour back from now on.
//	      n3 restarts and takes and frees k1 through {n0 n2}: n0 has voted
//	      now (its epoch mark is from k1's epoch, an hour back, below E).
//	      n0 restarts from its disk, cut off from n2: quarantine, then
//	      catch-up; n1 answers Fresh.
//	      n0's client takes k0.
//
// Were n1's Fresh answer counted as a voter restarted with n0 (two of
// three), n0 would go live with no registers and its client take k0 through
// {n0 n1}, which know nothing of it, at n0's epoch mark plus one: below E
// (I2). n0 waits for n2's word instead, and nothing is granted below E.
func TestFreshAnswerDoesNotCountAsARestartedVoter(t *testing.T) {
	cfg := onDisks("trust-own-empty-disk", 3, 1, 1, 2, 10*time.Second, 9*time.Second)
	var (
		e, e1, token, n0Mark   uint64
		n1LiveAt, n0LiveAt     time.Duration
		n1Voted, n1Amnesiac    bool
		n0Voted, n1FreshAtLive bool
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n1, n3 := n[0], n[1], n[3]
		s.at(1100*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) {
					t.Fatalf("%s does not vote at 1.1s", v.id)
				}
			}
			isolate(s, 0, true)
			takeAndRelease(n3, "k0", 50*time.Millisecond)
		})
		var afterProbe, afterK1, afterRestart func()
		s.at(1800*time.Millisecond, func() {
			e = s.check.maxToken["k0"]
			if e == 0 || n3.clients[0].state != cIdle || s.stats.Releases != 1 {
				t.Fatalf("k0 was not granted and freed by 1.8s (token %d)", e)
			}
			if n0.disk.saved == nil || n0.disk.saved.Voted {
				t.Fatalf("n0 voted: the scenario shows nothing")
			}
			isolate(s, 0, false)
			cutBoth(s, 1, 2, true)
			cutBoth(s, 1, 3, true)
			wallClocksBack(s, time.Hour)
			s.crash(n1)
			n1.disk = &simDisk{} // its disk is lost; a new, empty one
			s.start(n1)
			s.after(time.Millisecond, func() {
				whenLive(n1, func() {
					n1LiveAt = s.now
					n1Voted = n1.disk.saved != nil && n1.disk.saved.Voted
					n1Amnesiac = n1.node.acc.amnesiac
					afterProbe()
				})
			})
		})
		afterProbe = func() {
			s.crash(n3)
			s.start(n3) // its wall clock an hour back
			takeAndRelease(n3, "k1", 50*time.Millisecond)
			s.after(800*time.Millisecond, afterK1)
		}
		afterK1 = func() {
			e1 = s.check.maxToken["k1"]
			if e1 == 0 || n3.clients[0].state != cIdle {
				t.Fatalf("k1 was not granted and freed (token %d)", e1)
			}
			n0Voted = n0.disk.saved.Voted
			n0Mark = n0.disk.saved.Reserved
			if r := n1.node.acc.regs["k1"]; r != nil && !r.accepted.IsZero() {
				t.Fatalf("n1 accepted k1: the scenario shows nothing")
			}
			s.crash(n0)
			cutBoth(s, 0, 2, true)
			s.start(n0)
			s.after(time.Millisecond, func() {
				whenLive(n0, func() {
					n0LiveAt = s.now
					n1FreshAtLive = n1.disk.saved == nil || !n1.disk.saved.Voted
					afterRestart()
				})
			})
		}
		afterRestart = func() {
			q := n0.clients[0]
			q.holdTime = time.Hour
			q.acquire("k0", true, time.Second)
			s.flush(n0)
			s.after(time.Second, func() {
				if q.grant != nil {
					token = q.grant.token
				}
			})
		}
	}
	s := newSim(cfg)
	s.run()
	t.Logf("E=%d; n1 (new disk) live at %v (amnesiac %v, disk says voted %v); k1 at %d, n0 voted %v, mark %d; n0 restarted, live at %v (n1 still Fresh %v); n0's token for k0 %d",
		e, n1LiveAt, n1Amnesiac, n1Voted, e1, n0Voted, n0Mark, n0LiveAt, n1FreshAtLive, token)
	switch {
	case n1Amnesiac || n1Voted:
		t.Errorf("n1 recovered as an amnesiac: the probe did not go live on n0's answer")
	case !n0Voted || n0Mark >= e:
		t.Errorf("n0's mark %d not below E %d: the scenario shows nothing", n0Mark, e)
	case len(s.fail) > 0:
		t.Errorf("%s", firstLine(s.fail[0]))
	case token != 0 && token <= e:
		t.Errorf("n0's client was granted k0 at %d, not above %d", token, e)
	}
}
