package quorum

import (
	"slices"
	"testing"
	"time"
)

// Hand-over scenarios: how a waiter comes to the key without waiting out a
// timer, and without disturbing the holder.

// A second acquire of the node that holds the key waits behind the node's
// own lease without a message: a prepare would only promise a ballot above
// the holder's next one, and cost its release the one-round-trip path. The
// release wakes it.
func TestScenarioWaiterBehindOwnLeaseAsksNobody(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	g := c.mustGrant("p1", "k")
	mark := len(c.waves)
	op := c.acquire("p1", "k", true)
	if w := c.wavesSince(mark); len(w) != 0 {
		t.Fatalf("waiting behind its own lease, p1 sent %d waves %v", len(w), waveKinds(w))
	}
	if res, ok := c.result("p1", op); ok {
		t.Fatalf("the waiting acquire ended: %v", res.Outcome)
	}
	start, mark := c.now, len(c.waves)
	c.mustRelease("p1", "k", g.Epoch)
	res := c.waitResult("p1", op, scRoundTimeout)
	if res.Outcome != Granted || res.Epoch <= g.Epoch {
		t.Fatalf("the waiter: %v at %d, want granted above %d", res.Outcome, res.Epoch, g.Epoch)
	}
	if w := c.wavesSince(mark); len(w) != 3 || c.now != start {
		t.Errorf("release to grant: %d round trips %v and %v; want 3 (release on the fast path, prepare, accept), no time",
			len(w), waveKinds(w), c.now-start)
	}
}

