package quorum

import (
	"fmt"
	"slices"
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

// Attack 2: five voters, where a majority with a quiet voter needs a third
// lost one. The rule's guard is that going live empties the quiet lives:
// here C's counted life votes, by catching up from others, and C's next
// life must not get A's word for it. Checked both ways: with the rule,
// and with fault keep-quiet (going live leaves the list as it is).
//
// Voters A B C D E = n0..n4 with disks, X = n5 and Y = n6. Y takes and
// releases k0..k7 at every voter at 1s. At 1.5s A, B and C crash and come
// back from their disks; B hears A alone. A counts B1 and C1 (three of
// five said "recovering, durable") and votes; C1 catches up from A, D and
// E and votes (C's quiet lives are emptied); B1, hearing A alone, waits.
// E is cut off, and X takes and releases k0..k7 at A, C1 and D. C
// restarts (C2: B and C not voting, no majority lost), now hearing A, B
// and E but not D; B1 hears C2 say "recovering, durable" and goes live on
// A's word and C2's (three of five: the rule as before 56fcc35; B1
// caught up from A before X's writes). C2 merges A's first bucket, and
// the link between A and C fails. Then A and D are cut off, E returns,
// and Y reads k0..k7 at B, C and E.
//
// With the rule C2 names no quiet life A counted (C1 voted), A's answer
// carries no LostWith, and C2 waits to catch up from voters that meet
// every majority: the reads wait for the heal, and nothing fires. With
// keep-quiet C2 names C1, A answers LostWith, and C2 goes live on A's
// word and B1's without X's writes: {B C E} hold none of them, and the
// reads break I8 with no majority lost — in five voters as in three
// (TestAudit9QuietLivesEndWhenALifeVotes).
func TestAudit10FiveVotersQuietLivesEndWhenALifeVotes(t *testing.T) {
	for _, bug := range []string{"", "keep-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { audit10FiveVoters(t, bug) })
	}
}

func audit10FiveVoters(t *testing.T, bug string) {
	cfg := faultFree(1, 5, 2, 8, 8)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 12*time.Second, 10*time.Second
	var (
		liveAC, cAgain, liveB1, liveC2, reads time.Duration
		cutAC                                bool
		counted                              map[NodeID]uint64
		c1, c2                               uint64
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, D, E, X, Y := n[0], n[1], n[2], n[3], n[4], n[5], n[6]
		s.at(1000*time.Millisecond, func() {
			for i, h := range Y.clients {
				h.holdTime = 20 * time.Millisecond
				h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
			}
			s.flush(Y)
		})
		s.at(1300*time.Millisecond, func() {
			for _, v := range n[:5] {
				if !v.disk.saved.Voted {
					t.Fatalf("%s has not voted at 1.3s", v.id)
				}
			}
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.crash(C)
			for _, v := range []*simNode{C, D, E} {
				cutBoth(s, B.idx, v.idx, true)
			}
			s.start(A)
			s.start(B)
			s.start(C)
			c1 = C.inc
		})
		var poll func()
		poll = func() {
			switch {
			case liveAC == 0 && liveAcceptor(A) && liveAcceptor(C):
				liveAC = s.now
				counted = map[NodeID]uint64{B.id: audit10Counted(A, B.id), C.id: audit10Counted(A, C.id)}
				if liveAcceptor(B) {
					return // the run does not reach its state
				}
				isolate(s, E.idx, true)
				for i, h := range X.clients {
					h.holdTime = 20 * time.Millisecond
					h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
				}
				s.flush(X)
			case liveAC != 0 && cAgain == 0:
				done := 0
				for _, h := range X.clients {
					if h.state == cIdle {
						done++
					}
				}
				if done == len(X.clients) && s.now > liveAC+100*time.Millisecond {
					cAgain = s.now
					s.crash(C)
					cutBoth(s, B.idx, C.idx, false)
					cutBoth(s, C.idx, D.idx, true)
					s.start(C)
					c2 = C.inc
				}
			case cAgain != 0 && !cutAC && C.up && C.node.acc != nil && C.node.acc.catchUp != nil &&
				slices.ContainsFunc(C.node.acc.catchUp.peers, func(p *peerCatchUp) bool { return p.id == A.id && p.next > 0 }):
				cutAC = true
				cutBoth(s, A.idx, C.idx, true)
			case cAgain != 0 && liveC2 == 0 && (liveAcceptor(C) || s.now > cAgain+4*time.Second):
				if liveAcceptor(C) {
					liveC2 = s.now
				}
				reads = s.now
				isolate(s, E.idx, false)
				isolate(s, A.idx, true)
				isolate(s, D.idx, true)
				for i, h := range Y.clients {
					h.read(fmt.Sprintf("k%d", i))
				}
				s.flush(Y)
				return
			}
			if cAgain != 0 && liveB1 == 0 && liveAcceptor(B) {
				liveB1 = s.now
			}
			if s.now < 9*time.Second {
				s.after(time.Millisecond, poll)
			}
		}
		s.at(1500*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("A and C1 (%d) vote from %v, A counting %v; X's takes done, C restarted at %v as %d; B1 votes from %v; C2 from %v; reads at B C E from %v",
		c1, liveAC, counted, cAgain, c2, liveB1, liveC2, reads)
	t.Logf("grants %d, reads %d, losses %v", s.stats.Grants, s.stats.Reads, s.check.losses)
	switch {
	case liveAC == 0 || cAgain == 0 || reads == 0:
		t.Fatalf("the run does not reach its state")
	case counted["n2"] != c1 || counted["n1"] == 0:
		t.Fatalf("A did not count B1 and C1")
	case liveB1 == 0:
		t.Fatalf("B1 never voted: the run does not reach its state")
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug == "" && liveC2 != 0:
		t.Errorf("C2 voted at %v on A's word, though C1 voted", liveC2)
	case bug != "" && len(s.fail) == 0:
		t.Errorf("with %s no checker caught the reads at B, C and E", bug)
	case bug != "":
		t.Logf("caught: %s", firstLine(s.fail[0]))
	}
}
