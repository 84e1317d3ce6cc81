package quorum

import "testing"

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
