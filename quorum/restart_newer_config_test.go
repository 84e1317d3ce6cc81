package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A restarted voter and configurations newer than the one it restarts on
// (design.md R57, R65–R67): without its earlier disk it counts itself, and
// every voter that says it forgot, as one that may have accepted a newer
// configuration; neither its catch-up nor a full restart goes live in the
// old configuration while a newer one may have been chosen; and the waits
// this costs end (a restored voter votes again, and a voter change frees a
// voter without a disk).

// A full restart (every voter answered, a majority recovering) goes live in
// the configuration it restarts on only if no newer one may have been
// chosen, as a catch-up does (design.md R67).
//
// Voters n0 n1 n2, all with disks; each votes once (k0). n5 adds n3: C1
// (version 2) is accepted by n0 and n1 (n2 never hears n5), chosen, and
// adopted by n5 alone, which is cut off from everyone as it adopts (its
// change dies there). Then every voter restarts: n0 without its disk
// ("none") or on a new, empty one ("new": it hears n2 say it voted, and
// recovers as one that forgot), n1 and n2 from theirs, n1 300ms after the
// others. n1, in its quarantine, answers the catch-ups of n0 and n2
// "recovering", with NewerConfig 2. n2 goes live in C0; n0, counting itself
// and n1 as voters that may have accepted C1 (newerMaybeChosen 2), waits.
// n1 is then cut off, and n4 adds itself: its change reads the
// configuration register at {n0 n2}.
//
// With fault full-restart-ignores-newer n0 concludes a full restart and
// votes in C0 with nothing of C1 in its configuration register; in the
// "new" run n4's change finds version 1 there and writes its own version 2:
// configuration id 2 names both [n0 n1 n2 n3] and [n0 n1 n2 n4] (I5). (In
// the "none" run n0, without a disk, accepts no configuration: the change
// finds no majority either way.)
func TestFullRestartWaitsForANewerConfigurationThatMayBeChosen(t *testing.T) {
	for _, lost := range []string{"none", "new"} {
		t.Run(lost, func(t *testing.T) { runFullRestartWithANewerConfiguration(t, lost, "") })
	}
	// The fault takes the gate away again: I5 with the new disk.
	t.Run("new/full-restart-ignores-newer", func(t *testing.T) { runFullRestartWithANewerConfiguration(t, "new", "full-restart-ignores-newer") })
}

