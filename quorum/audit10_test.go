package quorum

import (
	"fmt"
	"testing"
	"time"
)

// Audit 10: attacks on 56fcc35 (a voter's quiet lives let a partner count
// its later life: Durable.Quiet, CatchUpRequest.Quiet). The claim under
// attack: when the life a live voter counted as restarted with it
// (restartedWith) is among the asker's quiet lives, no life of the asker
// voted since, so the asker is in the counted life's position and the
// LostWith argument holds unchanged.

// audit10Counted is the incarnation a's acceptor counted id's life as
// restarted with it (0: none, or a is down).
func audit10Counted(a *simNode, id NodeID) uint64 {
	if !a.up || a.node == nil || a.node.acc == nil {
		return 0
	}
	return a.node.acc.restartedWith[id]
}

// Attack 1: the counted life was counted by the full-restart path
// (noteRestartedWith(true)), not by restartedMajority. The quiet rule's
// argument was made for the second; the first counts voters that are
// recovering, durable or not, and goes live floor-only.
//
// Three voters A B C = n0 n1 n2 with disks, all voted. At 1.5s all three
// crash; A comes back on a new, empty disk (it probes, hears that others
// voted, and recovers as one that forgot), B and C from theirs. B and C
// cannot hear each other, so neither concludes anything from the other:
// each hears only A, which answers "recovering, forgot" (no disk's word).
// A hears both say "recovering, durable" and, not restored itself,
// concludes a full restart: restartedWith {B: B1, C: C1}, floor-only. As
// A goes live, C's machine goes (down until the heal at 9s) and B
// restarts before it votes (B2, quiet lives [B1 B2]). B2 names B1 in its
// request and A answers LostWith: B2 goes live on A's word
// (restartedMajority, two of three). X then takes and releases k0..k3 at
// A and B2, and Y reads them; C returns at the heal and catches up.
//
// Result: no checker fires, and B2 votes; with ignore-quiet (the rule
// before 56fcc35) B2 waits for C until the heal (the stall the change
// ends, in its full-restart flavour). The argument holds: A counted B1
// because B1 said so from its disk, and no life of B voted since; B2's
// registers are as gone as B1's, and A's values since its start were
// chosen without B.
func TestAudit10QuietLifeCountedInAFullRestart(t *testing.T) {
	for _, bug := range []string{"", "ignore-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { audit10FullRestart(t, bug) })
	}
}

func audit10FullRestart(t *testing.T, bug string) {
	cfg := faultFree(1, 3, 2, 4, 4)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 12*time.Second, 9*time.Second
	var (
		liveA, bAgain, liveB2, took, read time.Duration
		counted, b1, b2                   uint64
		fullRestart                       bool
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, X, Y := n[0], n[1], n[2], n[3], n[4]
		s.at(1000*time.Millisecond, func() {
			for i, h := range Y.clients {
				h.holdTime = 20 * time.Millisecond
				h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
			}
			s.flush(Y)
		})
		s.at(1300*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !v.disk.saved.Voted {
					t.Fatalf("%s has not voted at 1.3s", v.id)
				}
			}
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.crash(C)
			cutBoth(s, B.idx, C.idx, true)
			A.disk = nil // a new, empty disk
			s.start(A)
			s.start(B)
			s.start(C)
			b1 = B.inc
		})
		var poll func()
		poll = func() {
			switch {
			case liveA == 0 && liveAcceptor(A):
				liveA = s.now
				fullRestart = A.node.acc.FloorOnly() && A.node.acc.amnesiac
				counted = audit10Counted(A, B.id)
				if liveAcceptor(B) {
					return // B1 voted first: the run does not reach its state
				}
				s.crash(C) // gone until the heal
				bAgain = s.now
				s.crash(B)
				s.start(B)
				b2 = B.inc
			case liveA != 0 && liveB2 == 0 && liveAcceptor(B):
				liveB2 = s.now
				for i, h := range X.clients {
					h.holdTime = 20 * time.Millisecond
					h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
				}
				s.flush(X)
			case liveB2 != 0 && took == 0:
				done := 0
				for _, h := range X.clients {
					if h.state == cIdle {
						done++
					}
				}
				if done == len(X.clients) && s.now > liveB2+100*time.Millisecond {
					took = s.now
					read = s.now
					for i, h := range Y.clients {
						h.read(fmt.Sprintf("k%d", i))
					}
					s.flush(Y)
					return
				}
			}
			if s.now < 8*time.Second {
				s.after(100*time.Microsecond, poll)
			}
		}
		s.at(1500*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("A votes from %v (full restart, floor-only, forgot: %v), counting B's life %d (B1 = %d); B restarted at %v as %d; B2 votes from %v; X's takes done at %v, reads at %v",
		liveA, fullRestart, counted, b1, bAgain, b2, liveB2, took, read)
	t.Logf("grants %d, reads %d, no quorum %d", s.stats.Grants, s.stats.Reads, s.stats.NoQuorum)
	switch {
	case liveA == 0 || bAgain == 0:
		t.Fatalf("the run does not reach its state")
	case !fullRestart || counted != b1:
		t.Fatalf("A did not go live by a full restart counting B1")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug == "" && liveB2 == 0:
		t.Errorf("B2 never voted on A's word before the heal")
	case bug != "" && liveB2 != 0 && liveB2 < 9*time.Second:
		t.Errorf("with %s, B2 voted at %v: the test no longer shows the stall", bug, liveB2)
	}
}
