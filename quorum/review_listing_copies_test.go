package quorum

import (
	"testing"
	"time"
)

// A listing of the locks held (MergeListing, the mesh's Locks) settles a
// key when a majority of the voters report one accepted ballot with one
// value. A register a voter merged in a catch-up is a copy (Entry.Copy, as
// Result.Copy): the value it copied may never have been chosen, so a copy
// is no vote and counts toward no such majority. It still says that a
// voter holds the key held: the key is then left unsettled, and the mesh
// reads it (Holder) before it lists it.
//
// Three voters a, b, c. Two proposers that no longer run, p1 and p2, each
// won a prepare: p1 at {a c} with ballot b1, then p2 at {b c} with b2 > b1.
// b restarts without its state. While it is quarantined, p1's accept of X
// (held by p1) reaches a alone: c has promised b2 and would refuse it. b
// catches up from a (X at b1, its lease timed there) and from c (promise
// b2, nothing accepted), and copies X at b1. A listing whose answer from c
// is lost hears a and b report X at b1: two of three at one ballot, but
// one of them is a copy, and X was never chosen. Then p2's accept of Y
// (held by p2) reaches c and b: Y is chosen at b2, and X never can be. The
// key was never held by p1, so the listing must not say so: it leaves the
// key unsettled, and the read the mesh makes of it finds Y.
//
// With "list-counts-copies" the voters' listing answers carry no copy flag
// (as before the rule): the merge counts b's copy with a's vote, settles
// the key as held by p1 and lists it without a read.
func TestReviewListingCopiesAreNoVotes(t *testing.T) {
	for _, bug := range []string{"", "list-counts-copies"} {
		held, unsettled, read := listingAcrossACopy(t, bug)
		t.Logf("bug %q: the merge lists %v held, %q unsettled; a read then finds %v", bug, held, unsettled, read.Value)
		var x *Listed
		for i := range held {
			if held[i].Key == "k0" {
				x = &held[i]
			}
		}
		switch {
		case read.Value.Holder != "p2":
			t.Errorf("bug %q: the read found %v, not p2's Y: the scenario shows nothing", bug, read.Value)
		case bug == "" && x != nil:
			t.Errorf("the listing settles k0 as held by %s at %d (%v left), a value never chosen: one of its two votes is a copy",
				x.Value.Holder, x.Value.Epoch, x.Remaining)
		case bug == "" && (len(unsettled) != 1 || unsettled[0] != "k0"):
			t.Errorf("the listing leaves %q unsettled; want k0, held at a voter, to be read", unsettled)
		case bug != "" && (x == nil || x.Value.Holder != "p1"):
			t.Errorf("with %s the listing does not list k0 held by p1 (held %v, unsettled %q): the test no longer shows the bug", bug, held, unsettled)
		}
	}
}

