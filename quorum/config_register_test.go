package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Audit of caf3d7f ("a catch-up's copy of the voters' register is no
// vote"): scripted runs against ownNewerConfig, chosenNewer and
// newerMaybeChosen.

// auditStep drives one operation on ConfigKey straight into v's acceptor,
// as a proposer of configuration c would, and checks whether it succeeded.
type configStepper struct {
	t    *testing.T
	c    Membership
	opID uint64
}

func (st *configStepper) step(v *simNode, op Op, ok bool) {
	st.t.Helper()
	st.opID++
	op.ID, op.Key = st.opID, ConfigKey
	if op.Kind == OpAccept {
		op.Inc = v.inc
	}
	resp := v.node.acc.HandleRequest(&Request{Config: st.c.ID, From: op.Ballot.Node, To: v.id, Ops: []Op{op}})
	if got := resp.Status == StatusOK && resp.Results[0].OK; got != ok {
		st.t.Fatalf("%s answered %v %v: status %v, %+v", v.id, op.Kind, op.Ballot, resp.Status, resp.Results)
	}
}

// A prepare on ConfigKey saves the register "as it is about to be"
// (handlePrepare: persistConfigRegister(op.Ballot, r.accepted, r.value)).
// After a catch-up, r.accepted and r.value may be a copy merged from
// another voter, and from then on the disk, which ownNewerConfig reads as
// the acceptor's own vote, says the acceptor accepted it. This is the
// miscount caf3d7f removes, come back through the disk.
//
// Now a prepare saves the disk's own accepted value with its new promise,
// and an acceptor restored from its disk merges no copy of the
// configuration register at all (its disk kept every vote it cast there):
// n3 has no copy to save. (With "count-copied-config", which brings the
// copy and its counting back, n3 adopts C1 at its first restart already;
// TestRestartedVoterAdoptsOnlyAChosenConfiguration shows that
// fault breaking I5.)
//
// Of five voters, p1 gets C1 (add n7) accepted at n1 and n2 at b1. n3
// restarts from its disk and catches up from all four others: C1 cannot
// have been chosen (two of five say they accepted it), so it goes live,
// its register holding a copy of C1 at b1. p2 then prepares b2 at n0, n3
// and n4 (n3 saves {b2, b1, C1}: the copy, as its own vote) and gets C1'
// (add n8) accepted at n0 alone. Nothing was ever chosen. n3 restarts
// again, hearing only n1 and n2: its "own vote" at b1 with theirs makes
// three of five, and it adopts C1. A change from n5, reading the register
// at {n0 n1 n4}, finds C1' at the higher ballot and chooses it: I5.
func TestConfigPrepareSavesOnlyTheVotersOwnVote(t *testing.T) {
	cfg := faultFree(1, 5, 4, 1, 1)
	cfg.Disks, cfg.WallBack = true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
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
			h := n[5].clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n[5])
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:5] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
			for _, v := range []*simNode{n[1], n[2]} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b1}, true)
				st.step(v, Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			}
			// n3 restarts from its disk, hears everyone, and goes live.
			s.crash(n[3])
			s.start(n[3])
		})
		var second func()
		var waitLive func()
		waitLive = func() {
			if !liveAcceptor(n[3]) {
				s.after(time.Millisecond, waitLive)
				return
			}
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
		}
		s.at(1500*time.Millisecond, waitLive)
		second = func() {
			// n3 restarts again from its disk, and hears only n1 and n2.
			isolate(s, 3, true)
			cutBoth(s, 3, 1, false)
			cutBoth(s, 3, 2, false)
			s.crash(n[3])
			s.start(n[3])
			var poll func()
			poll = func() {
				if m := n[3].node.Membership(); m.Version() > 1 {
					adopted = m
					return
				}
				s.after(time.Millisecond, poll)
			}
			s.after(time.Millisecond, poll)
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

// newerMaybeChosen counts the restarted acceptor itself only from its disk
// (ownNewerConfig). An acceptor that lost its disk (or restarts without
// one) may well have accepted the newer configuration in its earlier life,
// and been one of the majority that chose it; it counts itself as "did not
// accept" rather than as unknown. (Before caf3d7f it counted itself
// always.)
//
// Voters n0..n3, all with disks; n5 adds n4. n2 never hears the change, so
// C1 is accepted by n0, n1 and n3 (a majority of four), and adopted by n0,
// n3 and n4 but not n1 (n1 and n2 are cut off from everyone as soon as n5
// adopts C1). k0 is granted and freed at epoch E in C1 by {n0 n3 n4}. n3
// then loses its disk: it restarts with none (lost = "none") or with a new,
// empty one (lost = "new"), its wall clock an hour back, and can reach only
// n1 and n2. n1 says it accepted C1, n2 that it did not, n0 is unheard:
// n0 + n1 = two of four, so C1 "cannot have been chosen", and n3 votes in
// C0 with n1 and n2, a majority of C0 that knows nothing of k0. Its client
// is granted k0 below E: I2. (This failed on caf3d7f and before it.) Now an
// acceptor that was not restored from its disk counts itself as one that
// may have accepted any newer configuration, and waits; "forget-own-vote"
// brings the old count back.
func TestVoterWithoutItsDiskCountsItselfAsMaybeAccepting(t *testing.T) {
	for _, lost := range []string{"none", "new"} {
		for _, bug := range []string{"", "forget-own-vote"} {
			t.Run(lost+"/"+bug, func(t *testing.T) { runVoterWithoutDiskThatAccepted(t, lost, bug) })
		}
	}
}

func runVoterWithoutDiskThatAccepted(t *testing.T, lost, bug string) {
	cfg := faultFree(1, 4, 3, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
	var (
		e, token  uint64
		n3Version uint64
		liveC0    bool
		accepted  []NodeID
	)
	cfg.Script = func(s *sim) {
		n0, n1, n2, n3, n5, n6 := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[5], s.nodes[6]
		h, q := n6.clients[0], n3.clients[0]
		h.holdTime = 50 * time.Millisecond
		q.holdTime = time.Hour
		old := map[*simNode]bool{n1: true, n2: true}
		split, changing := false, false
		s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
			if !split && n5.node != nil && n5.node.Membership().Version() >= 2 {
				split = true
			}
			if changing && !split && (from == n2 && to == n5 || from == n5 && to == n2) {
				return time.Hour, true // n2 never hears the change
			}
			if split && old[from] != old[to] {
				return time.Hour, true
			}
			return 0, false
		}
		s.at(1500*time.Millisecond, func() {
			for _, n := range []*simNode{n0, n1, n2, n3} {
				if !liveAcceptor(n) {
					t.Fatalf("%s does not vote at 1.5s", n.id)
				}
			}
			changing = true
			changeFrom(t, s, n5, simChange{add: "n4"})
		})
		s.at(1600*time.Millisecond, func() {
			if !split || n1.node.Membership().Version() != 1 || n2.node.Membership().Version() != 1 || n3.node.Membership().Version() < 2 {
				t.Fatalf("C1 was not chosen, or n1 or n2 adopted it, or n3 did not (split %v)", split)
			}
			for _, n := range []*simNode{n0, n1, n2, n3} {
				if c := n.disk.saved.Config.Value.Config; c != nil && c.Version() >= 2 {
					accepted = append(accepted, n.id)
				}
			}
			if !slices.Equal(accepted, []NodeID{"n0", "n1", "n3"}) {
				t.Fatalf("C1 accepted by %v, not by n0, n1 and n3", accepted)
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
			switch lost {
			case "none":
				restartAmnesiac(s, n3)
			case "new":
				s.crash(n3)
				n3.disk = &simDisk{} // the old disk is gone; a new one
				s.start(n3)
			}
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
	t.Logf("lost disk %q, bug %q: C1 accepted by %v; E=%d; n3 voted in C0 after its restart: %v; on version %d when it acquired; its token %d",
		lost, bug, accepted, e, liveC0, n3Version, token)
	switch {
	case bug == "" && liveC0:
		t.Errorf("n3, which accepted and adopted C1 before it lost its disk, voted in C0 again")
	case bug == "" && token != 0 && token <= e:
		t.Errorf("n3 was granted k0 at %d, not above %d", token, e)
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%s", firstLine(s.fail[0]))
	case bug != "":
		brokeRule(t, s, bug, "I2", fmt.Sprintf("n3 voted in C0: %v, token %d after %d", liveC0, token, e))
	}
}

// Liveness: newerMaybeChosen now also gates a restarted acceptor that
// caught up in full (the "enough" path of maybeGoLive), and it waits
// "to adopt it from a voter that did, or from chosenNewer, or to learn
// that it was not chosen". None of the three comes when a change was
// abandoned with its configuration accepted at voters that make, with
// those not heard from, a majority, but not at one ballot (chosenNewer
// needs one) and adopted by none: nothing in the mesh finishes it until an
// operator starts another change. Such an acceptor restored from its disk
// never adopted the newer configuration (Adopt saves it first), so voting
// in the one it has is what it did before its restart; before caf3d7f it
// went live.
//
// "ballots": three voters; an abandoned change left C1 at n1 (ballot b1,
// its proposer died) and at n2 (b2, written back by a second proposer that
// died too). n0 restarts from its disk; everyone answers it; n1 and n2 say
// C1. "down": five voters, n0 down for good (the change was to replace
// it); C1 accepted at n1 and n2 at one ballot; n4 restarts from its disk.
// In both, the restarted voter never votes again, and its Recovery names
// nothing it waits for.
func TestRestoredVoterVotesAgainBehindAnAbandonedChange(t *testing.T) {
	for _, c := range []string{"ballots", "down"} {
		t.Run(c, func(t *testing.T) { runRestoredVoterBehindAnAbandonedChange(t, c) })
	}
}

func runRestoredVoterBehindAnAbandonedChange(t *testing.T, c string) {
	voters, restarted := 3, 0
	if c == "down" {
		voters, restarted = 5, 4
	}
	cfg := faultFree(1, voters, 2, 1, 1)
	cfg.Disks, cfg.WallBack = true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 10*time.Second, 9*time.Second
	var (
		liveAt   time.Duration
		recovery Recovery
		state    AcceptorState
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(slices.DeleteFunc(slices.Clone(c0.Voters), func(v NodeID) bool { return v == "n0" }), true, 0)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		b2 := Ballot{Counter: 200, Incarnation: 1001, Node: "p2"}
		st := &configStepper{t: t, c: c0}
		s.at(1200*time.Millisecond, func() {
			h := n[voters].clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n[voters])
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:voters] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
			switch c {
			case "ballots":
				st.step(n[1], Op{Kind: OpPrepare, Ballot: b1}, true)
				st.step(n[1], Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
				st.step(n[2], Op{Kind: OpPrepare, Ballot: b2}, true)
				st.step(n[2], Op{Kind: OpAccept, Ballot: b2, Value: Value{Config: &c1}}, true)
			case "down":
				s.crash(n[0])
				for _, v := range []*simNode{n[1], n[2]} {
					st.step(v, Op{Kind: OpPrepare, Ballot: b1}, true)
					st.step(v, Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
				}
			}
			s.crash(n[restarted])
			s.start(n[restarted])
			var poll func()
			poll = func() {
				if liveAcceptor(n[restarted]) {
					liveAt = s.now
					return
				}
				s.after(time.Millisecond, poll)
			}
			s.after(time.Millisecond, poll)
		})
		s.at(9*time.Second, func() {
			if a := n[restarted].node.acc; a != nil {
				recovery, state = a.Recovery(), a.State()
			}
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("%s: restarted voter live at %v; at 9s its state is %v, Recovery %+v", c, liveAt, state, recovery)
	if liveAt == 0 || liveAt >= 9*time.Second {
		t.Errorf("the restarted voter, restored from its disk, did not vote again before the heal at 9s (restarted at 1.5s)")
	}
	if len(s.fail) > 0 {
		t.Errorf("%s", firstLine(s.fail[0]))
	}
}
