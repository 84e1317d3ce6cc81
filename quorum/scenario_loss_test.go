package quorum

import (
	"fmt"
	"testing"
)

// After a majority of voters restarted together from their disks, what
// they hold of a key is a copy, taken in their catch-up from the voters
// that kept running, and it may be older than what a voter they did not
// hear from holds. Soak seed 708342 with 3 voters: n1 and n5 restarted, a
// majority of [n1 n2 n5]; both copied n0's stale grant (n0, a voter of the
// configuration before the pending one, had missed later writes), and a
// read at {n1, n5} found a majority at one ballot and took that for
// chosen. A later read through n2, which held the newer value, found that
// value again: the register went back and then forward with no write in
// between.

// TestScenarioCopiesAfterMajorityLossAreNeverChosen stages it on five
// voters: a keeps an older value V while b, c, d and e accept W; c, d and e
// restart together and catch up from a alone (b is cut off from them). A
// read that reaches a, c, d and e may return V, the value a holds (a
// majority lost what it knew). But then V is the register's value: a read
// that reaches b once the partition heals must not find W again.
//
// With the rules broken (the copies keep the ballots they were accepted
// at, and are reported as votes), the two reads disagree. Either rule alone
// keeps them together; the second is shown alone by
// TestCopiedConfigurationsAreNoVotes, where no majority was lost and nothing
// is demoted.
func TestScenarioCopiesAfterMajorityLossAreNeverChosen(t *testing.T) {
	t.Run("rule", func(t *testing.T) {
		if r1, r2 := readsAcrossCopies(t, false); r1.Value.Held != r2.Value.Held || r1.Epoch != r2.Epoch {
			t.Errorf("two reads with no write between them disagree: first %v at %d, then %v at %d (the register went back to V, then forward to W)",
				r1.Value, r1.Epoch, r2.Value, r2.Epoch)
		}
	})
	t.Run("keep-copies", func(t *testing.T) {
		if r1, r2 := readsAcrossCopies(t, true); r1.Epoch == r2.Epoch {
			t.Errorf("with copies kept at their ballots both reads found free at %d; the scenario no longer reaches the bug", r1.Epoch)
		}
	})
}

// readsAcrossCopies stages the scenario, the restarted voters keeping their
// copies at the ballots they were accepted at if keep, and returns the
// two reads' results.
func readsAcrossCopies(t *testing.T, keep bool) (r1, r2 OpResult) {
	voters := []NodeID{"a", "b", "c", "d", "e"}
	c := newTestCluster(t, voters, "p1", "p2", "p3")
	c.useDisks()
	// The restarted voters take the first bucket of their catch-up from a
	// before they learn that a majority restarted: the key must be in it.
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); bucketOf(k, 2) == 0 {
			key = k
		}
	}
	g1 := c.mustGrant("p1", key)
	c.mustRelease("p1", key, g1.Epoch) // V: free at g1, on every voter
	c.cutPair[[2]NodeID{"p1", "a"}] = true
	g2 := c.mustGrant("p1", key)
	c.mustRelease("p1", key, g2.Epoch) // W: free at g2, on b, c, d and e
	if v := c.registers(key)["a"].Value; v.Epoch != g1.Epoch {
		t.Fatalf("a holds %v; the scenario wants V (free at %d) there", v, g1.Epoch)
	}

	for _, id := range []NodeID{"c", "d", "e"} {
		c.cutPair[[2]NodeID{"b", id}] = true
		c.restartAcceptor(id)
		// Both rules that keep copies from passing for votes: each alone
		// keeps the reads apart here (copies held at ballots of their own;
		// copies reported as such, Result.Copy).
		if keep {
			c.node(id).acc.breakWith(keepCopies, copiesVote)
		}
	}
	c.advance(scQuarantine + scRoundTimeout)
	mustBeLive(t, c, "c", "d", "e")
	for _, id := range []NodeID{"c", "d", "e"} {
		if v := c.registers(key)[id].Value; v.Epoch != g1.Epoch {
			t.Fatalf("%s holds %v after its catch-up; the scenario wants a's V (free at %d) there", id, v, g1.Epoch)
		}
	}

	read := func(id NodeID) OpResult {
		t.Helper()
		op, err := c.node(id).prop.Read(key, 0)
		if err != nil {
			t.Fatal(err)
		}
		c.settle()
		res := c.waitResult(id, op, 4*scRoundTimeout)
		if res.Outcome != ReadDone {
			t.Fatalf("%s: read of %q: %v, want done", id, key, res.Outcome)
		}
		return res
	}
	c.cutPair[[2]NodeID{"p2", "b"}] = true
	r1 = read("p2") // at a, c, d and e
	clear(c.cutPair)
	c.cutPair[[2]NodeID{"p3", "a"}] = true
	c.cutPair[[2]NodeID{"p3", "c"}] = true
	r2 = read("p3") // at b, d and e
	return r1, r2
}

// TestCopyBallotKeepsOrderAndNeverAgrees checks the ballots copies are held
// at: below the ballot copied, above every real ballot of a lower counter,
// never equal between two voters, and never above every real ballot.
func TestCopyBallotKeepsOrderAndNeverAgrees(t *testing.T) {
	acc := func(id NodeID) *Acceptor { return &Acceptor{cfg: AcceptorConfig{ID: id}} }
	c, d := acc("c"), acc("d")
	b := Ballot{Counter: 7, Incarnation: 3, Node: "n2"}
	cb, db := c.copyBallot(b), d.copyBallot(b)
	if cb == db {
		t.Errorf("c and d hold copies of %v at one ballot, %v: a majority of copies would look chosen", b, cb)
	}
	for _, x := range []Ballot{cb, db} {
		if !x.Less(b) {
			t.Errorf("copy %v of %v is not below it", x, b)
		}
		if below := (Ballot{Counter: 6, Incarnation: 1 << 40, Node: "zz"}); !below.Less(x) {
			t.Errorf("copy %v of %v is not above %v, a real ballot of a lower counter", x, b, below)
		}
	}
	// Copies of copies: counters never wrap around to the top.
	low := Ballot{Counter: 1, Incarnation: 1, Node: "n1"}
	cc := d.copyBallot(c.copyBallot(low))
	if !cc.Less(low) || cc.Counter != 0 {
		t.Errorf("a copy of a copy of %v is %v: want counter 0, below every real ballot", low, cc)
	}
}
