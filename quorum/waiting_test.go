package quorum

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Regression tests for the findings of the December review of the core
// (issue 11). Each failed on the code the review read; each names its
// finding. The simulator's mutation tests (sim_bugs_test.go) show the
// checkers catch each bug class as well.

// ballotLog follows the ballots one proposer sends on one key, in the order
// it sends them, and reports any ballot used for two purposes: a prepare
// must use a ballot higher than every ballot the proposer sent on the key
// before, and two accepts at one ballot must carry one value.
type ballotLog struct {
	t        *testing.T
	max      Ballot
	accepted map[Ballot]Value
}

func (l *ballotLog) see(waves [][]Request, from NodeID, key string) {
	for _, wave := range waves {
		seen := make(map[Ballot]bool) // one round goes to every voter
		for _, req := range wave {
			if req.From != from {
				continue
			}
			for _, op := range req.Ops {
				if op.Key != key || seen[op.Ballot] {
					continue
				}
				seen[op.Ballot] = true
				switch op.Kind {
				case OpPrepare:
					if !l.max.Less(op.Ballot) {
						l.t.Errorf("%s prepared %q at ballot %v, not above %v, which it used before", from, key, op.Ballot, l.max)
					}
				case OpAccept:
					if v, ok := l.accepted[op.Ballot]; ok && !sameValue(v, op.Value) {
						l.t.Errorf("%s sent two values at ballot %v of %q: %v and %v", from, op.Ballot, key, v, op.Value)
					}
					if l.accepted == nil {
						l.accepted = make(map[Ballot]Value)
					}
					l.accepted[op.Ballot] = op.Value
				}
				l.max = maxBallot(l.max, op.Ballot)
			}
		}
	}
}

// Finding 1: a proposer that evicted an idle key's state started the key's
// ballots again at counter 1 and so reused ballots of this incarnation. Two
// values at one ballot break Paxos: a reader may pick the stale one and
// write it back over a live grant.
func TestNoBallotReuseAfterForgettingAKey(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.restartProposer("p1", func(cfg *ProposerConfig) { cfg.MaxIdleKeys = 1 })
	log := &ballotLog{t: t}
	for turn := 0; turn < 3; turn++ {
		mark := len(c.waves)
		g := c.mustGrant("p1", "k")
		c.mustRelease("p1", "k", g.Epoch)
		// Two other keys push "k" out of the idle list: its state is
		// forgotten.
		for _, other := range []string{"x", "y"} {
			g := c.mustGrant("p1", other)
			c.mustRelease("p1", other, g.Epoch)
		}
		c.advance(time.Millisecond)
		if _, ok := c.node("p1").prop.keys["k"]; ok {
			t.Fatalf("turn %d: the state of %q was not forgotten; the test needs it to be", turn, "k")
		}
		log.see(c.wavesSince(mark), "p1", "k")
	}
}

// faultFree is a simulated run with no faults at all: contention only.
func faultFree(seed int64, voters, proposers, clients, keys int) simConfig {
	cfg := defaultSimConfig(seed, voters)
	cfg.Proposers, cfg.Clients, cfg.Keys = proposers, clients, keys
	cfg.Drop, cfg.Dup = 0, 0
	cfg.Partitions, cfg.OneWay, cfg.Crashes, cfg.FullRestart, cfg.Reconfig = false, false, false, false, false
	cfg.MajorityCrash, cfg.Retime, cfg.Aimed = false, false, false
	cfg.HealAt = time.Nanosecond // healed from the start: no long tails, waits without a budget
	cfg.Duration = 6 * time.Second
	return cfg
}

// Finding 3: two acquires racing for a freed key each got their accept to
// one acceptor; neither grant was chosen, but each acceptor ran a full
// timer for it, and every later acquire — the two racers' included — took
// those timers for a live lease and parked for about a TTL. Without faults
// a released key must go to a waiter within a few round trips (I9).
func TestHandOverNeverWaitsOutAnUnchosenGrant(t *testing.T) {
	var worst time.Duration
	for seed := int64(1); seed <= 40; seed++ {
		s := newSim(faultFree(seed, 3, 1, 2, 1)) // 8 clients on one key
		s.run()
		worst = max(worst, s.check.maxHandover)
		if len(s.fail) > 0 {
			t.Fatalf("seed %d: %s", seed, failureReport(s))
		}
	}
	t.Logf("longest hand-over in 40 fault-free runs: %v", worst)
}

func TestSimulationReplayFaultFree(t *testing.T) {
	if *simSeed == 0 {
		t.Skip("no -sim.seed")
	}
	cfg := faultFree(*simSeed, 3, 1, 2, 1)
	cfg.Trace = true
	s := newSim(cfg)
	s.run()
	os.WriteFile("/tmp/trace.txt", []byte(strings.Join(s.trace, "\n")), 0o644)
}

