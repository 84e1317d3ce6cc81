package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Audit 8, finding 2 (a stall): the word a voter goes live on is recorded
// by incarnation (restartedWith[id] = inc, CatchUpResponse.LostWith), so a
// voter that went live on a partner's word could not count the partner's
// later lives, though when none of them voted their registers are as gone
// as the life it counted, and nothing was chosen with them since.
//
// README, "Data directory": "every node restarts, one voter's machine
// gone — votes again once a majority is up and quarantined".
//
// Three voters A B C = n0 n1 n2 with disks, all voted. C's machine is
// gone (crashed at 1.3s, never back before the heal at 9s). A and B
// restart from their disks (A at 1.5s, B at 1.6s). A's catch-up hears B,
// still quarantined, say "recovering, Durable": restartedMajority (A and
// B, two of three) and A votes, noting restartedWith {B: B's
// incarnation}. B restarts once more before its quarantine ends (a crash
// loop, an impatient operator, a second power blip). B's new life asks A,
// which is live. It used to answer OK without LostWith (another
// incarnation), so B counted A as a voter that caught up: not lost, not
// recovering. B's ways to go live were then closed (restartedMajority: B
// alone lost; enough: C never answers) and A alone is no majority: no
// lock and no voter change until C's machine came back. In the run "once"
// (B restarts once) both vote again.
//
// Saying LostWith to every later life is unsafe (seed 330700: a later
// life came after the one counted had voted; fault lost-with-later-lives).
// The fix: each life that starts from a disk after a vote saves its
// incarnation there (Durable.Quiet) before it says anything, and going
// live empties the list before the first vote. B's new life sends the
// list (CatchUpRequest.Quiet); A answers LostWith if it holds the life it
// counted, for then no life of B voted since. Fault ignore-quiet brings
// the stall back.
func TestPartnerRestartedAgainGetsTheLiveVotersWord(t *testing.T) {
	for _, c := range []struct{ restarts, bug string }{{"once", ""}, {"twice", ""}, {"twice", "ignore-quiet"}} {
		t.Run(c.restarts+"/"+c.bug, func(t *testing.T) { runPartnerRestartedAgain(t, c.restarts, c.bug) })
	}
}