func runFullRestartWithANewerConfiguration(t *testing.T, lost, bug string) {
	cfg := onDisks(bug, 3, 3, 1, 1, 9*time.Second, 8*time.Second)
	var (
		accepted         []NodeID
		n0Live, n2Live   string
		n0FloorOnly      bool
		n4Config, n5Conf Membership
		n0NewerAtLive    uint64
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n1, n2, n4, n5 := n[0], n[1], n[2], n[4], n[5]
		split, changing := false, false
		s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
			if !split && n5.node != nil && n5.node.Membership().Version() >= 2 {
				split = true
			}
			if changing && !split && (from == n2 && to == n5 || from == n5 && to == n2) {
				return time.Hour, true // n2 never hears the change
			}
			if split && (from == n5 || to == n5) {
				return time.Hour, true // n5 dies with its change, in effect
			}
			return 0, false
		}
		s.at(1200*time.Millisecond, func() {
			// Every voter votes once (a new disk's probe must not find a
			// voter that never voted).
			takeAndRelease(n4, "k0", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:3]...)
			changing = true
			changeFrom(t, s, n5, simChange{add: "n3"})
		})
		s.at(1700*time.Millisecond, func() {
			for _, v := range n[:3] {
				if c := v.disk.saved.Config.Value.Config; c != nil && c.Version() >= 2 {
					accepted = append(accepted, v.id)
				}
				if v.node.Membership().Version() != 1 {
					t.Fatalf("%s adopted version %d", v.id, v.node.Membership().Version())
				}
			}
			if !split || !slices.Equal(accepted, []NodeID{"n0", "n1"}) {
				t.Fatalf("C1 not chosen by n0 and n1 alone (split %v, accepted %v)", split, accepted)
			}
			n5Conf = n5.node.Membership()
			// A full restart; n0's disk is lost.
			for _, v := range n[:3] {
				s.crash(v)
			}
			switch lost {
			case "none":
				n0.disk = nil
				s.cfg.Disks = false
				s.start(n0)
				s.cfg.Disks = true
			case "new":
				n0.disk = &simDisk{}
				s.start(n0)
			}
			s.start(n2)
			s.after(300*time.Millisecond, func() { s.start(n1) })
		})
		var poll func()
		poll = func() {
			if n0Live == "" && liveAcceptor(n0) {
				n0Live = describeAcceptor(n0)
				n0FloorOnly = n0.node.acc.FloorOnly()
			}
			if n2Live == "" && liveAcceptor(n2) {
				n2Live = describeAcceptor(n2)
			}
			if n0Live == "" {
				if a := acceptorOf(n0); a != nil && a.catchUp != nil {
					n0NewerAtLive = a.newerMaybeChosenVersion()
				}
			}
			if n2Live != "" && (n0Live != "" && !liveAcceptor(n1) || s.now > 5*time.Second) {
				// n0 and n2 vote in C0 and n1 still waits (or n0 waits
				// still at 5s). Cut n1 off, and let n4 add itself.
				isolate(s, 1, true)
				s.after(10*time.Millisecond, func() { changeFrom(t, s, n4, simChange{add: "n4"}) })
				s.after(1500*time.Millisecond, func() { n4Config = n4.node.Membership() })
				return
			}
			if s.now > 6*time.Second {
				t.Logf("at 6s: %s; %s; %s", describeAcceptor(n0), describeAcceptor(n1), describeAcceptor(n2))
				return
			}
			s.after(50*time.Microsecond, poll)
		}
		s.at(1701*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("lost %q: C1 accepted by %v, adopted by n5 (%d %v); n0 live: %q (floorOnly %v; newerMaybeChosen just before: %d); n2 live: %q; n4 then on %d %v pending %v",
		lost, accepted, n5Conf.Version(), n5Conf.Voters, n0Live, n0FloorOnly, n0NewerAtLive, n2Live, n4Config.Version(), n4Config.Voters, n4Config.Pending)
	switch {
	case bug == "" && len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case bug != "":
		brokeRule(t, s, bug, "I5", "")
	}
}