// Finding 7: a waiting acquire that gave up stayed in the voters' lines,
// and each such waiter cost the next one a hand-off grace. A node now
// leaves the lines when no acquire of it waits for the key any more, and
// declines a key it is told of but no longer wants.
func TestWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2", "p3")
	g := c.mustGrant("p1", "k")
	p2 := c.node("p2")
	o := scOpts(true)
	o.Deadline = p2.clock.Now() + 200*time.Millisecond
	op, err := p2.prop.Acquire("k", o)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	c.acquire("p3", "k", true) // waits behind p2
	if res := c.waitResult("p2", op, time.Second); res.Outcome != Locked {
		t.Fatalf("p2's acquire: %v, want locked at its deadline", res.Outcome)
	}
	for _, id := range voters3 {
		if w := c.node(id).acc.regs["k"].waiting(); slices.Contains(w, "p2") {
			t.Errorf("voter %s still lists p2 as a waiter after its acquire ended: %v", id, w)
		}
	}
	// The release goes to p3 at once: no grace spent on p2.
	c.mustRelease("p1", "k", g.Epoch)
	start := c.now
	for {
		if _, _, ok := c.node("p3").prop.Holds("k"); ok {
			break
		}
		if c.now-start > scGrace/2 {
			t.Fatalf("p3 not granted within half a hand-off grace of the release")
		}
		c.advance(time.Millisecond)
	}
}

// A node told of a free key that no acquire of it waits for any more
// declines it at once, and the voter tells the next waiter.
func TestNotifiedNodeWithoutWaiterDeclines(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	p1.prop.HandleNotify(&Notify{Config: c.m.ID, From: "b", To: "p1", Keys: []string{"k"}, Promised: []uint64{9}})
	rd := p1.prop.Ready()
	if len(rd.Requests) != 1 || rd.Requests[0].To != "b" || len(rd.Requests[0].Ops) != 1 || rd.Requests[0].Ops[0].Kind != OpUnwatch {
		t.Fatalf("after a notify nobody waits for: requests %+v, want one unwatch of %q to b", rd.Requests, "k")
	}
}

// Finding 2: a voter's quarantine came from today's MaxTTL, so a rolling
// restart that lowered it let a voter that had accepted a longer lease vote
// again before that lease ended; and catch-up gave it the held value
// without a timer. Here a lowers MaxTTL from 1 s to 200 ms across a
// restart; p2, cut off from b (the other voter timing p1's lease), must not
// be granted the key while p1 holds it.
func TestRestartWithLowerMaxTTLKeepsExclusion(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	c.cut["c"] = true // p1's grant lands on a and b
	g := c.mustGrant("p1", "k")
	c.cut["c"] = false
	p1 := c.node("p1")
	grantedAt := c.now
	deadline := grantedAt + (g.Deadline - p1.clock.Now()) // p1's deadline in real time

	short := func(cfg *AcceptorConfig) { cfg.MaxTTL, cfg.Quarantine = 200*time.Millisecond, 200*time.Millisecond }
	c.restartAcceptor("a", short)
	c.node("p1").prop = nil                // p1 neither renews nor releases: its lease runs to its deadline
	c.cutPair[[2]NodeID{"p2", "b"}] = true // p2 reaches only a and c
	p2 := c.node("p2")
	// p2 runs the new settings too: 200 ms leases.
	o := AcquireOptions{TTL: 200 * time.Millisecond, HolderTTL: 180 * time.Millisecond,
		RenewEvery: 60 * time.Millisecond, Notice: 20 * time.Millisecond, Wait: true,
		Deadline: p2.clock.Now() + 3*time.Second}
	op, err := p2.prop.Acquire("k", o)
	if err != nil {
		t.Fatal(err)
	}
	for c.now < grantedAt+3*time.Second {
		if res, ok := c.result("p2", op); ok {
			if res.Outcome == Granted && c.now < deadline {
				t.Fatalf("p2 granted %q at %v while p1 holds it until %v", "k", c.now, deadline)
			}
			break
		}
		c.advance(10 * time.Millisecond)
	}
	if res, ok := c.result("p2", op); !ok || res.Outcome != Granted {
		t.Errorf("p2 never granted the key after p1's lease ended: %v %v", res.Outcome, ok)
	}
}

// Finding 9: moving a key into new voters started a full TTL of exclusion
// at every new voter, so a crashed holder's key stayed blocked up to a TTL
// after the change (two TTLs for an autopilot replacement). The move now
// carries the time left. Here the holder crashes with most of its lease to
// run, a voter is removed (the key moves), and a waiter must be granted
// when the lease ends, not a TTL after the move.
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

// voterChangeUnderCrashedHolder runs the scenario of finding 9 and returns
// when the holder's lease ended and when the waiter was granted the key.
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

// Finding 8: every node restarts on its Config.Voters, the founding voters.
// After n3 and n4 were added and n1 and n2 removed (voters {n0, n3, n4}), a
// partition cut {n0, n1, n2} from {n3, n4}, and n0, n1 and n2 restarted.
// They asked only the founding voters, all answered "recovering", so they
// concluded a full restart and went live on the founding configuration,
// whose majority granted k0 to n1 while n3 held it. With disks a voter never
// returns to a configuration older than the newest it adopted: n1 and n2
// stay retired, n0 waits for n3 or n4. ("forget-config" is the old rule: a
// restart ignores the configuration its disk kept.)
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

// restartFoundersAfterChanges runs finding 8's scenario and reports whether
// n1 was granted k0 while n3 held it.
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
