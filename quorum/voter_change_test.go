package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Voter changes in staged runs (design.md R39, R51, R53, R62, R63, R73):
// rules of voter changes that random runs break too rarely to catch, each
// in a scenario that needs it, run with the rule and with it broken.

// Moving keys into new voters lists them at a majority of the voters
// before the change, not at one: a voter that missed a grant (cut off
// while it was written) lists nothing of it (design.md R62). Here n0 missed n3's grant of
// k0, then drives two changes, {n0 n1 n2} → add n4 → remove n1, listing at
// itself first. With the rule k0 moves to n4 both times; without it, it
// never does, and once n3 is cut off, {n0 n4} — a majority of {n0 n2 n4}
// — grants k0 to n0 while n3 still holds it.
func TestReconfigListsKeysAtAMajority(t *testing.T) {
	for _, bug := range []string{"", "list-from-one"} {
		cfg := faultFree(1, 3, 2, 1, 1)
		cfg.Bug, cfg.Disks = bug, true
		cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second // the cuts are the faults
		var granted bool
		cfg.Script = func(s *sim) {
			n0, h, w := s.nodes[0], s.nodes[3].clients[0], s.nodes[0].clients[0]
			h.holdTime = time.Minute
			s.at(300*time.Millisecond, func() {
				isolate(s, 0, true)
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			s.at(600*time.Millisecond, func() {
				if h.grant == nil {
					t.Fatalf("n3 holds nothing")
				}
				isolate(s, 0, false)
				isolate(s, 3, true) // the holder goes quiet; its lease runs on
				changeFrom(t, s, n0, simChange{add: "n4"})
			})
			s.at(700*time.Millisecond, func() {
				if want := []NodeID{"n0", "n1", "n2", "n4"}; !slices.Equal(s.m.Voters, want) || s.m.Pending {
					t.Fatalf("after the first change the voters are %v (pending %v), want %v", s.m.Voters, s.m.Pending, want)
				}
				changeFrom(t, s, n0, simChange{remove: "n1"})
			})
			s.at(800*time.Millisecond, func() {
				if want := []NodeID{"n0", "n2", "n4"}; !slices.Equal(s.m.Voters, want) || s.m.Pending {
					t.Fatalf("after the second change the voters are %v (pending %v), want %v", s.m.Voters, s.m.Pending, want)
				}
				// n2 holds k0's timer: cut it off from the waiter, whose
				// majority is then n0 and n4 alone.
				s.cut[[2]int{0, 2}], s.cut[[2]int{2, 0}] = true, true
				w.acquire("k0", true, 300*time.Millisecond)
				s.flush(w.n)
			})
			s.at(1200*time.Millisecond, func() { granted = w.grant != nil })
		}
		s := newSim(cfg)
		s.run()
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && granted:
			t.Errorf("n0 was granted k0 while n3 held it")
		case bug != "":
			brokeRule(t, s, bug, "I1", fmt.Sprintf("n0 granted: %v, keys moved %d", granted, s.stats.KeysMoved))
		}
		t.Logf("bug %q: keys moved %d, changes done %d", bug, s.stats.KeysMoved, s.stats.ChangesDone)
	}
}

// A voter that restarts while a change is pending catches up from the
// voters before the change too, not only from the new ones (design.md
// R39). Here n1 missed
// the release of k0 (cut off while it was written at n0 and n2), n3 starts
// adding n4 and is cut off as soon as the joint configuration is adopted
// (before it moves any key), and n0 restarts with its memory lost, then
// catches up while n2 is cut off from it. From n1 and n4 alone — enough of
// the new voters — it would learn only the grant n1 still holds, and a read
// at n0 and n1 would return a holder after the release was acknowledged;
// with the rule it waits for n2.
func TestReconfigPendingCatchUpAsksThePreviousVoters(t *testing.T) {
	for _, bug := range []string{"", "skip-prev-catch-up"} {
		cfg := faultFree(1, 3, 2, 1, 1)
		cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
		cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
		var liveAt time.Duration
		cfg.Script = func(s *sim) {
			h, r := s.nodes[3].clients[0], s.nodes[1].clients[0]
			h.holdTime = 100 * time.Millisecond
			s.at(300*time.Millisecond, func() {
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			var granted func()
			granted = func() {
				if h.grant == nil {
					s.after(100*time.Microsecond, granted)
					return
				}
				isolate(s, 1, true) // n1 misses the release
			}
			s.at(300*time.Millisecond, granted)
			s.at(600*time.Millisecond, func() {
				isolate(s, 1, false)
				changeFrom(t, s, s.nodes[3], simChange{add: "n4"})
				var watch func()
				watch = func() {
					if s.m.Pending {
						isolate(s, 3, true) // the change stops half done
						return
					}
					s.after(50*time.Microsecond, watch)
				}
				watch()
			})
			s.at(700*time.Millisecond, func() {
				if !s.m.Pending {
					t.Fatalf("the change is not pending: %v", s.m)
				}
				s.crash(s.nodes[0])
				s.start(s.nodes[0])
				s.cut[[2]int{0, 2}], s.cut[[2]int{2, 0}] = true, true
			})
			// Once n0 votes again (after its quarantine), read k0 at n0 and
			// n1: n2 is cut off from n0 still, and n4 is a voter of the
			// new configuration only.
			var poll func()
			poll = func() {
				if s.nodes[0].node.acc != nil && s.nodes[0].node.acc.State() == Live {
					liveAt = s.now
					s.cut[[2]int{1, 2}], s.cut[[2]int{2, 1}] = true, true
					r.read("k0")
					s.flush(r.n)
					return
				}
				s.after(10*time.Millisecond, poll)
			}
			s.at(800*time.Millisecond, poll)
		}
		s := newSim(cfg)
		s.run()
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && liveAt < cfg.HealAt:
			t.Errorf("n0 voted at %v, before n2 could answer it (%v)", liveAt, cfg.HealAt)
		case bug != "":
			brokeRule(t, s, bug, "I8", fmt.Sprintf("n0 voted at %v", liveAt))
		}
		t.Logf("bug %q: n0 voted again at %v", bug, liveAt)
	}
}

// No register is forgotten while a change is pending (design.md R73). A
// voter that restarts
// then catches up from the voters before the change too (the rule above),
// and a removed voter, asked by no forget of the new configuration, may
// hold a value the current voters have since moved past and forgotten:
// the restarted voter would take it back. Here n2 misses the release of
// k0 (cut off while it is written at n0 and n1), n3 starts removing n2 and
// is cut off as soon as the joint configuration is adopted, k0 goes idle
// at n0 and n1, and n0 restarts with its memory lost and catches up from
// n1 and n2. Had n0 and n1 forgotten k0, n0 would learn from n2 alone the
// grant released long ago, and a read at n0 and n1 would return it; with
// the rule n1 still holds the release, above the grant.
func TestReconfigPendingChangeForgetsNothing(t *testing.T) {
	for _, bug := range []string{"", "forget-while-pending"} {
		cfg := faultFree(1, 3, 2, 1, 1)
		cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
		cfg.MaxRegisters, cfg.RegisterIdle = 3, 300*time.Millisecond
		cfg.Duration, cfg.HealAt = 8*time.Second, 7*time.Second
		var forgotten bool // n1 had forgotten k0 when n0 restarted
		var liveAt time.Duration
		cfg.Script = func(s *sim) {
			h, r := s.nodes[3].clients[0], s.nodes[4].clients[0]
			h.holdTime = 100 * time.Millisecond
			s.at(300*time.Millisecond, func() {
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			var granted func()
			granted = func() {
				if h.grant == nil {
					s.after(100*time.Microsecond, granted)
					return
				}
				isolate(s, 2, true) // n2 misses the release
			}
			s.at(300*time.Millisecond, granted)
			s.at(600*time.Millisecond, func() {
				isolate(s, 2, false)
				changeFrom(t, s, s.nodes[3], simChange{remove: "n2"})
				var watch func()
				watch = func() {
					if s.m.Pending {
						isolate(s, 3, true) // the change stops half done
						return
					}
					s.after(50*time.Microsecond, watch)
				}
				watch()
			})
			s.at(1500*time.Millisecond, func() {
				if !s.m.Pending || !slices.Equal(s.m.Prev, []NodeID{"n0", "n1", "n2"}) {
					t.Fatalf("the removal of n2 is not pending: %+v", s.m)
				}
				forgotten = s.nodes[1].node.acc.regs["k0"] == nil
				s.crash(s.nodes[0])
				s.start(s.nodes[0])
			})
			// Once n0 votes again, read k0 (at n0 and n1, the voters).
			var poll func()
			poll = func() {
				if s.nodes[0].node.acc != nil && s.nodes[0].node.acc.State() == Live {
					liveAt = s.now
					r.read("k0")
					s.flush(r.n)
					return
				}
				s.after(10*time.Millisecond, poll)
			}
			s.at(1600*time.Millisecond, poll)
		}
		s := newSim(cfg)
		s.run()
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && forgotten:
			t.Errorf("n1 forgot k0 while the change was pending")
		case liveAt == 0:
			t.Errorf("bug %q: n0 never voted again", bug)
		case bug != "" && !forgotten:
			t.Errorf("with %s n1 kept k0: the scenario shows nothing", bug)
		case bug != "":
			brokeRule(t, s, bug, "I8", "")
		}
		t.Logf("bug %q: k0 forgotten at n1 by the restart: %v; n0 voted again at %v", bug, forgotten, liveAt)
	}
}

// A voter being removed that restarts from its disk once it has adopted the
// pending configuration runs no acceptor: the configuration on its disk
// does not name it. What it knew is not needed: a grant was accepted by a
// majority of the voters before the change, and every other of them stays
// a voter. Here k0 is granted and freed at epoch E at n1 and n2 alone (n0
// cut off); n3 removes n2 while n0 is still cut off, so that k0 cannot
// move yet; then n1 and n2 restart from their disks. k0's registers are
// gone everywhere, and E lives on only in the epoch marks of n1 and n2,
// whose acceptor nobody asks again. n1 waits out its quarantine and goes
// live on the word of n0 (two of the three voters before the change
// restarted: floor only); n3's change gives up meanwhile (its listing
// needs n1: n2 answers as a non-voter), and the next change finishes it,
// as the mesh's autopilot would, carrying n1's mark into the settled
// configuration's epoch floor. n4, restarted with its wall clock an hour
// back so that only the marks keep tokens up, must then be granted k0
// above E (design.md R51, R64). With "ignore-reserved" (a restart from
// disk forgets its epoch mark) n4 is granted below E: I2.
func TestReconfigRemovedVoterRestartsWithoutAnAcceptor(t *testing.T) {
	for _, bug := range []string{"", "ignore-reserved"} {
		cfg := faultFree(1, 3, 2, 1, 1)
		cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
		cfg.Drift, cfg.Clocks = 0, ""
		var e, token uint64
		var noAcceptor bool
		var w *simClient
		cfg.Script = func(s *sim) {
			n1, n2, n3, n4 := s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[4]
			h := n3.clients[0]
			h.holdTime = 50 * time.Millisecond
			s.at(300*time.Millisecond, func() {
				isolate(s, 0, true)
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			s.at(330*time.Millisecond, func() {
				if h.grant == nil {
					t.Fatalf("n3 was not granted k0")
				}
				e = h.grant.token
			})
			// n0 stays cut off through the change: n1 and n2 choose it,
			// and the move of k0 into [n0 n1] waits for n0.
			s.at(600*time.Millisecond, func() { changeFrom(t, s, n3, simChange{remove: "n2"}) })
			s.at(650*time.Millisecond, func() {
				if n2.node.Membership().IsVoter("n2") {
					t.Fatalf("n2 has not adopted its removal: %v", n2.node.Membership().Voters)
				}
				wallClocksBack(s, time.Hour)
				for _, n := range []*simNode{n1, n2, n4} {
					s.crash(n)
					s.start(n)
				}
				noAcceptor = n2.node.Acceptor() == nil
				w = n4.clients[0]
				w.holdTime = time.Hour
			})
			s.at(700*time.Millisecond, func() { isolate(s, 0, false) })
			// n3's change gave up while n1 waited out its quarantine (the
			// listing needs it: n2 answers as a non-voter); the next
			// change finishes it, as the mesh's autopilot would.
			s.at(2*time.Second, func() { changeFrom(t, s, n3, simChange{remove: "n2"}) })
			s.at(3*time.Second, func() {
				w.acquire("k0", true, 2*time.Second)
				s.flush(w.n)
			})
			s.at(3500*time.Millisecond, func() {
				if w.grant != nil {
					token = w.grant.token
				}
			})
		}
		s := newSim(cfg)
		s.run()
		switch {
		case !noAcceptor:
			t.Fatalf("bug %q: n2 restarted with an acceptor: the scenario shows nothing", bug)
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && (!slices.Equal(s.m.Voters, []NodeID{"n0", "n1"}) || s.m.Pending):
			t.Errorf("the change did not finish: voters %v, pending %v", s.m.Voters, s.m.Pending)
		case bug == "" && token == 0:
			t.Errorf("n4 was not granted k0 after the change")
		case bug == "" && token <= e:
			t.Errorf("n4 was granted k0 at %d, not above %d", token, e)
		case bug != "":
			brokeRule(t, s, bug, "I2", "the scenario no longer reaches its state")
		}
		t.Logf("bug %q: granted at %d, then at %d; keys moved %d, changes done %d", bug, e, token, s.stats.KeysMoved, s.stats.ChangesDone)
	}
}

// A key moved into new voters keeps only the time its lease has left
// (design.md R63), so that a crashed holder's key is free when its lease
// ends, not a TTL after each change (two TTLs for an autopilot
// replacement). Here the holder crashes with most of its lease to run, a
// voter is removed (the key moves), and a waiter must be granted when the
// lease ends. With fault migrate-full-ttl every new voter times a full TTL
// from the move, and the waiter is granted late.
func TestMovedLeaseKeepsOnlyItsTimeLeft(t *testing.T) {
	for _, bug := range []string{"", "migrate-full-ttl"} {
		leaseEnd, granted := voterChangeUnderCrashedHolder(t, bug)
		late := granted-leaseEnd > time.Second/4
		t.Logf("bug %q: lease ended at %v, the waiter was granted at %v", bug, leaseEnd, granted)
		switch {
		case bug == "" && late:
			t.Errorf("the waiter was granted %v after the lease ended: the move restarted the exclusion", granted-leaseEnd)
		case bug != "" && !late:
			t.Errorf("with the old rule (%s) the waiter was granted only %v after the lease ended: the scenario shows nothing", bug, granted-leaseEnd)
		}
	}
}

// voterChangeUnderCrashedHolder runs TestMovedLeaseKeepsOnlyItsTimeLeft's
// scenario and returns when the holder's lease ended and when the waiter
// was granted the key.
func voterChangeUnderCrashedHolder(t *testing.T, bug string) (leaseEnd, granted time.Duration) {
	t.Helper()
	cfg := faultFree(1, 3, 2, 1, 1)
	cfg.Bug = bug
	holder, waiter := 3, 4
	grantAt, crashAt, changeAt := 1500*time.Millisecond, 1600*time.Millisecond, 1700*time.Millisecond
	cfg.Script = func(s *sim) {
		h, w := s.nodes[holder].clients[0], s.nodes[waiter].clients[0]
		h.holdTime, w.holdTime = 10*time.Second, 10*time.Millisecond
		s.at(grantAt, func() { h.acquire("k0", true, time.Second); s.flush(h.n) })
		s.at(crashAt, func() {
			if h.grant == nil {
				t.Fatalf("the holder was not granted the key by %v", crashAt)
			}
			leaseEnd = h.grant.end
			s.crash(s.nodes[holder])
		})
		s.at(changeAt, func() {
			n := s.nodes[0]
			id, err := n.node.ChangeVoters("", 0, "n2", n.clock.Now()+3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			n.changes[id] = &simChange{remove: "n2"}
			s.flush(n)
			w.acquire("k0", true, 5*time.Second)
			s.flush(w.n)
		})
	}
	s := newSim(cfg)
	s.run()
	if len(s.fail) > 0 {
		t.Fatal(s.fail[0])
	}
	if s.stats.ChangesDone != 1 {
		t.Fatalf("the voter change did not finish: %v", s.stats)
	}
	for _, g := range s.check.grants["k0"] {
		if g.node.idx == waiter {
			granted = g.start
		}
	}
	if granted == 0 {
		t.Fatalf("the waiter was never granted the key")
	}
	return leaseEnd, granted
}

// A voter restarts on the newest configuration it saved, never on the
// founding voters it was started with (design.md R53). After n3 and n4 are
// added and n1 and n2 removed (voters {n0, n3, n4}), a partition cuts
// {n0, n1, n2} from {n3, n4}, and n0, n1 and n2 restart. With disks, n1
// and n2 stay retired and n0 waits for n3 or n4: n1 is not granted k0 while
// n3 holds it. With fault forget-config a restart ignores the configuration
// its disk kept: the three ask only the founding voters, all answer
// "recovering", they conclude a full restart and go live on the founding
// configuration, whose majority grants k0 to n1 while n3 holds it.
func TestRestartedFoundersDoNotResurrectAReplacedConfiguration(t *testing.T) {
	for _, bug := range []string{"", "forget-config"} {
		s, granted := restartFoundersAfterChanges(t, bug)
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case bug == "" && granted:
			t.Errorf("n1 was granted k0 while n3 held it")
		case bug != "" && len(s.fail) == 0:
			t.Errorf("with the old rule (%s) no violation: the scenario shows nothing (n1 granted: %v)", bug, granted)
		case bug != "":
			t.Logf("with the old rule (%s): %s", bug, s.fail[0])
		}
	}
}

// restartFoundersAfterChanges runs the scenario of
// TestRestartedFoundersDoNotResurrectAReplacedConfiguration and reports
// whether n1 was granted k0 while n3 held it.
func restartFoundersAfterChanges(t *testing.T, bug string) (s *sim, granted bool) {
	t.Helper()
	cfg := faultFree(1, 3, 2, 1, 1)
	cfg.Bug, cfg.Disks = bug, true
	cfg.Duration, cfg.HealAt = 10*time.Second, 8*time.Second // the partition is the fault
	cfg.skipI5 = bug != ""
	changes := []simChange{{add: "n3"}, {add: "n4"}, {remove: "n1"}, {remove: "n2"}}
	var holdAt time.Duration
	cfg.Script = func(s *sim) {
		for i, ch := range changes {
			s.at(time.Duration(500+700*i)*time.Millisecond, func() { changeFrom(t, s, s.nodes[0], ch) })
		}
		holdAt = time.Duration(500+700*len(changes)) * time.Millisecond
		h, w := s.nodes[3].clients[0], s.nodes[1].clients[0]
		h.holdTime = time.Minute
		s.at(holdAt, func() {
			if want := []NodeID{"n0", "n3", "n4"}; !slices.Equal(s.m.Voters, want) || s.m.Pending {
				t.Fatalf("after the changes the voters are %v (pending %v), want %v", s.m.Voters, s.m.Pending, want)
			}
			h.acquire("k0", true, time.Second)
			s.flush(h.n)
		})
		s.at(holdAt+500*time.Millisecond, func() {
			if h.grant == nil {
				t.Fatalf("n3 holds nothing")
			}
			for _, a := range []int{0, 1, 2} {
				for _, b := range []int{3, 4} {
					s.cut[[2]int{a, b}], s.cut[[2]int{b, a}] = true, true
				}
				s.crash(s.nodes[a])
			}
		})
		s.at(holdAt+600*time.Millisecond, func() {
			for _, a := range []int{0, 1, 2} {
				s.start(s.nodes[a])
			}
			w.acquire("k0", true, 3*time.Second)
			s.flush(w.n)
		})
	}
	s = newSim(cfg)
	s.run()
	if s.stats.ChangesDone != len(changes) {
		t.Fatalf("%d of %d voter changes done: %v", s.stats.ChangesDone, len(changes), s.stats)
	}
	for _, g := range s.check.grants["k0"] {
		if g.node.idx == 1 {
			granted = true
		}
	}
	return s, granted
}
