package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The configuration register's votes (design.md R43, R68): only a voter's
// own vote, from its disk, counts toward a chosen configuration. A copy
// merged in a catch-up is no vote, whether a restarted voter counts it, a
// prepare saves it, or copies at several voters look like a majority at
// one ballot. The scenarios step prepares and accepts of the register
// straight into the voters (configStepper), as proposers that died in the
// middle of a change would have left them.

// A voter's prepare of the configuration register saves the vote its disk
// holds with the new promise, never a copy merged in a catch-up; and a voter
// restored from its disk merges no copy of that register at all, its disk
// having kept every vote it cast there (design.md R68). A copy saved as the
// voter's vote would be counted at its next restart. (Fault
// count-copied-config, which brings the copy and its counting back, makes
// n3 adopt C1 at its first restart already;
// TestRestartedVoterAdoptsOnlyAChosenConfiguration shows that fault
// breaking I5.)
//
// Of five voters, p1 gets C1 (add n7) accepted at n1 and n2 at b1. n3
// restarts from its disk and catches up from all four others: C1 cannot
// have been chosen (two of five say they accepted it), so n3 goes live,
// holding no copy of C1. p2 then prepares b2 at n0, n3 and n4, and gets C1'
// (add n8) accepted at n0 alone: nothing was ever chosen. n3 restarts
// again, hearing only n1 and n2, and a change from n5 reads the register at
// {n0 n1 n4}. Had n3's prepare saved a copy of C1 at b1 as its own vote,
// that vote with n1's and n2's would make three of five: n3 would adopt C1,
// and n5's change, finding C1' at the higher ballot, choose it (I5).
func TestConfigPrepareSavesOnlyTheVotersOwnVote(t *testing.T) {
	cfg := onDisks("", 5, 4, 1, 1, 8*time.Second, 7*time.Second)
	var (
		adopted, chosen Membership
		savedCopy       bool // n3's disk held C1 before n3 ever accepted it
		firstLive       time.Duration
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(append(slices.Clone(c0.Voters), "n7"), true, n[7].inc)
		c1x := c0.Next(append(slices.Clone(c0.Voters), "n8"), true, n[8].inc)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		b2 := Ballot{Counter: 1 << 22, Incarnation: 1001, Node: "p2"} // above n3's ballot mark
		st := &configStepper{t: t, c: c0}
		s.at(1200*time.Millisecond, func() {
			takeAndRelease(n[5], "k0", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:5]...)
			for _, v := range []*simNode{n[1], n[2]} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b1}, true)
				st.step(v, Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			}
			// n3 restarts from its disk, hears everyone, and goes live.
			s.crash(n[3])
			s.start(n[3])
		})
		var second func()
		s.at(1500*time.Millisecond, func() {
			whenLive(n[3], func() {
				firstLive = s.now
				r := n[3].node.acc.regs[ConfigKey]
				merged := r != nil && r.value.Config != nil && r.value.Config.Equal(c1)
				if merged {
					t.Fatalf("n3, restored from its disk, merged a copy of C1 in its catch-up: %+v", r)
				}
				if n[3].disk.saved.Config.Value.Config != nil {
					t.Fatalf("n3's disk holds a configuration before any prepare")
				}
				for _, v := range []*simNode{n[0], n[3], n[4]} {
					st.step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
				}
				if c := n[3].disk.saved.Config.Value.Config; c != nil && c.Equal(c1) {
					savedCopy = true
				}
				st.step(n[0], Op{Kind: OpAccept, Ballot: b2, Value: Value{Config: &c1x}}, true)
				second()
			})
		})
		second = func() {
			// n3 restarts again from its disk, and hears only n1 and n2.
			isolate(s, 3, true)
			cutBoth(s, 3, 1, false)
			cutBoth(s, 3, 2, false)
			s.crash(n[3])
			s.start(n[3])
			s.after(time.Millisecond, func() { whenAdopted(n[3], func(m Membership) { adopted = m }) })
			s.after(2*time.Second, func() {
				// n5, cut off from n2 and n3, reads the register at
				// {n0 n1 n4} as the first step of a change.
				cutBoth(s, 5, 2, true)
				cutBoth(s, 5, 3, true)
				changeFrom(t, s, n[5], simChange{add: "n6"})
			})
			s.after(3*time.Second, func() { chosen = n[5].node.Membership() })
		}
	}
	s := newSim(cfg)
	s.run()
	t.Logf("n3 went live at %v; its disk saved the copy of C1 as its vote: %v; n3 adopted %d %v pending %v; n5 is on %d %v pending %v",
		firstLive, savedCopy, adopted.ID&0xffff, adopted.Voters, adopted.Pending, chosen.ID&0xffff, chosen.Voters, chosen.Pending)
	switch {
	case savedCopy:
		t.Errorf("a prepare on ConfigKey saved n3's catch-up copy of C1 as its own vote")
	case adopted.ID != 0 && !adopted.Equal(s.configs[adopted.ID]):
		t.Errorf("n3 adopted %v, but configuration %d is %v", adopted.Voters, adopted.ID&0xffff, s.configs[adopted.ID].Voters)
	case len(s.fail) > 0:
		t.Errorf("%s", firstLine(s.fail[0]))
	}
}

