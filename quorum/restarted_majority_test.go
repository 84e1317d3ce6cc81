package quorum

import (
	"fmt"
	"testing"
	"time"
)

// Voters restarted together from their disks (design.md R42, R47): a
// restarted voter counts a peer as having lost its registers with it only
// until the peer catches up from others, and a full restart during a
// pending change counts a majority of the voters before it too.

// A restarted voter counts a peer that answered "recovering, Durable" as
// one that lost its registers with it only until the peer answers a bucket
// as a live voter, not on this voter's word (no LostWith): it caught up
// from others, its registers are not gone (design.md R47). With fault
// sticky-lost a peer counts as lost for good, and restarts that never
// overlapped in a majority pass for one that did.
//
// Five voters A..E = n0..n4, all with disks, all voted. Never more than two
// of them are down (not live) at once:
//
//  1. A and B restart from their disks (A first). A's catch-up hears B,
//     still quarantined: "recovering, Durable" (A counts B lost). B catches
//     up from C, D and E (three others: n-q+1) and votes, with every
//     register. A is cut off from C, D and E: it has only B done.
//  2. n5 takes k0 (a long lease) through {B, C, D}: E is cut off from n5,
//     A does not vote yet. n5 then crashes: k0 stays held by n5's grant,
//     at B, C and D only.
//  3. C restarts from its disk and answers A "recovering, Durable".
//  4. B restarts again from its disk. C's catch-up is cut off from B's old
//     life and from D.
//  5. n6 reads k0 at {A, C, E} (D cut off from n6, B recovering).
//
// With the rule A, which no longer counts B, waits, and so does C. With the
// fault A counts A, B and C (three of five) restarted together at step 3
// and goes live at once without k0 (no catch-up from D or E), noting
// restartedWith {B, C}; at step 4 C hears A say LostWith and B say Durable
// and goes live empty too; at step 5 every voter read holds nothing for
// k0, and the read says it is free while k0 was chosen held by n5 and never
// freed (I8). At no moment were three voters down; the simulator records no
// majority loss.
func TestRecoveredVoterNoLongerCountsAsLost(t *testing.T) {
	for _, bug := range []string{"", "sticky-lost"} {
		t.Run("bug="+bug, func(t *testing.T) { runRestartsThatNeverOverlap(t, bug) })
	}
}

func runRestartsThatNeverOverlap(t *testing.T, bug string) {
	cfg := onDisks(bug, 5, 2, 1, 1, 9*time.Second, 8*time.Second)
	var (
		e1       uint64
		aLive    string
		cLive    string
		regsAt   []string
		readDone bool
		readRes  string
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, D, E, n5, n6 := n[0], n[1], n[2], n[3], n[4], n[5], n[6]
		s.at(1000*time.Millisecond, func() {
			// Every voter votes once, so that each restart from disk is
			// one from a disk that holds a vote.
			takeAndRelease(n6, "k1", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:5]...)
			// A reaches B only, among the voters.
			cutBoth(s, A.idx, C.idx, true)
			cutBoth(s, A.idx, D.idx, true)
			cutBoth(s, A.idx, E.idx, true)
			s.crash(A)
			s.start(A)
		})
		s.at(1550*time.Millisecond, func() {
			s.crash(B)
			s.start(B)
		})
		s.at(2800*time.Millisecond, func() {
			if !liveAcceptor(B) || liveAcceptor(A) {
				t.Fatalf("at 2.8s: %s; %s", describeAcceptor(A), describeAcceptor(B))
			}
			p := A.node.acc.catchUp.peers[0]
			t.Logf("at 2.8s A's catch-up from B: done %v, counted as lost %v", p.done, p.lost)
			// n5 takes k0 through {B, C, D}.
			cutBoth(s, E.idx, n5.idx, true)
			takeAndRelease(n5, "k0", time.Hour)
		})
		s.at(3000*time.Millisecond, func() {
			h := n5.clients[0]
			if h.grant == nil {
				t.Fatalf("n5 was not granted k0")
			}
			e1 = h.grant.token
			s.crash(n5) // the holder dies; k0 stays held by its grant
			for _, v := range n[:5] {
				regsAt = append(regsAt, describeRegister(v, "k0"))
			}
			// C restarts from its disk; A hears it, C does not hear B's
			// old life nor D.
			s.crash(C)
			cutBoth(s, A.idx, C.idx, false)
			cutBoth(s, C.idx, B.idx, true)
			cutBoth(s, C.idx, D.idx, true)
			s.start(C)
		})
		s.at(3300*time.Millisecond, func() {
			aLive = describeAcceptor(A)
			if !liveAcceptor(A) {
				t.Logf("A does not vote at 3.3s: %s", aLive)
			}
			// B restarts again; C hears its new life.
			s.crash(B)
			cutBoth(s, C.idx, B.idx, false)
			s.start(B)
		})
		s.at(4200*time.Millisecond, func() {
			cLive = describeAcceptor(C)
			// n6 reads k0 where D cannot answer (B recovers still).
			cutBoth(s, n6.idx, D.idx, true)
			cutBoth(s, n6.idx, B.idx, true)
			r := n6.clients[0]
			r.read("k0")
			s.flush(n6)
		})
		s.at(4600*time.Millisecond, func() {
			readDone = n6.clients[0].state == cIdle
			readRes = fmt.Sprintf("%s; %s; %s", describeRegister(A, "k0"), describeRegister(C, "k0"), describeRegister(E, "k0"))
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("k0 granted to n5 at %d; registers at 3s: %v", e1, regsAt)
	t.Logf("at 3.3s %s", aLive)
	t.Logf("at 4.2s %s", cLive)
	t.Logf("read done by 4.6s: %v; registers then: %s", readDone, readRes)
	switch {
	case bug != "":
		brokeRule(t, s, bug, "I8", "")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), s.fail[0])
	}
}

