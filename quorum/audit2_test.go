package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Audit of caf3d7f and f7247af (own votes on ConfigKey, restored
// acceptors, newerMaybeChosen): scripted runs.

// An acceptor that lost its disk and restarts on a new, empty one probes,
// hears that others voted, and recovers as one that forgot (amnesiac):
// quarantine, then a full catch-up. Going live, persistLive saves its
// configuration and sets restored, but nothing says it voted: its disk
// holds Voted=false, Reserved=0, no horizon. Its registers are now the
// copies that stand in for the votes of its earlier life (the catch-up's
// whole point). When it restarts again from that disk before it accepts
// anything, restore reads Voted=false and makes it Live at once, with no
// quarantine and no catch-up, its registers empty: a majority with it no
// longer meets the majority that chose what its earlier life voted for.
//
// Voters n0..n2, all with disks. k0 is granted and freed at epoch E by
// {n0 n1} (n2 cut off). n0 loses its disk: it restarts on a new one, its
// wall clock an hour back, and catches up from n1 and n2 (copying k0 at
// E). It goes live, accepts nothing, and restarts from the same disk: live
// at once, knowing nothing of k0. With n1 cut off, its client takes k0 from
// {n0 n2}, at a token from the wall clock: below E (I2).
//
// This failed on 077fba4 and before. Now such an acceptor's disk says it
// voted, with its horizon and marks, as it goes live; "forget-amnesia-vote"
// brings the old save back.
func TestRecoveredNewDiskVoterRemembersItVoted(t *testing.T) {
	for _, bug := range []string{"", "forget-amnesia-vote"} {
		runNewDiskVoterRestartedAgain(t, bug)
	}
}

func runNewDiskVoterRestartedAgain(t *testing.T, bug string) {
	cfg := faultFree(1, 3, 2, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
	var (
		e, token           uint64
		firstLive          time.Duration
		votedAfterFirst    bool
		liveAtOnce         bool
		keysAfterSecond    int
		copiedK0AfterFirst bool
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n3 := n[0], n[3]
		s.at(1100*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) {
					t.Fatalf("%s does not vote at 1.1s", v.id)
				}
			}
			isolate(s, 2, true)
			h := n3.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n3)
		})
		s.at(1800*time.Millisecond, func() {
			e = s.check.maxToken["k0"]
			if e == 0 || n3.clients[0].state != cIdle || s.stats.Releases != 1 {
				t.Fatalf("k0 was not granted and freed by 1.8s (token %d)", e)
			}
			if r := n[2].node.acc.regs["k0"]; r != nil && !r.accepted.IsZero() {
				t.Fatalf("n2 accepted k0: the scenario shows nothing")
			}
			isolate(s, 2, false)
			s.wallBack = int64(time.Hour / time.Microsecond)
			s.crash(n0)
			n0.disk = &simDisk{} // its disk is lost; a new, empty one
			s.start(n0)
		})
		var second func()
		var poll func()
		poll = func() {
			if !liveAcceptor(n0) {
				s.after(time.Millisecond, poll)
				return
			}
			firstLive = s.now
			votedAfterFirst = n0.disk.saved != nil && n0.disk.saved.Voted
			if r := n0.node.acc.regs["k0"]; r != nil && r.maxEpoch >= e {
				copiedK0AfterFirst = true
			}
			second()
		}
		s.at(1801*time.Millisecond, poll)
		second = func() {
			// n0 restarts from its (new) disk before accepting anything.
			s.crash(n0)
			s.start(n0)
			liveAtOnce = liveAcceptor(n0)
			keysAfterSecond = len(n0.node.acc.regs)
			s.after(10*time.Millisecond, func() {
				isolate(s, 1, true)
				q := n0.clients[0]
				q.holdTime = time.Hour
				q.acquire("k0", true, time.Second)
				s.flush(n0)
			})
			s.after(time.Second, func() {
				if q := n0.clients[0]; q.grant != nil {
					token = q.grant.token
				}
			})
		}
	}
	s := newSim(cfg)
	s.run()
	t.Logf("bug %q: E=%d; n0 (new disk) live at %v with k0 copied: %v; its disk says it voted: %v; after a restart from that disk live at once: %v with %d registers; its token %d",
		bug, e, firstLive, copiedK0AfterFirst, votedAfterFirst, liveAtOnce, keysAfterSecond, token)
	switch {
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%s", firstLine(s.fail[0]))
	case bug == "" && liveAtOnce:
		t.Errorf("n0, which recovered as an amnesiac on a new disk, went live at once after a restart from that disk (its disk says it never voted)")
	case bug == "" && token != 0 && token <= e:
		t.Errorf("n0's client was granted k0 at %d, not above %d", token, e)
	case bug != "":
		brokeRule(t, s, bug, "I2", fmt.Sprintf("live at once %v, token %d after %d", liveAtOnce, token, e))
	}
}