func runPartnerRestartedAgain(t *testing.T, c, bug string) {
	cfg := faultFree(1, 3, 2, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 10*time.Second, 9*time.Second
	var (
		liveA, liveB time.Duration
		bAgain       time.Duration
		at8          []string
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, n4 := n[0], n[1], n[2], n[4]
		s.at(1000*time.Millisecond, func() {
			h := n4.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k1", true, time.Second)
			s.flush(n4)
		})
		s.at(1300*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.3s", v.id)
				}
			}
			s.crash(C) // gone until the heal
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.start(A)
		})
		s.at(1600*time.Millisecond, func() { s.start(B) })
		var poll func()
		poll = func() {
			if liveA == 0 && liveAcceptor(A) {
				liveA = s.now
				if c == "twice" && !liveAcceptor(B) {
					bAgain = s.now
					s.crash(B)
					s.start(B)
				}
			}
			if liveB == 0 && liveAcceptor(B) {
				liveB = s.now
			}
			if s.now < 8*time.Second {
				s.after(100*time.Microsecond, poll)
			}
		}
		s.at(1500*time.Millisecond, poll)
		s.at(8*time.Second, func() {
			at8 = append(at8, describeAcceptor(A), describeAcceptor(B))
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("%s: A votes from %v; B restarted again at %v; B votes from %v", c, liveA, bAgain, liveB)
	t.Logf("at 8s: %v", at8)
	switch {
	case liveA == 0:
		t.Fatalf("A never voted again: the run does not reach its state")
	case c == "twice" && bAgain == 0:
		t.Fatalf("B voted before A: the run does not reach its state")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug != "" && liveB != 0:
		t.Errorf("with %s, B voted again at %v: the test no longer shows the stall the fix ends", bug, liveB)
	case bug == "" && liveB == 0:
		t.Errorf("B, restarted from its disk with A (C's machine gone), never votes again: A alone is no majority, and the mesh stalls")
	}
}

// The rule the fix rests on: a life that goes live empties its disk's
// quiet lives before it votes. Kept (fault keep-quiet), a later life names
// one that voted, and the word it gets passes a single restart for a
// majority's, as lost-with-later-lives did.
//
// Three voters A B C = n0 n1 n2 with disks, X = n3 and Y = n4. Y takes
// and releases k0..k7 at 1s, at every voter. C is cut off at 1.3s (it runs on, holding what it held then). A and B restart
// (1.5s, 1.6s); A goes live on B's word, B on A's. X then takes and
// releases k0..k7 at A and B (C hears nothing of it). B restarts again:
// its new life names the one that voted as quiet, and A answers LostWith
// with its first bucket of registers; the link between them then fails,
// and B goes live on A's word without the rest of A's registers. Then A is cut off and C comes back: Y reads k0..k7 at B
// and C, and a read finds a register older than X's release (I8). With
// the rule kept, B's new life waits for C's catch-up and A's, and the
// reads wait for the heal.
func TestQuietLivesEndWhenALifeVotes(t *testing.T) {
	for _, bug := range []string{"", "keep-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { runQuietLivesEnd(t, bug) })
	}
}

func runQuietLivesEnd(t *testing.T, bug string) {
	cfg := faultFree(1, 3, 2, 8, 8)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 10*time.Second, 9*time.Second
	var liveAB, bAgain, liveB2, reads time.Duration
	taken, cutAB := 0, false
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, X, Y := n[0], n[1], n[2], n[3], n[4]
		s.at(1000*time.Millisecond, func() {
			// Every voter votes: each holds k0..k7 free at an epoch.
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
			isolate(s, C.idx, true)
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.start(A)
		})
		s.at(1600*time.Millisecond, func() { s.start(B) })
		var poll func()
		poll = func() {
			switch {
			case liveAB == 0 && liveAcceptor(A) && liveAcceptor(B):
				liveAB = s.now
				for i, h := range X.clients {
					h.holdTime = 20 * time.Millisecond
					h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
				}
				s.flush(X)
			case liveAB != 0 && bAgain == 0:
				done := 0
				for _, h := range X.clients {
					if h.state == cIdle {
						done++
					}
				}
				if done == len(X.clients) && s.now > liveAB+100*time.Millisecond {
					taken = done
					bAgain = s.now
					s.crash(B)
					s.start(B)
				}
			case bAgain != 0 && !cutAB && B.up && B.node.acc != nil && B.node.acc.catchUp != nil &&
				slices.ContainsFunc(B.node.acc.catchUp.peers, func(p *peerCatchUp) bool { return p.id == A.id && p.next > 0 }):
				// B's new life merged A's first bucket: A's later answers
				// are lost (as the network may lose them).
				cutAB = true
				cutBoth(s, A.idx, B.idx, true)
			case bAgain != 0 && liveB2 == 0 && (liveAcceptor(B) || s.now > bAgain+4*time.Second):
				if liveAcceptor(B) {
					liveB2 = s.now
				}
				reads = s.now
				isolate(s, C.idx, false)
				isolate(s, A.idx, true)
				for i, h := range Y.clients {
					h.read(fmt.Sprintf("k%d", i))
				}
				s.flush(Y)
				return
			}
			if s.now < 8*time.Second {
				s.after(time.Millisecond, poll)
			}
		}
		s.at(1500*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("A and B vote from %v; X's 8 takes done, B restarted at %v; B's new life votes from %v; reads at B and C from %v",
		liveAB, bAgain, liveB2, reads)
	switch {
	case liveAB == 0 || bAgain == 0 || taken != 8 || reads == 0:
		t.Fatalf("the run does not reach its state")
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug == "" && liveB2 != 0:
		t.Errorf("B's new life voted at %v on A's word, though its earlier life voted", liveB2)
	case bug != "" && len(s.fail) == 0:
		t.Errorf("with %s no checker caught the read at B and C", bug)
	case bug != "":
		t.Logf("caught: %s", firstLine(s.fail[0]))
	}
}