// listingAcrossACopy stages the scenario with the voters' faults named by
// bug (sim_bugs_test.go), and returns what the merge of a's and b's
// listing answers says, and what a read of k0 at every voter then finds.
func listingAcrossACopy(t *testing.T, bug string) (held []Listed, unsettled []string, read OpResult) {
	c := newTestCluster(t, []NodeID{"a", "b", "c"}, "p3")
	faults := faultsNamed(bug)
	withFaults := func(cfg *AcceptorConfig) { cfg.breakRules = faults.acc }
	for _, id := range c.m.Voters {
		c.node(id).acc.breakWith(faults.acc)
	}
	const key = "k0"
	b1 := Ballot{Counter: 100, Incarnation: 1000, Node: "p1"}
	b2 := Ballot{Counter: 200, Incarnation: 1001, Node: "p2"}
	var opID uint64
	step := func(id NodeID, op Op, ok bool) Result {
		t.Helper()
		opID++
		op.ID, op.Key = opID, key
		if op.Kind == OpAccept {
			op.Inc = c.node(id).inc
		}
		resp := c.node(id).acc.HandleRequest(&Request{Config: c.m.ID, From: op.Ballot.Node, To: id, Ops: []Op{op}})
		if got := resp.Status == StatusOK && resp.Results[0].OK; got != ok {
			t.Fatalf("%s answered %v %v: status %v, %+v", id, op.Kind, op.Ballot, resp.Status, resp.Results)
		}
		return resp.Results[0]
	}
	epoch := uint64(0)
	for _, id := range []NodeID{"a", "c"} {
		epoch = max(epoch, step(id, Op{Kind: OpPrepare, Ballot: b1}, true).MaxEpoch)
	}
	for _, id := range []NodeID{"b", "c"} {
		epoch = max(epoch, step(id, Op{Kind: OpPrepare, Ballot: b2}, true).MaxEpoch)
	}
	// Both saw the key free, and would grant it at the next epoch.
	x := Value{Held: true, Holder: "p1", HolderInc: b1.Incarnation, Epoch: epoch + 1, TTL: scTTL, Lease: b1}
	y := Value{Held: true, Holder: "p2", HolderInc: b2.Incarnation, Epoch: epoch + 1, TTL: scTTL, Lease: b2}

	c.restartAcceptor("b", withFaults)
	c.advance(scQuarantine - 100*time.Millisecond)
	step("a", Op{Kind: OpAccept, Ballot: b1, Value: x}, true)
	step("c", Op{Kind: OpAccept, Ballot: b1, Value: x}, false) // promised b2
	c.advance(100*time.Millisecond + scRoundTimeout)
	mustBeLive(t, c, "b")
	if r := c.node("b").acc.regs[key]; r == nil || r.accepted != b1 || !r.value.sameGrant(x) || !r.copied {
		t.Fatalf("b did not copy X at %v in its catch-up: %+v", b1, r)
	}

	// The listing: c's answers are lost.
	req := &CatchUpRequest{Config: c.m.ID, From: "p3", Bucket: 0, Buckets: 1, List: true, Holders: true}
	answers := make(map[NodeID][]Entry)
	for _, id := range []NodeID{"a", "b"} {
		req.To = id
		resp := c.node(id).acc.listHolders(req)
		if resp.Status != StatusOK {
			t.Fatalf("%s answered the listing %v", id, resp.Status)
		}
		answers[id] = resp.Entries
	}
	held, unsettled, ok := MergeListing(c.m, answers)
	if !ok {
		t.Fatalf("two of three voters answered, and the merge says no majority did")
	}

	// Meanwhile p2's accept reaches c and b: Y is chosen.
	step("c", Op{Kind: OpAccept, Ballot: b2, Value: y}, true)
	step("b", Op{Kind: OpAccept, Ballot: b2, Value: y}, true)

	// What the mesh does with an unsettled key: a linearizable read.
	op, err := c.node("p3").prop.Read(key, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	read = c.waitResult("p3", op, 8*scRoundTimeout)
	if read.Outcome != ReadDone {
		t.Fatalf("p3: read of %q: %v, want done", key, read.Outcome)
	}
	return held, unsettled, read
}

// faultsNamed are the faults a simulated run's Bug names (sim_bugs_test.go),
// for a scenario's nodes.
func faultsNamed(bug string) nodeRules {
	s := &sim{cfg: simConfig{Bug: bug}}
	return s.nodeRules(nil)
}

// The rule alone, on three voters' answers: a copy counts toward no
// majority that settles a key, and a held copy keeps the key unsettled.
func TestMergeListingCountsNoCopy(t *testing.T) {
	m := NewMembership(1, "a", "b", "c")
	b1 := Ballot{Counter: 1, Incarnation: 1, Node: "p"}
	b2 := Ballot{Counter: 2, Incarnation: 1, Node: "p"}
	x := Value{Held: true, Holder: "p", HolderInc: 1, Epoch: 7, TTL: time.Second, Lease: b1}
	free := Value{Epoch: 7}
	vote := func(b Ballot, v Value) Entry { return Entry{Key: "k", Accepted: b, Value: v, Remaining: time.Second} }
	copied := func(b Ballot, v Value) Entry { e := vote(b, v); e.Copy = true; return e }
	for _, tc := range []struct {
		name      string
		a, b, c   []Entry // nil: the voter did not answer
		held      bool
		unsettled bool
	}{
		{name: "two votes at one ballot", a: []Entry{vote(b1, x)}, b: []Entry{vote(b1, x)}, held: true},
		{name: "a vote and a copy at one ballot", a: []Entry{vote(b1, x)}, b: []Entry{copied(b1, x)}, unsettled: true},
		{name: "two copies at one ballot", a: []Entry{copied(b1, x)}, b: []Entry{copied(b1, x)}, c: []Entry{}, unsettled: true},
		{name: "two votes and a copy", a: []Entry{vote(b1, x)}, b: []Entry{vote(b1, x)}, c: []Entry{copied(b1, x)}, held: true},
		{name: "two votes below a copy of another value", a: []Entry{vote(b1, x)}, b: []Entry{vote(b1, x)},
			c: []Entry{copied(b2, Value{Held: true, Holder: "q", HolderInc: 1, Epoch: 8, TTL: time.Second, Lease: b2})}, unsettled: true},
		{name: "one content, two ballots, two votes", a: []Entry{vote(b1, x)}, b: []Entry{vote(b2, x)}, held: true},
		{name: "one content, two ballots, a vote and a copy", a: []Entry{vote(b1, x)}, b: []Entry{copied(b2, x)}, unsettled: true},
		{name: "a vote and a copy of a free key", a: []Entry{vote(b1, free)}, b: []Entry{copied(b1, free)}},
	} {
		answers := make(map[NodeID][]Entry)
		for id, es := range map[NodeID][]Entry{"a": tc.a, "b": tc.b, "c": tc.c} {
			if es != nil {
				answers[id] = es
			}
		}
		held, unsettled, ok := MergeListing(m, answers)
		if !ok || (len(held) == 1) != tc.held || (len(unsettled) == 1) != tc.unsettled || len(held)+len(unsettled) > 1 {
			t.Errorf("%s: held %v, unsettled %q, ok %v; want held %v, unsettled %v", tc.name, held, unsettled, ok, tc.held, tc.unsettled)
		}
	}
}
