package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Risks A and C of the stop-22 review: what a voter that lost its disk says
// in a catch-up answer. Before, a voter recovering on a new disk answered
// "recovering, Durable" with NewerConfig 0, as if its disk held every
// configuration it ever accepted: an asker counted it as a voter that did
// not accept a newer configuration (newerMaybeChosen's could) and as one
// restarted from its disk (restartedMajority). Now it answers Forgot, and
// Durable only after a restart from its own disk; an asker counts it as a
// voter it has not heard from.
//
// Voters n0…n4; n6 adds n5. C1 (version 2, pending) is accepted by n0, n1,
// n2 and n5 (n3 and n4 never hear n6 while it is written: 3 of the five
// voters before, 4 of the six after) and adopted by n6, which is then cut
// off for good with n5: the change is chosen, and nobody else knows it.
// n0, n1 and n2 restart, n0 and n1 on new disks (their probes hear n3 and
// n4 say they voted: they recover as ones that forgot), n2 from its disk,
// which holds its vote for C1.
//
// Trusting the new disks' answers (fault trust-forgotten), n0 and n1 count
// for C1 themselves and n2 only — two of five — and conclude a full restart
// in C0 (every voter answered, a majority recovering) before n2, still
// recovering, can hand them its copy of C1; n2 goes live in C0 too, on the
// word of two "restarted from disk" voters. With n2 cut off, n7 adds
// itself: its change reads the configuration register at {n0 n1 n3 n4},
// finds nothing newer than C0, and writes a second version 2 — two
// configurations with one id (I5). With the rule, n0 and n1 count n1 (and
// n0) as unknown: three of five may have chosen C1, and they wait; n7's
// change finds no majority of C0 that votes, and fails.
func TestAnswersOfVotersThatForgotCountAsUnheard(t *testing.T) {
	for _, bug := range []string{"", "trust-forgotten"} {
		t.Run("bug="+bug, func(t *testing.T) { runNewDisksBehindAChosenChange(t, bug) })
	}
}

func runNewDisksBehindAChosenChange(t *testing.T, bug string) {
	cfg := faultFree(1, 5, 3, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 9*time.Second, 8*time.Second
	var (
		accepted []NodeID
		live     = map[NodeID]string{}
		n7Change string
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n1, n2, n3, n4, n5, n6, n7 := n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]
		changing, gone, n2Cut := false, false, false
		s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
			if !gone && n6.node != nil && n6.node.Membership().Version() >= 2 {
				gone = true
			}
			if changing && !gone && (from == n6) != (to == n6) && (from == n3 || from == n4 || to == n3 || to == n4) {
				return time.Hour, true // n3 and n4 never hear the write of C1
			}
			if gone && ((from == n5 || from == n6) != (to == n5 || to == n6)) {
				return time.Hour, true // n5 and n6 take C1 with them
			}
			if n2Cut && (from == n2) != (to == n2) {
				return time.Hour, true
			}
			return 0, false
		}
		s.at(1200*time.Millisecond, func() {
			// Every voter votes once: the new disks' probes must hear
			// voters that voted.
			h := n7.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n7)
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:5] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
			changing = true
			changeFrom(t, s, n6, simChange{add: "n5"})
		})
		s.at(1700*time.Millisecond, func() {
			for _, v := range n[:5] {
				if c := v.disk.saved.Config.Value.Config; c != nil && c.Version() >= 2 {
					accepted = append(accepted, v.id)
				}
				if v.node.Membership().Version() != 1 {
					t.Fatalf("%s adopted version %d", v.id, v.node.Membership().Version())
				}
			}
			if !gone || !slices.Equal(accepted, []NodeID{"n0", "n1", "n2"}) {
				t.Fatalf("C1 not chosen by n0 n1 n2 and n5 alone (n6 adopted: %v; accepted %v)", gone, accepted)
			}
			for _, v := range n[:3] {
				s.crash(v)
			}
			n0.disk, n1.disk = &simDisk{}, &simDisk{}
			s.start(n2)
			s.start(n0)
			s.start(n1)
		})
		var poll func()
		poll = func() {
			for _, v := range n[:3] {
				if live[v.id] == "" && liveAcceptor(v) {
					live[v.id] = fmt.Sprintf("%v %s", s.now, describeAcceptor(v))
				}
			}
			if live["n0"] != "" || live["n1"] != "" || s.now > 5*time.Second {
				// Cut n2 off (it holds its vote for C1), and let n7 add
				// itself.
				n2Cut = true
				s.after(10*time.Millisecond, func() { changeFrom(t, s, n7, simChange{add: "n7"}) })
				s.after(2*time.Second, func() {
					m := n7.node.Membership()
					n7Change = fmt.Sprintf("version %d %v pending %v", m.Version(), m.Voters, m.Pending)
				})
				return
			}
			s.after(100*time.Microsecond, poll)
		}
		s.at(1701*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("C1 accepted by %v and n5; n7 then on %s", accepted, n7Change)
	for _, id := range []NodeID{"n0", "n1", "n2"} {
		t.Logf("live again: %s", live[id])
	}
	switch {
	case bug != "":
		brokeRule(t, s, bug, "I5", "")
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case live["n0"] != "" || live["n1"] != "":
		t.Errorf("a voter that lost its disk voted in C0 while C1 may have been chosen: %q %q", live["n0"], live["n1"])
	}
}
