package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Audit of a8a5ac2: maybeGoLive's full-restart case and newerMaybeChosen's
// count of voters that lost their disk.

// acceptorOf returns n's acceptor, or nil when n is down.
func acceptorOf(n *simNode) *Acceptor {
	if !n.up || n.node == nil {
		return nil
	}
	return n.node.acc
}

// describeAcceptor describes n's acceptor for the log.
func describeAcceptor(n *simNode) string {
	a := acceptorOf(n)
	if a == nil {
		return string(n.id) + ": down"
	}
	return fmt.Sprintf("%s: %v v%d floorOnly %v restored %v amnesiac %v Recovery %+v",
		n.id, a.State(), a.Membership().Version(), a.FloorOnly(), a.restored, a.amnesiac, a.Recovery())
}

// Hole B: the full-restart case of maybeGoLive (recovering >= Majority and
// every voter answered) does not consult newerMaybeChosen, which the other
// way to go live of an acceptor that lost its disk does (the "enough"
// case). README: "A voter restarted without its data directory (or on a
// new one) while a change it may have voted for is unsettled waits for
// it".
//
// Voters n0 n1 n2, all with disks; each votes once (k0). n5 adds n3: C1
// (version 2) is accepted by n0 and n1 (n2 never hears n5), chosen, and
// adopted by n5 alone, which is cut off from everyone as it adopts (its
// change dies there). Then every voter restarts, n0 without its disk
// ("none") or on a new one ("new"; its probe hears n2 say it voted, and it
// recovers as one that forgot), n1 and n2 from theirs, n1 300ms after the
// others. n1, in its quarantine, answers the catch-ups of n0 and n2
// "recovering", with NewerConfig 2. n2 goes live (restartedMajority, on
// n0's "recovering, durable" answer with NewerConfig 0, before n1's
// arrives; or, "none", a full restart); n0, whose newerMaybeChosen is 2
// (itself and n1), concludes a full restart and votes in C0 with nothing
// of C1 in its configuration register. n1 is then cut off, and n4 adds
// itself: its change reads the configuration register at {n0 n2}, finds
// version 1, and writes its own version 2.
//
// On a8a5ac2, "new" breaks I5 (configuration id 2 names both [n0 n1 n2 n3]
// and [n0 n1 n2 n4]): one lost disk, caught by the probe, and a full
// restart. "none" holds only because n0, now without a disk, refuses to
// accept a configuration (ReasonNoDisk): the change finds no majority.
// With the full-restart case gated as the "enough" case is
// ((a.restored || !a.newerMaybeChosen())), n0 waits (Recovery.NewerConfig
// 2) in both.
func TestFullRestartWaitsForANewerConfigurationThatMayBeChosen(t *testing.T) {
	for _, lost := range []string{"none", "new"} {
		t.Run(lost, func(t *testing.T) { runFullRestartWithANewerConfiguration(t, lost, "") })
	}
	// The fault takes the gate away again: I5 with the new disk.
	t.Run("new/full-restart-ignores-newer", func(t *testing.T) { runFullRestartWithANewerConfiguration(t, "new", "full-restart-ignores-newer") })
}

func runFullRestartWithANewerConfiguration(t *testing.T, lost, bug string) {
	cfg := faultFree(1, 3, 3, 1, 1)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 9*time.Second, 8*time.Second
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
			h := n4.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n4)
		})
		s.at(1500*time.Millisecond, func() {
			for _, v := range n[:3] {
				if !liveAcceptor(v) || !v.disk.saved.Voted {
					t.Fatalf("%s does not vote at 1.5s", v.id)
				}
			}
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

// Hole A: a voter that lost its disk answers catch-ups with NewerConfig 0
// (and, on a new disk, Durable), and a voter restored from its disk counts
// it as one whose disk says it accepted no newer configuration
// (newerMaybeChosen's could; restartedMajority's lost).
//
// Voters n0 n1 n2; n5 adds n3. C1 is accepted by n0 and n1 (n2 never hears
// n5 while it is written) and adopted by n0, n2 and n3, a majority of its
// voters (n1 is cut off as n5 adopts it); the change goes on among them
// and settles (version 3). n5 takes and frees k0 at E through the new
// voters, without n1. Then n3 and n5 are cut off for good, wall clocks of
// new lives go an hour back, n1 restarts from its disk, and n0 and n2 on
// new disks: both must lose theirs (with one only, the other adopter
// answers every catch-up in C0 with the newer configuration, which the
// asker adopts, and neither the "enough" nor the full-restart case can
// conclude without its answer). n1 counts n0 and n2 as "did not accept"
// (its own vote alone: not maybe chosen) and as restarted with disks, and
// goes live in C0 (restartedMajority); n0 and n2, whose newerMaybeChosen
// is 2 (themselves and n1), go live through the full-restart case
// (hole B). n1's client then takes k0.
//
// On a8a5ac2 this breaks I2 (k0 granted an hour below E, in C0, after the
// mesh had settled version 3). Gating the full-restart case on
// newerMaybeChosen for acceptors not restored from their disk (the fix
// for hole B) keeps n0 and n2 waiting and the run clean; n1 alone in C0
// decides nothing. Marking an amnesiac's answers not Durable (hole A
// alone) does not: n1 then concludes a full restart instead.
func TestLostDisksCountAsMaybeAcceptingANewerConfiguration(t *testing.T) {
	cfg := faultFree(1, 3, 3, 1, 1)
	cfg.Disks, cfg.WallBack = true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = 9*time.Second, 8*time.Second
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
			h := n5.clients[0]
			h.holdTime = 50 * time.Millisecond
			h.acquire("k0", true, time.Second)
			s.flush(n5)
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
			s.wallBack = int64(time.Hour / time.Microsecond)
			for _, v := range n[:3] {
				s.crash(v)
			}
			n0.disk, n2.disk = &simDisk{}, &simDisk{}
			// n1 first: the probes of the new disks hear a voter that voted
			// (two new disks that hear each other first take themselves for
			// a new mesh, TestAudit3's root).
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