// The same rule for a voter on a new disk (design.md R68), which, not
// restored from a disk, does merge a copy of the configuration register in
// its catch-up: a prepare saves its promise, and no accepted configuration.
//
// Five voters; C1 (add n7) is accepted at n1 alone at b1, so that n3 (one
// voter saying C1, plus itself: two of five) goes live in C0. n3's disk is
// replaced by an empty one: it restarts, catches up from all four others
// and goes live holding a copy of C1 at b1. p2 then prepares b2 at n0, n3
// and n4: n3's disk must hold the promise, and no configuration.
func TestConfigPrepareOnANewDiskSavesNoCopy(t *testing.T) {
	cfg := onDisks("", 5, 4, 1, 1, 6*time.Second, 5*time.Second)
	var (
		merged, savedCopy, promised bool
		liveAt                      time.Duration
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(append(slices.Clone(c0.Voters), "n7"), true, n[7].inc)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		b2 := Ballot{Counter: 1 << 22, Incarnation: 1001, Node: "p2"}
		st := &configStepper{t: t, c: c0}
		s.at(1500*time.Millisecond, func() {
			st.step(n[1], Op{Kind: OpPrepare, Ballot: b1}, true)
			st.step(n[1], Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			s.crash(n[3])
			n[3].disk = &simDisk{}
			s.start(n[3])
		})
		s.at(1501*time.Millisecond, func() {
			whenLive(n[3], func() {
				liveAt = s.now
				r := n[3].node.acc.regs[ConfigKey]
				merged = r != nil && r.value.Config != nil && r.value.Config.Equal(c1)
				for _, v := range []*simNode{n[0], n[3], n[4]} {
					st.step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
				}
				d := n[3].disk.saved
				savedCopy = d.Config.Value.Config != nil
				promised = d.Config.Promise == b2
			})
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("n3 (new disk) live at %v holding a copy of C1: %v; after a prepare its disk holds the promise: %v, an accepted configuration: %v",
		liveAt, merged, promised, savedCopy)
	switch {
	case liveAt == 0:
		t.Errorf("n3 never went live")
	case !merged:
		t.Errorf("n3 merged no copy of C1: the scenario shows nothing")
	case !promised:
		t.Errorf("n3's disk does not hold its promise")
	case savedCopy:
		t.Errorf("a prepare saved n3's copy of C1 as its own vote")
	}
	if len(s.fail) > 0 {
		t.Errorf("%s", firstLine(s.fail[0]))
	}
}

// A restarted voter adopts a newer configuration from its catch-up only if
// it was chosen (chosenNewer: majorities accepted it at one ballot), and it
// counts its own vote from its disk, never the copy of the configuration
// register its catch-up merges (design.md R68).
//
// Of five voters, p1 prepares the configuration register at n1, n2 and n3
// and gets C1 (add n7) accepted at n1 and n2 only; p2 prepares at n0, n3
// and n4 with a higher ballot and gets C1' (add n8) accepted at n0 only.
// Nothing is chosen. n4 restarts from its disk and, cut off from n0,
// catches up from n1, n2 and n3. With the rule n4 counts only its disk's
// vote, waits while C1 may have been chosen (n0 has not answered), and
// adopts what the mesh chose. With fault count-copied-config it counts its
// copy of C1 with n1 and n2, three of five, and adopts C1, which no
// majority accepted; a read of the register at {n0 n1 n3} (n5 starts a
// change, whose first step is such a read) then finds C1' at the higher
// ballot and chooses it: two configurations with one id (I5).
func TestRestartedVoterAdoptsOnlyAChosenConfiguration(t *testing.T) {
	for _, bug := range []string{"", "count-copied-config"} {
		adoptsOnlyAChosenConfiguration(t, bug)
	}
}

func adoptsOnlyAChosenConfiguration(t *testing.T, bug string) {
	cfg := onDisks(bug, 5, 4, 1, 1, 6*time.Second, 5*time.Second)
	var adopted, chosen Membership // what n4 adopted, and what n5 did
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(append(slices.Clone(c0.Voters), "n7"), true, n[7].inc)
		c1x := c0.Next(append(slices.Clone(c0.Voters), "n8"), true, n[8].inc)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		b2 := Ballot{Counter: 200, Incarnation: 1001, Node: "p2"}
		st := &configStepper{t: t, c: c0}
		// Every voter votes once, so that n4's disk says it has voted.
		s.at(1200*time.Millisecond, func() {
			takeAndRelease(n[5], "k0", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			if !n[4].disk.saved.Voted {
				t.Fatalf("n4 never voted")
			}
			for _, v := range n[:5] {
				if !liveAcceptor(v) {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
			for _, v := range []*simNode{n[1], n[2], n[3]} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b1}, true)
			}
			for _, v := range []*simNode{n[0], n[3], n[4]} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
			}
			for _, v := range []*simNode{n[1], n[2]} {
				st.step(v, Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			}
			st.step(n[3], Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, false) // promised b2
			st.step(n[0], Op{Kind: OpAccept, Ballot: b2, Value: Value{Config: &c1x}}, true)
			// n4 restarts from its disk, and hears only n1, n2 and n3.
			isolate(s, 4, true)
			for _, v := range []int{1, 2, 3} {
				cutBoth(s, 4, v, false)
			}
			s.crash(n[4])
			s.start(n[4])
		})
		s.at(1500*time.Millisecond, func() { whenAdopted(n[4], func(m Membership) { adopted = m }) })
		s.at(3500*time.Millisecond, func() {
			// n2 and n4 cut off from it, n5 reads the register at
			// {n0 n1 n3} as the first step of a change.
			cutBoth(s, 5, 2, true)
			cutBoth(s, 5, 4, true)
			changeFrom(t, s, n[5], simChange{add: "n6"})
		})
		s.at(4500*time.Millisecond, func() { chosen = n[5].node.Membership() })
	}
	s := newSim(cfg)
	s.run()
	t.Logf("bug %q: n4 adopted %d %v pending %v; n5 is on %d %v pending %v", bug, adopted.ID&0xffff, adopted.Voters, adopted.Pending, chosen.ID&0xffff, chosen.Voters, chosen.Pending)
	switch {
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%s", failureReport(s))
	case bug == "" && adopted.ID != 0 && !adopted.Equal(s.configs[adopted.ID]):
		t.Errorf("n4 adopted %v, but configuration %d is %v", adopted.Voters, adopted.ID&0xffff, s.configs[adopted.ID].Voters)
	case bug != "":
		brokeRule(t, s, bug, "I5", fmt.Sprintf("n4 adopted %v", adopted.Voters))
	}
}

// A register merged in a catch-up is a copy until the voter accepts a value
// of it in a round, and answers say so (Result.Copy): replies that agree on
// a ballot show a chosen value only if none is a copy (design.md R43). With
// fault copies-vote copies are reported as votes: two copies and the one
// voter that accepted the value are three of five at one ballot, a change
// adopts that value, and when a higher ballot of another value resurfaces
// the next read writes that one back: two configurations of one id (I5).
//
// Five voters n0..n4 with disks, all voted. Two abandoned changes: P2
// prepares b2 at n1 n2 n3 and gets Ca (add n8) accepted at n3 only; P3
// prepares b3 > b2 at n1 n2 n4 and gets Cb (add n5) accepted at n4 only.
// Neither is chosen. n4 restarts from its disk and stays recovering (cut
// off from n1 and n3): it answers "recovering, Durable, newer Cb".
//
//  1. n0's disk is replaced by an empty one; it hears voters that voted and
//     recovers as one that forgot. newerMaybeChosen: Ca at n0 (itself) and
//     n3, Cb at n0 and n4: two of five each, nothing may be chosen. It
//     catches up from n1, n2 and n3 and goes live, its register holding Ca
//     at b2 (from n3).
//  2. n2 does the same, and merges Ca at b2 from n0 and n3.
//  3. n6 starts a change, hearing n0, n2 and n3 first. Were copies votes,
//     its peek would see three voters at b2 and take Ca for chosen, and n6
//     would adopt Ca (version 2); n6 is then cut off, as a node that died
//     would be.
//  4. n4, healed, catches up and votes (restored, in C0, Cb at b3 on its
//     disk). n7 starts a change hearing n0, n1 and n4: its prepare finds Cb
//     at b3 above Ca at b2, writes it back, and adopts Cb.
func TestCopiedConfigurationsAreNoVotes(t *testing.T) {
	for _, bug := range []string{"", "copies-vote"} {
		t.Run("bug="+bug, func(t *testing.T) { runCopiedConfigurations(t, bug) })
	}
}

func runCopiedConfigurations(t *testing.T, bug string) {
	cfg := onDisks(bug, 5, 4, 1, 1, 9*time.Second, 8*time.Second)
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
			takeAndRelease(n[5], "k1", 50*time.Millisecond)
		})
		s.at(1300*time.Millisecond, func() {
			mustVote(t, n[:5]...)
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
