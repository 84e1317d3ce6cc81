package quorum

import (
	"testing"
	"time"
)

// Audit of fa2035c ("a recovered new disk says it voted; a fresh peer
// counts"): a scripted run, which showed the second half of that commit
// unsafe (it is undone).

// A voter whose disk was lost restarts on a new, empty one and probes. The
// probe counts the voter itself as fresh (maybeGoLive: fresh := 1), although
// a new disk says nothing of its earlier life (abandonProbe says so), and
// goes live, with no quarantine and no registers, as soon as one more voter
// of three says Fresh: before the answer of the voter that would say it
// voted arrives. From then on its disk says it never voted, and it answers
// Fresh to every catch-up.
//
// fa2035c counts such an answer in restartedMajority ("a voter that says
// its disk holds no vote lost nothing"). Here:
//
//	1.1s  n0 cut off (it has never voted); n3 takes and frees k0 at E
//	      through {n1 n2}.
//	1.8s  n1 loses its disk and restarts on a new one, cut off from n2
//	      (and from n3). n0 answers its probe Fresh: n1 goes live at once,
//	      its new disk saying it never voted. Wall clocks of new lives are
//	      an hour back from now on.
//	      n3 restarts and takes and frees k1 through {n0 n2}: n0 has voted
//	      now (its epoch mark is from k1's epoch, an hour back, below E).
//	      n0 restarts from its disk, cut off from n2: quarantine, then
//	      catch-up; n1 answers Fresh, n0 counts it as restarted with it
//	      (restartedMajority: two of three) and goes live with no
//	      registers.
//	      n0's client takes k0 through {n0 n1}: neither knows k0, and the
//	      token is n0's epoch mark plus one, below E (I2).
//
// Before fa2035c, and again since, n0 waits for n2 here (restartedMajority
// counts only voters that said they were recovering), and this script
// grants nothing below E. The root is the probe's self-count: a new disk
// under a name that voted breaks the README's one rule about data
// directories, and the probe catches it only when a voter that voted
// answers first (n1's own client could take k0 below E through {n0 n1}
// here too: the auditor's TestAudit3NewDiskProbeCountsItself, not kept,
// as the rule is the documented defence). A Fresh answer is no proof that
// the voter lost nothing.
//
// A new disk no longer counts itself (neverVotedMajorities): n1 would wait
// for n2's word. The run breaks that rule (trust-own-empty-disk) to reach
// the state the second defence, restartedMajority's, is about.
func TestFreshAnswerDoesNotCountAsARestartedVoter(t *testing.T) {
	cfg := faultFree(1, 3, 1, 1, 2)
	cfg.Bug = "trust-own-empty-disk"
	cfg.Disks, cfg.WallBack = true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 10*time.Second, 9*time.Second
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
			h := n3.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n3)
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
			s.wallBack = int64(time.Hour / time.Microsecond)
			s.crash(n1)
			n1.disk = &simDisk{} // its disk is lost; a new, empty one
			s.start(n1)
			var poll func()
			poll = func() {
				if !liveAcceptor(n1) {
					s.after(time.Millisecond, poll)
					return
				}
				n1LiveAt = s.now
				n1Voted = n1.disk.saved != nil && n1.disk.saved.Voted
				n1Amnesiac = n1.node.acc.amnesiac
				afterProbe()
			}
			s.after(time.Millisecond, poll)
		})
		afterProbe = func() {
			s.crash(n3)
			s.start(n3) // its wall clock an hour back
			h := n3.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k1", true, time.Second)
			s.flush(n3)
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
			var poll func()
			poll = func() {
				if !liveAcceptor(n0) {
					s.after(time.Millisecond, poll)
					return
				}
				n0LiveAt = s.now
				n1FreshAtLive = n1.disk.saved == nil || !n1.disk.saved.Voted
				afterRestart()
			}
			s.after(time.Millisecond, poll)
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
