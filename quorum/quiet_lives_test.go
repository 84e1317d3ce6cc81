package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A voter's quiet lives (design.md R45, R46, R48): the lives started from
// its disk since the last one that voted. A voter that went live on a
// partner's word (LostWith) gives that word to a later life of the partner
// only if it names the life counted among its quiet lives; a life that
// goes live empties the list before it votes, so that no later life names
// a life that voted; and the list is bounded. The runs' voters A B C =
// n0 n1 n2 (A..E = n0..n4 with five) have data directories. The plain
// case, a partner restarted again that names the life counted, is the
// script testdata/scenarios/partner_restarted_again.txt.

// countedLifeOf is the incarnation a's acceptor counted id's life as
// restarted with it (0: none, or a is down).
func countedLifeOf(a *simNode, id NodeID) uint64 {
	if !a.up || a.node == nil || a.node.acc == nil {
		return 0
	}
	return a.node.acc.restartedWith[id]
}

// A life that goes live empties its disk's quiet lives before it votes
// (design.md R48), so that a later life never names a life that voted and
// gets a word (LostWith) that passes a single restart for a majority's.
// Fault keep-quiet keeps the list.
//
// Three voters A B C = n0 n1 n2 with disks, X = n3 and Y = n4. Y takes and
// releases k0..k7 at 1s, at every voter. C is cut off at 1.3s (it runs on,
// holding what it held then). A and B restart (1.5s, 1.6s); A goes live on
// B's word, B on A's. X then takes and releases k0..k7 at A and B (C hears
// nothing of it). B restarts again; its new life merges A's first bucket of
// registers, and the link between them then fails. Then A is cut off, C
// comes back, and Y reads k0..k7 at B and C. With the rule B's new life
// names no quiet life (its last voted), waits for the catch-ups of C and A,
// and the reads wait for the heal. With the fault it names the life that
// voted, A answers LostWith, B goes live on A's word without the rest of
// A's registers, and a read finds a register older than X's release (I8).
func TestQuietLivesEndWhenALifeVotes(t *testing.T) {
	for _, bug := range []string{"", "keep-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { runQuietLivesEnd(t, bug) })
	}
}