// A full restart during a pending change counts the voters that lost their
// state against a majority of the voters before the change too (design.md
// R42). While a change that adds a voter is pending, a restart of two of
// the three voters before it, one from its disk and one on an empty data
// directory, matches no other way to go live:
//
//   - a full catch-up needs, of the three voters before the change, two
//     others done: only C answers with its registers;
//   - restartedMajority of the voters before the change at A counts A
//     alone (B answers Forgot, not Durable);
//   - counted against the new voters only, the full restart needs three of
//     four recovering: A and B are two, though every voter answered and
//     two of the three voters before the change lost their state.
//
// With fault new-voters-only (the last count alone) A and B wait for each
// other for good; C and D are two of four, no majority, no lock, and no
// change can settle the pending one (its key listing needs two of A, B, C),
// so a removal of B from another node cannot run either (I9 after the
// heal). Without the pending change ("settled": three voters, the same two
// restarts) the full restart brings both back.
//
// Voters A, B, C = n0, n1, n2 with disks; n5 adds n3 (D) and is cut off as
// soon as every voter adopted the pending configuration (version 2), so
// that its change dies before it lists the keys. A restarts from its disk,
// B on a new, empty one. At 4.5s n6 tries to remove B; after the heal (8s)
// n6's client waits for k0.
func TestFullRestartDuringAPendingChangeCountsThePreviousVoters(t *testing.T) {
	for _, c := range []string{"pending", "settled"} {
		t.Run(c, func(t *testing.T) { runFullRestartDuringAPendingAdd(t, c, "") })
	}
	t.Run("pending/new-voters-only", func(t *testing.T) { runFullRestartDuringAPendingAdd(t, "pending", "new-voters-only") })
}

func runFullRestartDuringAPendingAdd(t *testing.T, c, bug string) {
	cfg := onDisks(bug, 3, 4, 1, 1, 16*time.Second, 8*time.Second)
	var (
		at4, at7 []string
		version  uint64
		removed  string
		liveA    time.Duration
		liveB    time.Duration
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		A, B, C, D, n5, n6 := n[0], n[1], n[2], n[3], n[5], n[6]
		s.at(1000*time.Millisecond, func() {
			takeAndRelease(n6, "k1", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:3]...)
			if c == "settled" {
				return
			}
			changeFrom(t, s, n5, simChange{add: "n3"})
			var poll func()
			poll = func() {
				all := true
				for _, v := range []*simNode{A, B, C, D} {
					if v.node.Membership().Version() < 2 {
						all = false
					}
				}
				if all {
					isolate(s, n5.idx, true) // the change dies here, pending
					return
				}
				s.after(50*time.Microsecond, poll)
			}
			s.after(50*time.Microsecond, poll)
		})
		s.at(2000*time.Millisecond, func() {
			m := C.node.Membership()
			version = m.Version()
			if c == "pending" && (!m.Pending || version != 2) {
				t.Fatalf("C is on version %d pending %v, not the pending addition", version, m.Pending)
			}
			s.crash(A)
			s.crash(B)
			B.disk = &simDisk{} // B's data directory is lost
			s.start(A)
			s.start(B)
			var poll func()
			poll = func() {
				if liveA == 0 && liveAcceptor(A) {
					liveA = s.now
				}
				if liveB == 0 && liveAcceptor(B) {
					liveB = s.now
				}
				if s.now < 8*time.Second {
					s.after(time.Millisecond, poll)
				}
			}
			s.after(time.Millisecond, poll)
		})
		s.at(4000*time.Millisecond, func() {
			for _, v := range []*simNode{A, B} {
				at4 = append(at4, describeAcceptor(v))
			}
		})
		s.at(4500*time.Millisecond, func() {
			if c == "pending" {
				changeFrom(t, s, n6, simChange{remove: "n1"})
			}
		})
		s.at(7000*time.Millisecond, func() {
			for _, v := range []*simNode{A, B} {
				at7 = append(at7, describeAcceptor(v))
			}
			m := n6.node.Membership()
			removed = fmt.Sprintf("n6 on version %d %v pending %v", m.Version(), m.Voters, m.Pending)
		})
		s.at(8500*time.Millisecond, func() {
			h := n6.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Hour)
			s.flush(n6)
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("%s: configuration version %d at 2s; A live again at %v, B at %v", c, version, liveA, liveB)
	t.Logf("at 4s: %v", at4)
	t.Logf("at 7s: %v; after n6's removal of n1: %s", at7, removed)
	switch {
	case bug != "":
		if liveA != 0 && liveB != 0 {
			t.Errorf("with %s A and B voted again", bug)
		}
		brokeRule(t, s, bug, "I9", "")
	case liveA == 0 || liveB == 0:
		t.Errorf("A (restarted from its disk) or B (on an empty one) never voted again: the mesh has no majority")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	}
}
