package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Key listings (design.md R39, R87). A voter change lists the keys at a
// majority of the voters before it, and a restarted voter answers that
// listing only once it caught up from voters that meet every majority it
// may have been part of. A listing of the locks held (MergeListing) counts
// no copy as a vote.

// A restarted voter answers a listing only once it votes, and it votes only
// once it has caught up from voters that meet every majority it may have
// been part of, those before a pending change included (design.md R39).
// Here k0 is granted and released at epoch E at n0 and n2 alone (n1 cut
// off); n2 has no data directory. n2 restarts, n5 adds n3, and n0's
// listing answers never reach n5: the listing majority is {n1 n2}, and n2
// is the only voter in it that accepted k0, whose register it lost. n0 is
// cut off from n2 until 3.5s, so n2 cannot learn k0 from it before then.
// The rule holds if n2 answers the listing only after n0 answered its
// catch-up (and k0 moves); then, with n0 cut off and a proposer whose wall
// clock runs an hour back, k0 is granted above E by {n1 n2 n3}. With
// "skip-prev-catch-up" n2 goes live on the word of n1 and n3 (a majority
// of the new voters less itself), lists nothing, k0 is not moved, and the
// grant after the change is below E: I2.
func TestRestartedVoterListsKeysOnlyOnceCaughtUp(t *testing.T) {
	for _, bug := range []string{"", "skip-prev-catch-up"} {
		cfg := onDisks(bug, 3, 3, 1, 1, 8*time.Second, 7*time.Second)
		const healN0N2 = 3500 * time.Millisecond
		var (
			e, token       uint64
			liveAt, listed time.Duration
			dropped        int // n0's answers to n5 lost while n5 lists
			changed        bool
		)
		cfg.Script = func(s *sim) {
			n0, n1, n2, n3, n4, n5 := s.nodes[0], s.nodes[1], s.nodes[2], s.nodes[3], s.nodes[4], s.nodes[5]
			h := n4.clients[0]
			h.holdTime = 50 * time.Millisecond
			// n2 runs without a data dir from the start.
			restartAmnesiac(s, n2)
			// While n5 lists the old voters' keys, n0's answers to it are
			// lost: the listing majority must be {n1 n2}.
			s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
				if from == n0 && to == n5 && n5.node != nil && n5.node.prop.chg != nil && n5.node.prop.chg.stage == stList {
					dropped++
					return time.Hour, true
				}
				return 0, false
			}
			s.at(1500*time.Millisecond, func() {
				if !liveAcceptor(n2) {
					t.Fatalf("n2 does not vote at 1.5s")
				}
				isolate(s, 1, true) // n1 misses the grant and the release
				h.acquire("k0", true, time.Second)
				s.flush(h.n)
			})
			s.at(1700*time.Millisecond, func() {
				e = s.check.maxToken["k0"]
				if e == 0 || h.state != cIdle || s.stats.Releases != 1 {
					t.Fatalf("n4 was not granted and freed k0 by 1.7s (token %d, state %v)", e, h.state)
				}
				if r := n1.node.acc.regs["k0"]; r != nil && !r.accepted.IsZero() {
					t.Fatalf("n1 holds k0: the scenario shows nothing")
				}
				isolate(s, 1, false)
				cutBoth(s, 0, 2, true)
				restartAmnesiac(s, n2)
				id, err := n5.node.ChangeVoters("n3", n3.inc, "", n5.clock.Now()+5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				n5.changes[id] = &simChange{add: "n3"}
				s.flush(n5)
			})
			var poll func()
			poll = func() {
				if liveAt == 0 && liveAcceptor(n2) {
					liveAt = s.now
				}
				if c := n5.node.prop.chg; listed == 0 && c != nil && c.stage > stList {
					listed = s.now
				}
				if liveAt == 0 || listed == 0 {
					s.after(time.Millisecond, poll)
				}
			}
			s.at(1700*time.Millisecond, poll)
			s.at(healN0N2, func() { cutBoth(s, 0, 2, false) })
			s.at(5*time.Second, func() {
				changed = slices.Equal(s.m.Voters, []NodeID{"n0", "n1", "n2", "n3"}) && !s.m.Pending
				// n0, the one voter outside the listing majority that holds
				// k0, goes quiet; a node whose wall clock runs an hour back
				// takes k0 from {n1 n2 n3}.
				isolate(s, 0, true)
				wallClocksBack(s, time.Hour)
				s.crash(n4)
				s.start(n4)
				w := n4.clients[0]
				w.holdTime = time.Hour
				w.acquire("k0", true, time.Second)
				s.flush(n4)
			})
			s.at(6500*time.Millisecond, func() {
				if w := n4.clients[0]; w.grant != nil {
					token = w.grant.token
				}
			})
		}
		s := newSim(cfg)
		s.run()
		t.Logf("bug %q: E=%d, n2 voted again at %v, listing done at %v, n0's listing answers lost %d, keys moved %d, changes done %d, token after %d",
			bug, e, liveAt, listed, dropped, s.stats.KeysMoved, s.stats.ChangesDone, token)
		switch {
		case bug == "" && len(s.fail) > 0:
			t.Errorf("%s", failureReport(s))
		case dropped == 0:
			t.Errorf("bug %q: n0 answered the listing: the listing majority was not {n1 n2}", bug)
		case bug == "" && !changed:
			t.Errorf("the change did not finish by 5s: voters %v, pending %v", s.m.Voters, s.m.Pending)
		case bug == "" && (liveAt < healN0N2 || listed < liveAt):
			t.Errorf("n2 voted at %v and the listing ended at %v, before n0 could answer n2 (%v)", liveAt, listed, healN0N2)
		case bug == "" && s.stats.KeysMoved == 0:
			t.Errorf("k0 was not moved")
		case bug == "" && token <= e:
			t.Errorf("k0 was granted at %d after the change, not above %d", token, e)
		case bug != "":
			brokeRule(t, s, bug, "I2", fmt.Sprintf("n2 voted at %v, listing done at %v, token %d after %d", liveAt, listed, token, e))
		}
	}
}

// A listing of the locks held (MergeListing, the mesh's Locks) settles a
// key when a majority of the voters report one accepted ballot with one
// value. A register a voter merged in a catch-up is a copy (Entry.Copy, as
// Result.Copy): the value it copied may never have been chosen, so a copy
// is no vote and counts toward no such majority. It still says that a
// voter holds the key held: the key is then left unsettled, and the mesh
// reads it (Holder) before it lists it (design.md R87).
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
// With "list-counts-copies" the voters' listing answers carry no copy flag:
// the merge counts b's copy with a's vote, settles
// the key as held by p1 and lists it without a read.
func TestListingCountsNoCopyAsAVote(t *testing.T) {
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