// A voter that lost its disk answers catch-ups with NewerConfig 0, for its
// disk holds no vote; a voter restored from its disk must not count it as
// one that accepted no newer configuration (design.md R57, R65), nor may
// the voters that lost their disks go live by a full restart in the old
// configuration (R67).
//
// Voters n0 n1 n2; n5 adds n3. C1 is accepted by n0 and n1 (n2 never hears
// n5 while it is written) and adopted by n0, n2 and n3, a majority of its
// voters (n1 is cut off as n5 adopts it); the change goes on among them
// and settles (version 3). n5 takes and frees k0 at E through the new
// voters, without n1. Then n3 and n5 are cut off for good, wall clocks of
// new lives go an hour back, n1 restarts from its disk, and n0 and n2 on
// new, empty disks (both: with one only, the other adopter answers every
// catch-up with the newer configuration, which the asker adopts). n1 goes
// live in C0 alone, which decides nothing; n0 and n2, which may have
// accepted C1 (themselves and n1), wait for it. n1's client then takes k0:
// it must not be granted below E. Counting n0 and n2 as voters that did not
// accept C1 and restarted with disks, n1 would go live with them in C0,
// and k0 be granted an hour below E after the mesh settled version 3 (I2).
func TestLostDisksCountAsMaybeAcceptingANewerConfiguration(t *testing.T) {
	cfg := onDisks("", 3, 3, 1, 1, 9*time.Second, 8*time.Second)
	var (
		e, token  uint64
		accepted  []NodeID
		adopted   []string
		live      = map[NodeID]string{}
		n1Mark    uint64
		versionAt uint64
	)
	cfg.Script = func(s *sim) {
		n := s.nodes
		n0, n1, n2, n3, n5 := n[0], n[1], n[2], n[3], n[5]
		split, changing, gone := false, false, false
		s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
			if !split && n5.node != nil && n5.node.Membership().Version() >= 2 {
				split = true
			}
			if changing && !split && (from == n2 && to == n5 || from == n5 && to == n2) {
				return time.Hour, true // n2 never hears the write of C1
			}
			if split && !gone && (from == n1) != (to == n1) {
				return time.Hour, true // n1 never adopts C1
			}
			if gone && ((from == n3 || from == n5) != (to == n3 || to == n5)) {
				return time.Hour, true
			}
			return 0, false
		}
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
			changing = true
			changeFrom(t, s, n5, simChange{add: "n3"})
		})
		s.at(2200*time.Millisecond, func() {
			for _, v := range n[:4] {
				if v.disk != nil && v.disk.saved != nil {
					if c := v.disk.saved.Config.Value.Config; c != nil && c.Version() == 2 {
						accepted = append(accepted, v.id)
					}
				}
				m := v.node.Membership()
				adopted = append(adopted, fmt.Sprintf("%s:v%d", v.id, m.Version()))
			}
			if n1.node.Membership().Version() != 1 || n0.node.Membership().Version() < 2 || n2.node.Membership().Version() < 2 || n3.node.Membership().Version() < 2 {
				t.Fatalf("not adopted as staged: %v (accepted %v)", adopted, accepted)
			}
			takeAndRelease(n5, "k0", 50*time.Millisecond)
		})
		s.at(2600*time.Millisecond, func() {
			e = s.check.maxToken["k0"]
			if e == 0 || n5.clients[0].state != cIdle {
				t.Fatalf("n5 was not granted and freed k0 (token %d)", e)
			}
			if r := n1.node.acc.regs["k0"]; r != nil && !r.accepted.IsZero() {
				t.Fatalf("n1 accepted k0: the scenario shows nothing")
			}
			n1Mark = n1.disk.saved.Reserved
			gone = true
			wallClocksBack(s, time.Hour)
			for _, v := range n[:3] {
				s.crash(v)
			}
			n0.disk, n2.disk = &simDisk{}, &simDisk{}
			// n1 first: the probes of the new disks hear a voter that voted
			// (two new disks that hear each other first take themselves for
			// a new mesh: TestFreshAnswerDoesNotCountAsARestartedVoter).
			s.start(n1)
			s.after(10*time.Millisecond, func() { s.start(n2) })
			s.after(20*time.Millisecond, func() { s.start(n0) })
		})
		var poll func()
		poll = func() {
			for _, v := range n[:3] {
				if live[v.id] == "" && liveAcceptor(v) {
					live[v.id] = fmt.Sprintf("%v %s", s.now, describeAcceptor(v))
				}
			}
			if len(live) == 3 {
				versionAt = n1.node.Membership().Version()
				q := n1.clients[0] // its wall clock an hour back
				q.holdTime = time.Hour
				q.acquire("k0", true, time.Second)
				s.flush(n1)
				s.after(time.Second, func() {
					if q.grant != nil {
						token = q.grant.token
					}
				})
				return
			}
			if s.now > 7*time.Second {
				t.Logf("at 7s: %s; %s; %s", describeAcceptor(n0), describeAcceptor(n1), describeAcceptor(n2))
				return
			}
			s.after(100*time.Microsecond, poll)
		}
		s.at(2601*time.Millisecond, poll)
	}
	s := newSim(cfg)
	s.run()
	t.Logf("disks holding version 2 at 2.2s (n0 holds version 3 by then): %v; memberships at 2.2s %v; E=%d; n1's epoch mark %d", accepted, adopted, e, n1Mark)
	for _, id := range []NodeID{"n0", "n1", "n2"} {
		t.Logf("live again: %s", live[id])
	}
	t.Logf("n1 on version %d when it acquired; its token %d", versionAt, token)
	switch {
	case len(s.fail) > 0:
		t.Errorf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case token != 0 && token <= e:
		t.Errorf("n1's client was granted k0 at %d, not above %d", token, e)
	}
}