// A fast-path round goes only to the voters that promised its ballot. When
// too many of those refuse, it cannot win, and the operation goes on at
// once instead of waiting out its round timer for voters it never asked:
// a release kept its key's slot, and every acquire of its node queued
// behind it, for a round timeout and a half.
func TestScenarioFastRoundThatCannotWinEndsAtOnce(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.cutPair[[2]NodeID{"p1", "c"}] = true
	g := c.mustGrant("p1", "k") // its fast path stands on a and b
	c.cutPair[[2]NodeID{"p1", "c"}] = false
	// A reader's prepare at b promises a ballot above p1's next one.
	a2 := c.node("b").acc
	a2.HandleRequest(&Request{Config: c.m.ID, From: "r", To: "b", Ops: []Op{{ID: 1, Kind: OpPrepare, Key: "k", Ballot: bal(1000, "r")}}})
	start := c.now
	op, err := c.node("p1").prop.Release("k", g.Epoch, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	res := c.waitResult("p1", op, scRoundTimeout)
	if res.Outcome != Released {
		t.Fatalf("release: %v, want released", res.Outcome)
	}
	if d := c.now - start; d >= scRoundTimeout/2 {
		t.Errorf("the release took %v: it waited for its fast round's timer", d)
	}
}

// A grant that only some voters hold may be a rival's write that is never
// finished: an acquire that finds one must not wait for its lease, but
// build on what a majority holds.
func TestScenarioWaiterDoesNotWaitForAGrantFewVotersHold(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	// x's grant reached a alone (x then went away).
	b := bal(5, "x")
	a1 := c.node("a").acc
	for _, o := range []Op{
		{ID: 1, Kind: OpPrepare, Key: "k", Ballot: b},
		{ID: 2, Kind: OpAccept, Key: "k", Ballot: b, Inc: c.node("a").inc,
			Value: Value{Held: true, Holder: "x", HolderInc: 1, Epoch: 7, TTL: scTTL, Lease: b}},
	} {
		if r := a1.HandleRequest(&Request{Config: c.m.ID, From: "x", To: "a", Ops: []Op{o}}); !r.Results[0].OK {
			t.Fatalf("setting up x's grant at a: %+v", r.Results[0])
		}
	}
	op := c.acquire("p1", "k", true)
	res := c.waitResult("p1", op, scRoundTimeout)
	if res.Outcome != Granted || res.Epoch <= 7 {
		t.Fatalf("p1: %v at %d, want granted above 7", res.Outcome, res.Epoch)
	}
}

// With an even number of voters, half of them refusing a ballot is not a
// majority: a waiter whose first replies are refusals must hear the rest
// before it concludes anything, or it never learns that a majority holds
// the key. It took every such round for a lost duel and tried again at
// once, and so never parked: every waiter of a key held in a
// configuration of four or six voters kept raising the ballots (soak seed
// 301772 with 5 voters, in a configuration of six).
func TestScenarioWaiterParksOnHeldKeyWithEvenVoters(t *testing.T) {
	c := newTestCluster(t, []NodeID{"a", "b", "c", "d"}, "p1", "w")
	g := c.mustGrant("p1", "k")
	op := c.acquire("w", "k", true)
	mark := len(c.waves)
	c.advance(100 * time.Millisecond)
	if n := prepares(c.wavesSince(mark), "w"); n != 0 {
		t.Errorf("the waiter sent %d more prepares in 100ms; a waiter of a held key waits to be told it is free", n)
	}
	c.mustRelease("p1", "k", g.Epoch)
	res := c.waitResult("w", op, scRoundTimeout)
	if res.Outcome != Granted || res.Epoch <= g.Epoch {
		t.Fatalf("the waiter: %v at %d, want granted above %d", res.Outcome, res.Epoch, g.Epoch)
	}
}

// A release that another node's write-back overtook, as in soak seed
// 301772 (5 voters, run in a configuration of six): c missed the grant,
// the holder's release reached a and b, and a read that heard c, d, e and
// f wrote the grant back at d, e and f, at a higher ballot, before the
// release came there. Nothing is chosen, and only the holder can finish
// its release: everything else builds on the grant, the highest value. A
// waiter, told by a and b that the key is free, finds the grant's lease
// running at d, e and f: its acquire cannot win, and the promises it wins
// at a, b and c, each above the last ballot it heard, would only cost the
// holder its next round. Once it has seen the release under way, it waits
// to be told the key is free, however long the holder's next round takes.
// (The seed's waiters duelled the holder for 404 ms.)
func TestScenarioWaiterLetsHolderFinishOvertakenRelease(t *testing.T) {
	voters := []NodeID{"a", "b", "c", "d", "e", "f"}
	c := newTestCluster(t, voters, "p1", "w1", "w2")
	c.cutPair[[2]NodeID{"p1", "c"}] = true
	g := c.mustGrant("p1", "k") // its fast path stands on a, b, d, e and f
	c.cutPair[[2]NodeID{"p1", "c"}] = false
	ops := []OpID{c.acquire("w1", "k", true), c.acquire("w2", "k", true)}
	// The release reaches a and b; d, e and f are slow, and the
	// write-back comes to them first (its accept to c was lost).
	for _, id := range voters[3:] {
		c.hold[id] = true
	}
	op, err := c.node("p1").prop.Release("k", g.Epoch, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	grant := c.registers("k")["d"].Value
	rb := bal(1000, "reader")
	for _, id := range voters[3:] {
		a := c.node(id).acc
		for _, o := range []Op{
			{ID: 1, Kind: OpPrepare, Key: "k", Ballot: rb},
			{ID: 2, Kind: OpAccept, Key: "k", Ballot: rb, Inc: c.node(id).inc, Value: grant},
		} {
			if r := a.HandleRequest(&Request{Config: c.m.ID, From: "reader", To: id, Ops: []Op{o}}); !r.Results[0].OK {
				t.Fatalf("the write-back at %s: %+v", id, r.Results[0])
			}
		}
	}
	if r := c.registers("k")["c"]; r.Value.Held || r.Value.Epoch != 0 {
		t.Fatalf("c holds %v; it should have missed the grant", r.Value)
	}
	// The holder's next round is slow to come: it is cut off for a while.
	c.cut["p1"] = true
	for _, id := range voters[3:] {
		c.release(id)
	}
	// (For less than the hand-off grace: when that passes with the key
	// still free at a and b, they tell the next waiter in line, who takes
	// its own look.)
	mark := len(c.waves)
	c.advance(scGrace - 10*time.Millisecond)
	for _, w := range []NodeID{"w1", "w2"} {
		if n := prepares(c.wavesSince(mark), w); n != 0 {
			t.Errorf("%s tried %d more times while the holder's release was under way", w, n)
		}
	}
	c.cut["p1"] = false
	res := c.waitResult("p1", op, 2*scRoundTimeout)
	if res.Outcome != Released {
		t.Fatalf("the release: %v, want released", res.Outcome)
	}
	start := c.now
	for {
		var got []OpResult
		for i, w := range []NodeID{"w1", "w2"} {
			if r, ok := c.result(w, ops[i]); ok {
				got = append(got, r)
			}
		}
		if len(got) > 0 {
			if len(got) != 1 || got[0].Outcome != Granted || got[0].Epoch <= g.Epoch {
				t.Fatalf("the waiters after the release: %+v; want one granted above %d", got, g.Epoch)
			}
			return
		}
		if c.now-start > scRoundTimeout {
			t.Fatalf("no waiter was granted the key %v after its release", c.now-start)
		}
		c.advance(time.Millisecond)
	}
}

// prepares counts the prepare rounds (distinct ballots) node id sent in
// waves.
func prepares(waves [][]Request, id NodeID) int {
	seen := map[Ballot]bool{}
	for _, w := range waves {
		for _, r := range w {
			for _, o := range r.Ops {
				if r.From == id && o.Kind == OpPrepare {
					seen[o.Ballot] = true
				}
			}
		}
	}
	return len(seen)
}

// Only a live timer of the grant an acquire's base value holds locks
// (design.md R10): when two acquires racing for a freed key each get their
// accept to one voter, neither grant is chosen, and no later acquire (the
// two racers' included) parks behind those voters' timers. Without faults
// a released key goes to a waiter within a few round trips (I9), in 40
// runs of 8 clients on one key.
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

// A node leaves the voters' lines when no acquire of it waits for the key
// any more (design.md R30), so that a waiter that gave up costs the next one
// no hand-off grace: p2's acquire waits behind p1 and gives up at its
// deadline, p3 waits behind p2, and p1's release goes to p3 at once.
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
// declines it at once (design.md R30), and the voter tells the next waiter.
func TestNotifiedNodeWithoutWaiterDeclines(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	p1.prop.HandleNotify(&Notify{Config: c.m.ID, From: "b", To: "p1", Keys: []string{"k"}, Promised: []uint64{9}})
	rd := p1.prop.Ready()
	if len(rd.Requests) != 1 || rd.Requests[0].To != "b" || len(rd.Requests[0].Ops) != 1 || rd.Requests[0].Ops[0].Kind != OpUnwatch {
		t.Fatalf("after a notify nobody waits for: requests %+v, want one unwatch of %q to b", rd.Requests, "k")
	}
}