func runQuietLivesEnd(t *testing.T, bug string) {
	cfg := onDisks(bug, 3, 2, 8, 8, 10*time.Second, 9*time.Second)
	var liveAB, bAgain, liveB2, reads time.Duration
	taken, cutAB := 0, false
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, X, Y := n[0], n[1], n[2], n[3], n[4]
		s.at(1000*time.Millisecond, func() {
			// Every voter votes: each holds k0..k7 free at an epoch.
			takeAndReleaseEach(Y, 20*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:3]...)
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
				takeAndReleaseEach(X, 20*time.Millisecond)
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

// The rule of TestQuietLivesEndWhenALifeVotes with five voters, where a
// majority with a quiet voter needs a third one that lost its registers
// (design.md R48): C's counted life votes, by catching up from others, and
// C's next life must not get A's word for it.
//
// Voters A B C D E = n0..n4 with disks, X = n5 and Y = n6. Y takes and
// releases k0..k7 at every voter at 1s. At 1.5s A, B and C crash and come
// back from their disks; B hears A alone. A counts B1 and C1 (three of
// five said "recovering, durable") and votes; C1 catches up from A, D and
// E and votes (C's quiet lives are emptied); B1, hearing A alone, waits.
// E is cut off, and X takes and releases k0..k7 at A, C1 and D. C restarts
// (C2: B and C not voting, no majority lost), now hearing A, B and E but
// not D; B1 hears C2 say "recovering, durable" and goes live on A's word
// and C2's (three of five; B1 caught up from A before X's writes). C2
// merges A's first bucket, and the link between A and C fails. Then A and
// D are cut off, E returns, and Y reads k0..k7 at B, C and E.
//
// With the rule C2 names no quiet life A counted (C1 voted), A's answer
// carries no LostWith, and C2 waits to catch up from voters that meet every
// majority: the reads wait for the heal, and nothing fires. With fault
// keep-quiet C2 names C1, A answers LostWith, and C2 goes live on A's word
// and B1's without X's writes: {B C E} hold none of them, and the reads
// break I8 with no majority lost.
func TestQuietLivesEndWhenALifeVotesOfFiveVoters(t *testing.T) {
	for _, bug := range []string{"", "keep-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { runQuietLivesOfFiveVoters(t, bug) })
	}
}

func runQuietLivesOfFiveVoters(t *testing.T, bug string) {
	cfg := onDisks(bug, 5, 2, 8, 8, 12*time.Second, 10*time.Second)
	var (
		liveAC, cAgain, liveB1, liveC2, reads time.Duration
		cutAC                                 bool
		counted                               map[NodeID]uint64
		c1, c2                                uint64
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, D, E, X, Y := n[0], n[1], n[2], n[3], n[4], n[5], n[6]
		s.at(1000*time.Millisecond, func() {
			takeAndReleaseEach(Y, 20*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:5]...)
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
				counted = map[NodeID]uint64{B.id: countedLifeOf(A, B.id), C.id: countedLifeOf(A, C.id)}
				if liveAcceptor(B) {
					return // the run does not reach its state
				}
				isolate(s, E.idx, true)
				takeAndReleaseEach(X, 20*time.Millisecond)
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

// A life counted by a full restart (noteRestartedWith(true): voters that
// were recovering, durable or not; floor-only) rather than by a majority
// restarted from disks: a later life of that voter that names it gets the
// word too, and that is safe (design.md R46).
//
// Three voters A B C = n0 n1 n2 with disks, all voted. At 1.5s all three
// crash; A comes back on a new, empty disk (it hears that others voted,
// and recovers as one that forgot), B and C from theirs. B and C cannot
// hear each other, so neither concludes anything from the other: each
// hears only A, which answers "recovering, forgot". A hears both say
// "recovering, durable" and, not restored itself, concludes a full
// restart: restartedWith {B: B1, C: C1}, floor-only. As A goes live, C's
// machine goes (down until the heal at 9s) and B restarts before it votes
// (B2, quiet lives [B1 B2]). B2 names B1 and A answers LostWith: B2 goes
// live on A's word (two of three). X then takes and releases k0..k3 at A
// and B2, and Y reads them; C returns at the heal and catches up.
//
// No checker fires, and B2 votes: A counted B1 because B1 said so from its
// disk, and no life of B voted since; B2's registers are as gone as B1's,
// and the values A took since its start were chosen without B. With fault
// ignore-quiet B2 waits for C until the heal.
func TestQuietLifeCountedByAFullRestart(t *testing.T) {
	for _, bug := range []string{"", "ignore-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { runQuietLifeInAFullRestart(t, bug) })
	}
}

func runQuietLifeInAFullRestart(t *testing.T, bug string) {
	cfg := onDisks(bug, 3, 2, 4, 4, 12*time.Second, 9*time.Second)
	var (
		liveA, bAgain, liveB2, took, read time.Duration
		counted, b1, b2                   uint64
		fullRestart                       bool
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, X, Y := n[0], n[1], n[2], n[3], n[4]
		s.at(1000*time.Millisecond, func() {
			takeAndReleaseEach(Y, 20*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:3]...)
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
				counted = countedLifeOf(A, B.id)
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
				takeAndReleaseEach(X, 20*time.Millisecond)
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

// Voter changes between the counted life and the later one (design.md R46).
// A counted B1 in configuration v1 = {A B C}; while B is down, A and C add
// D and remove C (v3 = {A B D}, keys moved to A and D). B's next life starts
// on v1 from its disk, adopts v3 from A's answer (saved: the quiet lives
// stay), and names B1 as quiet: A answers LostWith, and B2 goes live on A's
// word alone (two of three voters of v3) without catching up from D, to
// which it is cut off. X has meanwhile taken and released k0..k3 at A and
// D; A is then cut off and X reads at B2 and D.
//
// No checker fires: what was chosen since A went live was chosen without
// B, by majorities of v1, v2 and v3 that each meet {B D} in D (the changes
// moved every key to a majority of the new voters: D), and B's lives never
// voted since B1. With fault ignore-quiet B2 waits for D until the heal.
func TestQuietLivesAcrossVoterChanges(t *testing.T) {
	for _, bug := range []string{"", "ignore-quiet"} {
		t.Run("bug="+bug, func(t *testing.T) { runQuietLivesAcrossChanges(t, bug) })
	}
}

func runQuietLivesAcrossChanges(t *testing.T, bug string) {
	cfg := onDisks(bug, 3, 2, 4, 4, 12*time.Second, 9*time.Second)
	var (
		liveA, changed, bAgain, liveB2, reads time.Duration
		counted, b1                           uint64
		stage                                 int
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, D, X := n[0], n[1], n[2], n[3], n[4]
		s.at(1000*time.Millisecond, func() {
			takeAndReleaseEach(X, 20*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:3]...)
			cutBoth(s, B.idx, C.idx, true)
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.start(A)
		})
		s.at(1600*time.Millisecond, func() {
			s.start(B)
			b1 = B.inc
		})
		var poll func()
		poll = func() {
			switch {
			case stage == 0 && liveAcceptor(A):
				stage, liveA = 1, s.now
				counted = countedLifeOf(A, B.id)
				if liveAcceptor(B) {
					return // B1 voted first: the run does not reach its state
				}
				s.crash(B) // down while the voters change
				changeFrom(t, s, A, simChange{add: D.id})
			case stage == 1 && slices.Equal(s.m.Voters, []NodeID{A.id, B.id, C.id, D.id}) && !s.m.Pending:
				stage = 2
				changeFrom(t, s, A, simChange{remove: C.id})
			case stage == 2 && slices.Equal(s.m.Voters, []NodeID{A.id, B.id, D.id}) && !s.m.Pending:
				stage, changed = 3, s.now
				isolate(s, C.idx, true)
				takeAndReleaseEach(X, 20*time.Millisecond)
			case stage == 3:
				done := 0
				for _, h := range X.clients {
					if h.state == cIdle {
						done++
					}
				}
				if done == len(X.clients) && s.now > changed+100*time.Millisecond {
					stage, bAgain = 4, s.now
					cutBoth(s, B.idx, D.idx, true)
					s.start(B)
				}
			case stage == 4 && (liveAcceptor(B) || s.now > bAgain+4*time.Second):
				stage = 5
				if liveAcceptor(B) {
					liveB2 = s.now
				}
				reads = s.now
				cutBoth(s, B.idx, D.idx, false)
				isolate(s, A.idx, true)
				for i, h := range X.clients {
					h.read(fmt.Sprintf("k%d", i))
				}
				s.flush(X)
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
	t.Logf("A votes from %v counting B's life %d (B1 = %d); voters changed to %v by %v; B2 starts at %v, votes from %v; reads at %v",
		liveA, counted, b1, s.m.Voters, changed, bAgain, liveB2, reads)
	t.Logf("grants %d, reads %d, changes done %d, keys moved %d, losses %v", s.stats.Grants, s.stats.Reads, s.stats.ChangesDone, s.stats.KeysMoved, s.check.losses)
	switch {
	case liveA == 0 || stage < 5:
		t.Fatalf("the run does not reach its state (stage %d)", stage)
	case counted != b1:
		t.Fatalf("A did not count B1")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug == "" && liveB2 == 0:
		t.Errorf("B2 never voted on A's word in v3")
	case bug != "" && liveB2 != 0:
		t.Errorf("with %s, B2 voted at %v: the test no longer shows the stall", bug, liveB2)
	}
}

// The quiet lives are bounded (design.md R48: the newest 8). The run of
// testdata/scenarios/partner_restarted_again.txt (three voters, C's
// machine gone, A votes on B1's word), but B restarts again and again
// before it votes, or once onto a new, empty disk:
//
//   - 7 more lives (B2..B8): the disk holds [B1..B8], B8 names B1, and
//     votes on A's word;
//   - 8 more lives (B2..B9): B1 has dropped off the list, B9 cannot name
//     it, gets no LostWith, and waits for C until the heal (the cost the
//     bound accepts, after a crash loop);
//   - a new disk for B2: it holds no quiet lives (nor a vote: B2 hears that
//     others voted, and recovers as one that forgot), names none, and waits
//     for C.
//
// No checker fires in any: dropping lives only withholds a word; nothing
// names a life it should not.
func TestQuietLivesAreBounded(t *testing.T) {
	for _, c := range []struct {
		restarts int
		newDisk  bool
		votes    bool
	}{{7, false, true}, {8, false, false}, {1, true, false}} {
		t.Run(fmt.Sprintf("restarts=%d/newDisk=%v", c.restarts, c.newDisk), func(t *testing.T) {
			runQuietLivesBound(t, c.restarts, c.newDisk, c.votes)
		})
	}
}

func runQuietLivesBound(t *testing.T, restarts int, newDisk, votes bool) {
	cfg := onDisks("", 3, 2, 1, 1, 12*time.Second, 9*time.Second)
	var (
		liveA, lastStart, liveB time.Duration
		counted, b1             uint64
		quiet                   []uint64
		again                   int
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, Y := n[0], n[1], n[2], n[4]
		s.at(1000*time.Millisecond, func() {
			takeAndRelease(Y, "k1", 50*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:3]...)
			s.crash(C) // gone until the heal
		})
		s.at(1500*time.Millisecond, func() {
			s.crash(A)
			s.crash(B)
			s.start(A)
		})
		s.at(1600*time.Millisecond, func() {
			s.start(B)
			b1 = B.inc
		})
		var restart func()
		restart = func() {
			if liveAcceptor(B) {
				t.Fatalf("B voted after %d more lives", again)
			}
			s.crash(B)
			if newDisk {
				B.disk = nil
			}
			s.start(B)
			again++
			lastStart = s.now
			if B.disk.saved != nil {
				quiet = slices.Clone(B.disk.saved.Quiet)
			} else {
				quiet = nil
			}
			if again < restarts {
				s.after(200*time.Millisecond, restart)
			}
		}
		var poll func()
		poll = func() {
			if liveA == 0 && liveAcceptor(A) {
				liveA = s.now
				counted = countedLifeOf(A, B.id)
				if liveAcceptor(B) {
					return // B1 voted first: the run does not reach its state
				}
				restart()
			}
			if liveA != 0 && again == restarts && liveB == 0 && liveAcceptor(B) {
				liveB = s.now
			}
			if s.now < 8*time.Second {
				s.after(100*time.Microsecond, poll)
			}
		}
		s.at(1500*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("A votes from %v counting B's life %d (B1 = %d); B's last of %d more lives starts at %v with quiet lives %v on its disk; it votes from %v",
		liveA, counted, b1, again, lastStart, quiet, liveB)
	switch {
	case liveA == 0 || again != restarts || counted != b1:
		t.Fatalf("the run does not reach its state")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case votes && liveB == 0:
		t.Errorf("B's last life never voted on A's word")
	case !votes && liveB != 0:
		t.Errorf("B's last life voted at %v, though it cannot name B1", liveB)
	case !votes && !newDisk && slices.Contains(quiet, b1):
		t.Errorf("B1 is still among the quiet lives %v", quiet)
	}
}
