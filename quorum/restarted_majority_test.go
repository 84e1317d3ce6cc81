package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Audit of f260d17: how a restarted voter recovers (acceptor_recovery.go).

// describeRegister describes n's register of key for the log.
func describeRegister(n *simNode, key string) string {
	a := acceptorOf(n)
	if a == nil {
		return string(n.id) + ": down"
	}
	r := a.regs[key]
	if r == nil {
		return fmt.Sprintf("%s: no register", n.id)
	}
	return fmt.Sprintf("%s: accepted %v value %v", n.id, r.accepted, r.value)
}

// Finding 1: restartedMajority counts a peer as "lost" for good once it
// answered "recovering, Durable" (peerCatchUp.lost is sticky), even after
// that peer caught up in full and votes with every register. So a voter
// counts a majority that "restarted together" out of restarts that never
// overlapped in a majority, and goes live with no catch-up.
//
// Five voters A..E = n0..n4, all with disks, all voted. Never more than two
// of them are down (not live) at once:
//
//  1. A and B restart from their disks (A first). A's catch-up hears B,
//     still quarantined: "recovering, Durable" (A marks B lost). B catches
//     up from C, D, E (three others: n-q+1) and votes, with every
//     register. A is cut off from C, D and E: it has only B done.
//  2. n5 takes k0 (a long lease) through {B, C, D}: E is cut off from n5,
//     A does not vote yet. n5 then crashes: k0 stays held by n5's grant,
//     at B, C and D only.
//  3. C restarts from its disk and answers A "recovering, Durable".
//     restartedMajority at A: A, B (lost, sticky) and C: three of five.
//     A goes live at once (no catch-up from D or E), without k0, and
//     notes restartedWith {B, C}.
//  4. B restarts again from its disk. C's catch-up (cut off from B's old
//     life and from D) hears A say LostWith and B say Durable:
//     restartedMajority, three of five, and C goes live empty too.
//  5. n6 reads k0 at {A, C, E} (D cut off from n6, B recovering): every
//     one of them holds nothing for k0, and the read says it is free,
//     while k0 was chosen held by n5 and never freed: I8. At no moment
//     were three voters down; the simulator records no majority loss.
//
// The rule that is wrong: peerCatchUp.lost is never cleared. A peer that
// answers a bucket as a live voter without LostWith has caught up (or
// never lost anything since this acceptor started): its registers are
// not gone, and it no longer counts toward a majority that lost them.
//
// Fixed: a peer that answers a bucket as a live voter, not on this
// acceptor's word (no LostWith), no longer counts as lost. Fault
// sticky-lost brings the old rule back.
func TestRecoveredVoterNoLongerCountsAsLost(t *testing.T) {
	for _, bug := range []string{"", "sticky-lost"} {
		t.Run("bug="+bug, func(t *testing.T) { runRestartsThatNeverOverlap(t, bug) })
	}
}