// A voter that lost its disk says so in its catch-up answers (Forgot), and
// Durable only after a restart from its own disk; an asker counts it as a
// voter it has not heard from (design.md R57), never as one restarted from
// its disk that accepted no newer configuration.
//
// Voters n0..n4; n6 adds n5. C1 (version 2, pending) is accepted by n0, n1,
// n2 and n5 (n3 and n4 never hear n6 while it is written: 3 of the five
// voters before, 4 of the six after) and adopted by n6, which is then cut
// off for good with n5: the change is chosen, and nobody else knows it. n0,
// n1 and n2 restart, n0 and n1 on new, empty disks (they hear n3 and n4 say
// they voted, and recover as ones that forgot), n2 from its disk, which
// holds its vote for C1. Then n2 is cut off, and n7 adds itself.
//
// With the rule, n0 and n1 count each other as unknown: three of five may
// have chosen C1, they wait, and n7's change finds no majority of C0 that
// votes. With fault trust-forgotten they count for C1 themselves and n2
// only (two of five) and conclude a full restart in C0 before n2, still
// recovering, can hand them its copy of C1; n2 goes live in C0 too, on the
// word of two "restarted from disk" voters. n7's change then reads the
// configuration register at {n0 n1 n3 n4}, finds nothing newer than C0,
// and writes a second version 2: two configurations with one id (I5).
func TestAnswersOfVotersThatForgotCountAsUnheard(t *testing.T) {
	for _, bug := range []string{"", "trust-forgotten"} {
		t.Run("bug="+bug, func(t *testing.T) { runNewDisksBehindAChosenChange(t, bug) })
	}
}

func runNewDisksBehindAChosenChange(t *testing.T, bug string) {
	cfg := onDisks(bug, 5, 3, 1, 1, 9*time.Second, 8*time.Second)
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
			takeAndRelease(n7, "k0", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:5]...)
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

// A voter restarted without its disk, or on a new one, counts itself as one
// that may have accepted any newer configuration (design.md R66): its
// earlier life may have been one of the majority that chose it.
//
// Voters n0..n3, all with disks; n5 adds n4. n2 never hears the change, so
// C1 is accepted by n0, n1 and n3 (a majority of four), and adopted by n0,
// n3 and n4 but not n1 (n1 and n2 are cut off from everyone as soon as n5
// adopts C1). k0 is granted and freed at epoch E in C1 by {n0 n3 n4}. n3
// then loses its disk: it restarts with none ("none") or with a new, empty
// one ("new"), its wall clock an hour back, and can reach only n1 and n2.
// n1 says it accepted C1, n2 that it did not, n0 is unheard. With the rule
// n3 counts itself with n0 and n1, C1 may have been chosen, and n3 waits.
// With fault forget-own-vote it counts itself as "did not accept": n0 and
// n1 are two of four, C1 "cannot have been chosen", and n3 votes in C0 with
// n1 and n2, a majority of C0 that knows nothing of k0; its client is
// granted k0 below E (I2).
func TestVoterWithoutItsDiskCountsItselfAsMaybeAccepting(t *testing.T) {
	for _, lost := range []string{"none", "new"} {
		for _, bug := range []string{"", "forget-own-vote"} {
			t.Run(lost+"/"+bug, func(t *testing.T) { runVoterWithoutDiskThatAccepted(t, lost, bug) })
		}
	}
}

