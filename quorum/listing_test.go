package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The key listing of a voter change (proposer_reconfig.go, step 2) asks a
// majority of the voters before the change for the keys they hold. A key
// chosen by a majority that meets the listing majority in one voter only is
// listed only if that voter still holds it when it answers. These scenarios
// stage the voter that restarted without its state being that one voter.

// restartAmnesiac crashes n and starts it again without a disk (no data
// dir): it comes back on the founding voters, knowing nothing.
func restartAmnesiac(s *sim, n *simNode) {
	s.crash(n)
	n.disk = nil
	disks := s.cfg.Disks
	s.cfg.Disks = false // s.start gives a node a disk when the run has disks
	s.start(n)
	s.cfg.Disks = disks
}

// cutBoth cuts (or heals) the link between nodes i and j, both ways.
func cutBoth(s *sim, i, j int, cut bool) {
	s.cut[[2]int{i, j}], s.cut[[2]int{j, i}] = cut, cut
}

// liveAcceptor reports whether n runs an acceptor that votes.
func liveAcceptor(n *simNode) bool {
	return n.up && n.node != nil && n.node.acc != nil && n.node.acc.State() == Live
}

// A restarted voter answers a listing only once it votes, and it votes only
// once it has caught up from voters that meet every majority it may have
// been part of, those before a pending change included. Here k0 is granted
// and released at epoch E at n0 and n2 alone (n1 cut off); n2 has no data
// dir. n2 restarts, n5 adds n3, and n0's listing answers never reach n5:
// the listing majority is {n1 n2}, and n2 is the only voter in it that
// accepted k0 — whose register it lost. n0 is cut off from n2 until 3.5s,
// so n2 cannot learn k0 from it before then. The rule holds if n2 answers
// the listing only after n0 answered its catch-up (and k0 moves); then,
// with n0 cut off and a proposer whose wall clock runs an hour back, k0 is
// granted above E by {n1 n2 n3}. With "skip-prev-catch-up" n2 goes live on
// the word of n1 and n3 (a majority of the new voters less itself), lists
// nothing, k0 is not moved, and the grant after the change is below E: I2.
func TestRestartedVoterListsKeysOnlyOnceCaughtUp(t *testing.T) {
	for _, bug := range []string{"", "skip-prev-catch-up"} {
		cfg := faultFree(1, 3, 3, 1, 1)
		cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
		cfg.Drift, cfg.Clocks = 0, ""
		cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
		const healN0N2 = 3500 * time.Millisecond
		var (
			e, token       uint64
			liveAt, listed time.Duration
			dropped        int // n0's answers to n5 lost while n5 lists
			changed        bool
		)
		cfg.Script = func(s *sim) {
			n0, n1, n2, n3, n4, n5 := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[4], s.nodes[5]
			h := n4.clients[0]
			h.holdTime = 50 * time.Millisecond
			// n2 runs without a data dir from the start.
			restartAmnesiac(s, n2)
			// While n5 lists the old voters' keys, n0's answers to it are
			// lost: the listing majority must be {n1 n2}.
			s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
				if from == n0 && to == n5 && n5.node != nil && n5.node.prop.chg != nil && n5.node.prop.chg.stage == stList {
					dropped++
					return time.Hour, true
				}
				return 0, false
			}
			s.at(1500*time.Millisecond, func() {
				if !liveAcceptor(n2) {
					t.Fatalf("n2 does not vote at 1.5s")
				}
				isolate(s, 1, true) // n1 misses the grant and the release
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			s.at(1700*time.Millisecond, func() {
				e = s.check.maxToken["k0"]
				if e == 0 || h.state != cIdle || s.stats.Releases != 1 {
					t.Fatalf("n4 was not granted and freed k0 by 1.7s (token %d, state %v)", e, h.state)
				}
				if r := n1.node.acc.regs["k0"]; r != nil && !r.accepted.IsZero() {
					t.Fatalf("n1 holds k0: the scenario shows nothing")
				}
				isolate(s, 1, false)
				cutBoth(s, 0, 2, true)
				restartAmnesiac(s, n2)
				id, err := n5.node.ChangeVoters("n3", n3.inc, "", n5.clock.Now()+5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				n5.changes[id] = &simChange{add: "n3"}
				s.flush(n5)
			})
			var poll func()
			poll = func() {
				if liveAt == 0 && liveAcceptor(n2) {
					liveAt = s.now
				}
				if c := n5.node.prop.chg; listed == 0 && c != nil && c.stage > stList {
					listed = s.now
				}
				if liveAt == 0 || listed == 0 {
					s.after(time.Millisecond, poll)
				}
			}
			s.at(1700*time.Millisecond, poll)
			s.at(healN0N2, func() { cutBoth(s, 0, 2, false) })
			s.at(5*time.Second, func() {
				changed = slices.Equal(s.m.Voters, []NodeID{"n0", "n1", "n2", "n3"}) && !s.m.Pending
				// n0, the one voter outside the listing majority that holds
				// k0, goes quiet; a node whose wall clock runs an hour back
				// takes k0 from {n1 n2 n3}.
				isolate(s, 0, true)
				s.wallBack = int64(time.Hour / time.Microsecond)
				s.crash(n4)
				s.start(n4)
				w := n4.clients[0]
				w.holdTime = time.Hour
				w.acquire("k0", true, time.Second)
				s.flush(n4)
			})
			s.at(6500*time.Millisecond, func() {
				if w := n4.clients[0]; w.grant != nil {
					token = w.grant.token
				}
			})
		}
		s := newSim(cfg)
		s.run()
		t.Logf("bug %q: E=%d, n2 voted again at %v, listing done at %v, n0's listing answers lost %d, keys moved %d, changes done %d, token after %d",
			bug, e, liveAt, listed, dropped, s.stats.KeysMoved, s.stats.ChangesDone, token)
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case dropped == 0:
			t.Errorf("bug %q: n0 answered the listing: the listing majority was not {n1 n2}", bug)
		case bug == "" && !changed:
			t.Errorf("the change did not finish by 5s: voters %v, pending %v", s.m.Voters, s.m.Pending)
		case bug == "" && (liveAt < healN0N2 || listed < liveAt):
			t.Errorf("n2 voted at %v and the listing ended at %v, before n0 could answer n2 (%v)", liveAt, listed, healN0N2)
		case bug == "" && s.stats.KeysMoved == 0:
			t.Errorf("k0 was not moved")
		case bug == "" && token <= e:
			t.Errorf("k0 was granted at %d after the change, not above %d", token, e)
		case bug != "":
			brokeRule(t, s, bug, "I2", fmt.Sprintf("n2 voted at %v, listing done at %v, token %d after %d", liveAt, listed, token, e))
		}
	}
}

// A voter without a data dir that restarts comes back on the founding
// voters, whatever configurations it adopted and voted in since. If it could
// catch up from voters that have not adopted the newer configuration, and go
// live in the old one, it would have "un-adopted" it: the old configuration's
// majority would form again, and a grant chosen in the new configuration
// with this voter (the one voter of the new majority among the old
// configuration's majority) would be neither listed nor seen. Here the
// voters are n0..n3 (four, so that a majority of the old voters less n3 is
// two: n1 and n2); n3 has no data dir. n5 adds n4: n0, n1 and n2 accept the
// pending configuration C1, but only n0, n3 and n4 adopt it (n1 and n2 are
// cut off from everyone as soon as n5 adopts it). k0 is granted and freed at
// epoch E in C1 by {n0 n3 n4}. n3 restarts without its state, its wall
// clock an hour back, and can reach only n1 and n2. Its catch-up of C0 from
// them alone would meet every majority of C0 that included it; what saves
// k0 is that their answers say they accepted C1 (newerMaybeChosen): with
// n0 unheard, n0, n1 and n2 may have chosen it, so n3 does not vote in C0;
// it waits to adopt C1 from a voter that did (n0, after the heal). Until
// 2026-12-02 a different rule saved it by luck: n3 counted its copy of n1's
// register as its own vote and adopted C1 (see the next test). Then n3's
// client must not be granted k0 below E. With "ignore-newer-config" n3 goes
// live in C0 and {n1 n2 n3} grants k0 again, below E: I2.
func TestVoterWithoutDiskDoesNotVoteInAReplacedConfiguration(t *testing.T) {
	for _, bug := range []string{"", "ignore-newer-config"} {
		cfg := faultFree(1, 4, 3, 1, 1)
		cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
		cfg.Drift, cfg.Clocks = 0, ""
		cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
		var (
			e, token  uint64
			n3Version uint64 // the configuration n3 is on when its client acquires
			liveC0    bool   // n3 voted in the founding configuration after its restart
		)
		cfg.Script = func(s *sim) {
			n0, n1, n2, n3, n5, n6 := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[5], s.nodes[6]
			h, q := n6.clients[0], n3.clients[0]
			h.holdTime = 50 * time.Millisecond
			q.holdTime = time.Hour
			restartAmnesiac(s, n3) // n3 runs without a data dir from the start
			// Once n5 adopts C1, nothing passes between the old group and
			// the others (n3 moves to the old group when it restarts).
			old := map[*simNode]bool{n1: true, n2: true}
			split := false
			s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
				if !split && n5.node != nil && n5.node.Membership().Version() >= 2 {
					split = true
				}
				if split && old[from] != old[to] {
					return time.Hour, true // lost
				}
				return 0, false
			}
			s.at(1500*time.Millisecond, func() {
				for _, n := range []*simNode{n0, n1, n2, n3} {
					if !liveAcceptor(n) {
						t.Fatalf("%s does not vote at 1.5s", n.id)
					}
				}
				changeFrom(t, s, n5, simChange{add: "n4"})
			})
			s.at(1600*time.Millisecond, func() {
				if !split || n1.node.Membership().Version() != 1 || n2.node.Membership().Version() != 1 {
					t.Fatalf("C1 was not chosen, or n1 and n2 adopted it (split %v)", split)
				}
				for _, n := range []*simNode{n0, n1, n2} {
					if n.node.acc.newerConfigAccepted() == 0 && n.node.Membership().Version() < 2 {
						t.Fatalf("%s did not accept C1", n.id)
					}
				}
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			s.at(1800*time.Millisecond, func() {
				e = s.check.maxToken["k0"]
				if e == 0 || h.state != cIdle || s.stats.Releases != 1 {
					t.Fatalf("n6 was not granted and freed k0 by 1.8s (token %d, state %v)", e, h.state)
				}
				if r := n3.node.acc.regs["k0"]; r == nil || r.value.Epoch != e {
					t.Fatalf("n3 did not accept k0 at %d: the scenario shows nothing", e)
				}
				s.wallBack = int64(time.Hour / time.Microsecond)
				old[n3] = true
				restartAmnesiac(s, n3)
			})
			var poll func()
			poll = func() {
				if liveAcceptor(n3) && n3.node.acc.Membership().Version() == 1 {
					liveC0 = true
				}
				s.after(time.Millisecond, poll)
			}
			s.at(1800*time.Millisecond, poll)
			s.at(3500*time.Millisecond, func() {
				if v := n3.node.Recovery().NewerConfig; bug == "" && v != 2 {
					t.Errorf("n3's Recovery says it waits for configuration version %d, want 2 (C1)", v)
				}
				n3Version = n3.node.Membership().Version()
				q.acquire("k0", true, time.Second)
				s.flush(n3)
			})
			s.at(5*time.Second, func() {
				if q.grant != nil {
					token = q.grant.token
				}
			})
		}
		s := newSim(cfg)
		s.run()
		t.Logf("bug %q: E=%d; n3 voted in C0 after its restart: %v; on configuration version %d when it acquired; its token %d",
			bug, e, liveC0, n3Version, token)
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && liveC0:
			t.Errorf("n3 voted in the replaced configuration")
		case bug == "" && token != 0 && token <= e:
			t.Errorf("n3 was granted k0 at %d, not above %d", token, e)
		case bug != "":
			brokeRule(t, s, bug, "I2", fmt.Sprintf("n3 voted in C0: %v, token %d after %d", liveC0, token, e))
		}
	}
}

// A restarted voter adopts a newer configuration from its catch-up only if
// it was chosen (chosenNewer: a majority accepted it at one ballot). The
// catch-up merges the configuration register too (an acceptor that lost its
// disk must answer prepares with what a majority accepted), and before
// 2026-12-02 the acceptor counted that copy as its own vote. Here, of five
// voters, proposer p1 prepares the configuration register at n1, n2 and n3
// and gets C1 (add n7) accepted at n1 and n2 only; proposer p2 prepares at
// n0, n3 and n4 with a higher ballot and gets C1' (add n8) accepted at n0
// only. Nothing is chosen. n4 restarts from its disk and, cut off from n0,
// catches up from n1, n2 and n3. Counting its copy of C1 with n1 and n2,
// three of five, it adopted C1, which no majority accepted; a read of the
// register at {n0 n1 n3} then found C1' at the higher ballot and chose it
// (n5 starts a change, whose first step is such a read): two configurations
// with one id, I5. With the fix n4 counts only its own vote (its disk's
// register), waits while C1 may have been chosen (n0 has not answered), and
// adopts what the mesh chose. "count-copied-config" brings the miscount
// back.
func TestRestartedVoterAdoptsOnlyAChosenConfiguration(t *testing.T) {
	for _, bug := range []string{"", "count-copied-config"} {
		adoptsOnlyAChosenConfiguration(t, bug)
	}
}

func adoptsOnlyAChosenConfiguration(t *testing.T, bug string) {
	cfg := faultFree(1, 5, 4, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 6*time.Second, 5*time.Second
	var adopted, chosen Membership // what n4 adopted, and what n5 did
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(append(slices.Clone(c0.Voters), "n7"), true, n[7].inc)
		c1x := c0.Next(append(slices.Clone(c0.Voters), "n8"), true, n[8].inc)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		b2 := Ballot{Counter: 200, Incarnation: 1001, Node: "p2"}
		var opID uint64
		step := func(v *simNode, op Op, ok bool) {
			opID++
			op.ID, op.Key = opID, ConfigKey
			if op.Kind == OpAccept {
				op.Inc = v.inc
			}
			resp := v.node.acc.HandleRequest(&Request{Config: c0.ID, From: op.Ballot.Node, To: v.id, Ops: []Op{op}})
			if got := resp.Status == StatusOK && resp.Results[0].OK; got != ok {
				t.Fatalf("%s answered %v %v: status %v, %+v", v.id, op.Kind, op.Ballot, resp.Status, resp.Results)
			}
		}
		// Every voter votes once, so that n4's disk says it has voted.
		s.at(1200*time.Millisecond, func() {
			h := n[5].clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n[5])
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
				step(v, Op{Kind: OpPrepare, Ballot: b1}, true)
			}
			for _, v := range []*simNode{n[0], n[3], n[4]} {
				step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
			}
			for _, v := range []*simNode{n[1], n[2]} {
				step(v, Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			}
			step(n[3], Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, false) // promised b2
			step(n[0], Op{Kind: OpAccept, Ballot: b2, Value: Value{Config: &c1x}}, true)
			// n4 restarts from its disk, and hears only n1, n2 and n3.
			isolate(s, 4, true)
			for _, v := range []int{1, 2, 3} {
				cutBoth(s, 4, v, false)
			}
			s.crash(n[4])
			s.start(n[4])
		})
		var poll func()
		poll = func() {
			if m := n[4].node.Membership(); m.Version() > 1 {
				adopted = m
				return
			}
			s.after(time.Millisecond, poll)
		}
		s.at(1500*time.Millisecond, poll)
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