func runRestartsThatNeverOverlap(t *testing.T, bug string) {
	cfg := faultFree(1, 5, 2, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 9*time.Second, 8*time.Second
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
			h := n6.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k1", true, time.Second)
			s.flush(n6)
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:5] {
				if !liveAcceptor(v) || v.disk.saved == nil || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
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
			h := n5.clients[0]
			h.holdTime = time.Hour
			h.acquire("k0", true, time.Second)
			s.flush(n5)
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

// Finding 2 (a stall): maybeGoLive's full-restart case counts the voters
// that lost their state against a majority of the configuration's voters
// only (recovering >= a.m.Majority()), and the Prev case (restartedMajority
// of Prev) counts only voters restarted from their disk (Durable). While a
// change that adds a voter is pending, a restart of two of the three
// voters before it — one from its disk, one on an empty data directory
// (the accident the README says lockmesh catches: it "waits out a
// quarantine and catches up") — matches neither:
//
//   - "enough" needs, of the three voters before the change, two others
//     done: only C answers with its registers;
//   - restartedMajority(Prev) at A counts A alone (B answers Forgot, not
//     Durable);
//   - the full restart needs three of the four voters recovering: A and B
//     are two, though every voter has answered and two of the three voters
//     before the change lost their state (the case the README says a mesh
//     without data directories comes back from once every voter answered).
//
// A and B wait for each other for good. C and D are two of four: no
// majority, no lock, and no change can settle the pending one (its key
// listing needs two of A, B, C), so the README's way out for B ("until a
// change settles it: removing that voter, from another node") cannot run
// either. Without the pending change (three voters, same two restarts) the
// full-restart case brings both back (see the "settled" run).
//
// Voters A, B, C = n0, n1, n2 with disks; n5 adds n3 (D) and is cut off
// as soon as every voter adopted the pending configuration (version 2),
// so that its change dies before it lists the keys. A restarts from its
// disk, B on a new, empty one. At 4.5s n6 tries to remove B; after the
// heal (8s) n6's client waits for k0 (I9).
//
// Fixed: the full-restart case counts, while a change is pending, a
// majority of the voters before it too. Fault new-voters-only brings the
// old count back.
func TestFullRestartDuringAPendingChangeCountsThePreviousVoters(t *testing.T) {
	for _, c := range []string{"pending", "settled"} {
		t.Run(c, func(t *testing.T) { runFullRestartDuringAPendingAdd(t, c, "") })
	}
	t.Run("pending/new-voters-only", func(t *testing.T) { runFullRestartDuringAPendingAdd(t, "pending", "new-voters-only") })
}

func runFullRestartDuringAPendingAdd(t *testing.T, c, bug string) {
	cfg := faultFree(1, 3, 4, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 16*time.Second, 8*time.Second
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
			h := n6.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k1", true, time.Second)
			s.flush(n6)
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
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

// Finding 3: a voter that lost its disk and catches up in full (the
// "enough" case of maybeGoLive) keeps what it merged of the configuration
// register at the ballot it was accepted at (demoteCopies runs only when a
// majority lost its state). Two such copies and the one voter that really
// accepted the value are three of five voters reporting one ballot: a
// read's peek takes that for a chosen configuration, and a voter change
// adopts it. But it was accepted by one voter only, and a higher ballot
// of another value sits at a voter the copiers never merged from (it was
// recovering when they asked): the next read that meets it writes that one
// back, and a second configuration of the same id is adopted (I5).
//
// Five voters n0..n4 with disks, all voted. Two abandoned changes: P2
// prepares b2 at n1 n2 n3 and gets Ca (add n8) accepted at n3 only; P3
// prepares b3 > b2 at n1 n2 n4 and gets Cb (add n5) accepted at n4 only.
// Neither is chosen. n4 restarts from its disk and stays recovering (cut
// off from n1 and n3): it answers "recovering, Durable, newer Cb".
//
//  1. n0 loses its disk; its probe hears voters that voted and it recovers
//     as one that forgot. newerMaybeChosen: Ca at n0 (itself) and n3, Cb
//     at n0 and n4: two of five each, nothing may be chosen. It catches
//     up from n1, n2, n3 (three others) and goes live, its register
//     holding Ca at b2 (from n3).
//  2. n2 loses its disk and does the same (n0 answers NewerConfig 0: its
//     disk holds no vote); it merges Ca at b2 from n0 and n3.
//  3. n6 starts a change, hearing n0, n2 and n3 first: its peek sees three
//     voters at b2 and concludes Ca chosen; n6 adopts Ca (version 2).
//     (n6 is then cut off, as a node that died would be.)
//  4. n4, healed, catches up and votes (restored, in C0, Cb at b3 on its
//     disk). n7 starts a change hearing n0, n1, n4: its prepare finds Cb
//     at b3 above Ca at b2, writes it back, and adopts Cb: version 2
//     names two configurations (I5).
//
// The rule that is wrong: a copy of the configuration register (or of any
// register) learned in a catch-up is kept at the ballot it was accepted
// at, so that copies at several voters look like votes at one ballot.
//
// Fixed: a register merged in a catch-up is a copy until the acceptor
// accepts a value in a round, and says so (Result.Copy); replies that
// agree on a ballot show a chosen value only if none is a copy. Fault
// copies-vote reports copies as votes again.
func TestCopiedConfigurationsAreNoVotes(t *testing.T) {
	for _, bug := range []string{"", "copies-vote"} {
		t.Run("bug="+bug, func(t *testing.T) { runCopiedConfigurations(t, bug) })
	}
}

func runCopiedConfigurations(t *testing.T, bug string) {
	cfg := faultFree(1, 5, 4, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 9*time.Second, 8*time.Second
	var (
		states  []string
		n6Conf  string
		n7Conf  string
		regs    []string
		n6Heard string
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n1, n2, n3, n4, n6, n7 := n[0], n[1], n[2], n[3], n[4], n[6], n[7]
		c0 := s.boot
		c1a := c0.Next(append(slices.Clone(c0.Voters), "n8"), true, 0)
		c1b := c0.Next(append(slices.Clone(c0.Voters), "n5"), true, 0)
		b2 := Ballot{Counter: 200, Incarnation: 1000, Node: "p2"}
		b3 := Ballot{Counter: 300, Incarnation: 1001, Node: "p3"}
		st := &configStepper{t: t, c: c0}
		s.at(1000*time.Millisecond, func() {
			h := n[5].clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k1", true, time.Second)
			s.flush(n[5])
		})
		s.at(1300*time.Millisecond, func() {
			for _, v := range n[:5] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.3s", v.id)
				}
			}
			for _, v := range []*simNode{n1, n2, n3} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
			}
			st.step(n3, Op{Kind: OpAccept, Ballot: b2, Value: Value{Config: &c1a}}, true)
			for _, v := range []*simNode{n1, n2, n4} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b3}, true)
			}
			st.step(n4, Op{Kind: OpAccept, Ballot: b3, Value: Value{Config: &c1b}}, true)
			// n4 restarts from its disk and cannot catch up.
			cutBoth(s, n4.idx, n1.idx, true)
			cutBoth(s, n4.idx, n3.idx, true)
			s.crash(n4)
			s.start(n4)
			// n0's disk is lost.
			s.crash(n0)
			n0.disk = &simDisk{}
			s.start(n0)
		})
		s.at(3000*time.Millisecond, func() {
			states = append(states, describeAcceptor(n0))
			s.crash(n2)
			n2.disk = &simDisk{}
			s.start(n2)
		})
		s.at(4500*time.Millisecond, func() {
			states = append(states, describeAcceptor(n2), describeAcceptor(n4))
			for _, v := range n[:5] {
				regs = append(regs, describeRegister(v, ConfigKey))
			}
			cutBoth(s, n6.idx, n1.idx, true)
			cutBoth(s, n6.idx, n4.idx, true)
			changeFrom(t, s, n6, simChange{add: "n6"})
			var poll func()
			poll = func() {
				if n6.node.Membership().Version() >= 2 {
					isolate(s, n6.idx, true) // n6 dies with what it adopted
					m := n6.node.Membership()
					n6Conf = fmt.Sprintf("%d %v pending %v", m.Version(), m.Voters, m.Pending)
					return
				}
				if s.now < 5*time.Second {
					s.after(50*time.Microsecond, poll)
				}
			}
			s.after(50*time.Microsecond, poll)
		})
		s.at(5000*time.Millisecond, func() {
			n6Heard = n6Conf
			cutBoth(s, n4.idx, n1.idx, false)
			cutBoth(s, n4.idx, n3.idx, false)
		})
		s.at(6500*time.Millisecond, func() {
			states = append(states, describeAcceptor(n4))
			cutBoth(s, n7.idx, n2.idx, true)
			cutBoth(s, n7.idx, n3.idx, true)
			changeFrom(t, s, n7, simChange{add: "n7"})
			s.after(500*time.Millisecond, func() {
				m := n7.node.Membership()
				n7Conf = fmt.Sprintf("%d %v pending %v", m.Version(), m.Voters, m.Pending)
			})
		})
	}
	s := newSim(cfg)
	s.run()
	for _, x := range states {
		t.Logf("%s", x)
	}
	t.Logf("configuration registers at 4.5s: %v", regs)
	t.Logf("n6 adopted %s; n7 then on %s", n6Heard, n7Conf)
	switch {
	case bug != "":
		brokeRule(t, s, bug, "I5", "")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	}
}