func runVoterWithoutDiskThatAccepted(t *testing.T, lost, bug string) {
	cfg := onDisks(bug, 4, 3, 1, 1, 8*time.Second, 7*time.Second)
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
			wallClocksBack(s, time.Hour)
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

// A voter without a data directory restarts on the founding voters,
// whatever configurations it adopted and voted in since. It must not go
// live in the old configuration while a newer one may have been chosen
// (design.md R65): the old configuration's majority would form again, and
// a grant chosen in the new configuration with this voter (the one voter of
// the new majority among the old configuration's) be neither listed nor
// seen.
//
// Voters n0..n3 (four, so that a majority of the old voters less n3 is two:
// n1 and n2); n3 has no data directory. n5 adds n4: n0, n1 and n2 accept
// the pending configuration C1, but only n0, n3 and n4 adopt it (n1 and n2
// are cut off from everyone as soon as n5 adopts it). k0 is granted and
// freed at epoch E in C1 by {n0 n3 n4}. n3 restarts without its state, its
// wall clock an hour back, and can reach only n1 and n2. Their answers say
// they accepted C1 (newerMaybeChosen): with n0 unheard, n0, n1 and n2 may
// have chosen it, so n3 does not vote in C0; its Recovery says it waits for
// version 2. Its client must not be granted k0 below E. With fault
// ignore-newer-config n3 goes live in C0 and {n1 n2 n3} grants k0 again,
// below E (I2).
func TestVoterWithoutDiskDoesNotVoteInAReplacedConfiguration(t *testing.T) {
	for _, bug := range []string{"", "ignore-newer-config"} {
		cfg := onDisks(bug, 4, 3, 1, 1, 8*time.Second, 7*time.Second)
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
				wallClocksBack(s, time.Hour)
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

// A voter restored from its disk that caught up in full votes again even
// when a change was abandoned with its configuration accepted at voters
// that make, with those not heard from, a majority, but not at one ballot,
// and adopted by none (design.md R65's liveness): nothing in the mesh
// finishes such a change until an operator starts another, and a restored
// voter never adopted the newer configuration (Adopt saves it first), so
// voting in the one it has is what it did before its restart.
//
// "ballots": three voters; an abandoned change left C1 at n1 (ballot b1,
// its proposer died) and at n2 (b2, written back by a second proposer that
// died too). n0 restarts from its disk; everyone answers it; n1 and n2 say
// C1. "down": five voters, n0 down for good (the change was to replace
// it); C1 accepted at n1 and n2 at one ballot; n4 restarts from its disk.
// In both the restarted voter votes again before the heal.
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
	cfg := onDisks("", voters, 2, 1, 1, 10*time.Second, 9*time.Second)
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
			takeAndRelease(n[voters], "k0", 50*time.Millisecond)
		})
		s.at(1500*time.Millisecond, func() {
			mustVote(t, n[:voters]...)
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
			s.after(time.Millisecond, func() { whenLive(n[restarted], func() { liveAt = s.now }) })
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

// A voter without a disk (or that lost it) waits while a newer
// configuration may have been chosen, counting itself as one that may have
// accepted it (design.md R65, R66). With three voters one voter that
// accepted an abandoned change is enough to make it wait: it and the
// restarted voter could be a majority, and nothing in the mesh finishes the
// change. A voter change, any, settles it (Recovery.NewerConfig); the mesh
// allows the removal of a voter without a data directory for that reason
// (TestVoterChangesNeedDataDirs).
//
// Voters n0..n2, n2 without a disk. C1 (remove n0) is accepted at n1
// alone, its proposer gone. n2 restarts. At 8s it still does not vote,
// catching up and waiting for version 2; n3 then adds n4, and n2 votes.
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
			s.after(time.Millisecond, func() { whenLive(n[2], func() { liveAt = s.now }) })
		})
		s.at(8*time.Second, func() {
			if a := n[2].node.acc; a != nil {
				recovery, state = a.Recovery(), a.State()
			}
			// What the quorum package offers: a voter change (any).
			changeFrom(t, s, n[3], simChange{add: "n4"})
			s.after(time.Millisecond, func() { whenLive(n[2], func() { settled = s.now }) })
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