// Rule 2 for an acceptor on a new disk (the case f7247af leaves untested):
// it recovers as an amnesiac, merges a copy of the configuration register
// (it is not restored, so merge keeps it), goes live with it, and a
// prepare on ConfigKey saves its promise. The disk must hold no accepted
// configuration: the copy is no vote.
//
// Five voters; C1 (add n7) accepted at n1 alone at b1, so that n3 (one
// voter saying C1 plus itself: two of five) goes live in C0. n3 loses its
// disk and restarts on a new one, catches up from all four others and
// goes live holding a copy of C1 at b1. p2 prepares b2 at n0, n3 and n4.
func TestConfigPrepareOnANewDiskSavesNoCopy(t *testing.T) {
	cfg := faultFree(1, 5, 4, 1, 1)
	cfg.Disks, cfg.WallBack = true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 6*time.Second, 5*time.Second
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
		var poll func()
		poll = func() {
			if !liveAcceptor(n[3]) {
				s.after(time.Millisecond, poll)
				return
			}
			liveAt = s.now
			r := n[3].node.acc.regs[ConfigKey]
			merged = r != nil && r.value.Config != nil && r.value.Config.Equal(c1)
			for _, v := range []*simNode{n[0], n[3], n[4]} {
				st.step(v, Op{Kind: OpPrepare, Ballot: b2}, true)
			}
			d := n[3].disk.saved
			savedCopy = d.Config.Value.Config != nil
			promised = d.Config.Promise == b2
		}
		s.at(1501*time.Millisecond, poll)
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

// Liveness: a voter without a disk (or that lost it) waits while a newer
// configuration may have been chosen, counting itself as one that may
// have accepted it. With three voters, one voter that accepted an
// abandoned change is enough: it and the restarted voter "make a
// majority", and nothing in the mesh finishes the change. The quorum
// package says a voter change settles it (Recovery.NewerConfig). The mesh
// refused every voter change while it saw an alive voter without a data
// directory (mesh/voters.go checkDisks), the removal of that very voter
// included, so that the wait had no way out short of stopping the voter;
// now it allows that removal (TestVoterChangesNeedDataDirs).
//
// Voters n0..n2, n2 without a disk. C1 (remove n0) is accepted at n1
// alone, its proposer gone. n2 restarts. At 9 s it still does not vote.
func TestVoterChangeFreesAVoterWithoutDiskBehindAnAbandonedChange(t *testing.T) {
	cfg := faultFree(1, 3, 2, 1, 1)
	cfg.Disks, cfg.DisklessVoter, cfg.WallBack = true, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 10*time.Second, 9*time.Second
	var (
		liveAt   time.Duration
		recovery Recovery
		state    AcceptorState
		settled  time.Duration
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		c0 := s.boot
		c1 := c0.Next(slices.DeleteFunc(slices.Clone(c0.Voters), func(v NodeID) bool { return v == "n0" }), true, 0)
		b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
		st := &configStepper{t: t, c: c0}
		s.at(1500*time.Millisecond, func() {
			if n[2].disk != nil {
				t.Fatalf("n2 has a disk")
			}
			st.step(n[1], Op{Kind: OpPrepare, Ballot: b1}, true)
			st.step(n[1], Op{Kind: OpAccept, Ballot: b1, Value: Value{Config: &c1}}, true)
			s.crash(n[2])
			s.start(n[2])
			var poll func()
			poll = func() {
				if liveAcceptor(n[2]) {
					if liveAt == 0 {
						liveAt = s.now
					}
					return
				}
				s.after(time.Millisecond, poll)
			}
			s.after(time.Millisecond, poll)
		})
		s.at(8*time.Second, func() {
			if a := n[2].node.acc; a != nil {
				recovery, state = a.Recovery(), a.State()
			}
			// What the quorum package offers: a voter change (any).
			changeFrom(t, s, n[3], simChange{add: "n4"})
			var poll func()
			poll = func() {
				if liveAcceptor(n[2]) {
					settled = s.now
					return
				}
				s.after(time.Millisecond, poll)
			}
			s.after(time.Millisecond, poll)
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("n2 (no disk) live at %v; at 8s its state is %v, Recovery %+v; after a change from n3 at 8s, live at %v",
		liveAt, state, recovery, settled)
	switch {
	case liveAt != 0 && liveAt < 8*time.Second:
		t.Errorf("n2 went live at %v, before the change: no stall", liveAt)
	case recovery.NewerConfig == 0 || state != CatchingUp:
		t.Errorf("n2 at 8s: %v, Recovery %+v: not waiting for the newer configuration", state, recovery)
	case settled == 0:
		t.Errorf("the change from n3 did not free n2")
	default:
		t.Logf("n2 waited 6.5s behind one voter's abandoned accept; only a voter change freed it")
	}
	if len(s.fail) > 0 {
		t.Errorf("%s", firstLine(s.fail[0]))
	}
}
