package quorum

import "testing"

// Forgetting registers: what a voter may drop, and when.

// idleOne makes p1 keep fast-path state for one idle key at most: the key
// it used before the last is dropped as soon as the last goes idle.
func idleOne(cfg *ProposerConfig) { cfg.MaxIdleKeys = 1 }

// A node that drops an idle key it released, every voter having accepted
// the release, tells the voters to forget the key: no register is left of
// it, and the next grant's token is still above the last.
func TestScenarioDroppedReleasedKeyIsForgottenByTheVoters(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.restartProposer("p1", idleOne)
	g := c.mustGrant("p1", "k1")
	c.mustRelease("p1", "k1", g.Epoch)
	for id, r := range c.registers("k1") {
		if r.Accepted.IsZero() || r.Value.Held {
			t.Fatalf("before p1 drops k1, %s holds %v at %v: want the release", id, r.Value, r.Accepted)
		}
	}
	g2 := c.mustGrant("p1", "k2")
	c.mustRelease("p1", "k2", g2.Epoch) // k1 is dropped as k2 goes idle
	c.settle()
	for _, id := range c.m.Voters {
		if c.node(id).acc.regs["k1"] != nil {
			t.Errorf("%s keeps k1 after p1 dropped it", id)
		}
		if c.node(id).acc.regs["k2"] == nil {
			t.Errorf("%s forgot k2, which p1 still keeps", id)
		}
	}
	if got := c.node("p1").prop.Stats().Forgets; got != 1 {
		t.Errorf("p1 asked to forget %d keys, want 1 (k1)", got)
	}
	g3 := c.mustGrant("p1", "k1")
	if g3.Epoch <= g.Epoch {
		t.Fatalf("k1 granted again at %d after %d: the token went back", g3.Epoch, g.Epoch)
	}
}

// A release that one voter missed leaves that voter the grant before it:
// dropping the key then asks nobody to forget it (forgotten at the others,
// the grant would again be the highest value a majority reports).
func TestScenarioReleaseAVoterMissedForgetsNothing(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.restartProposer("p1", idleOne)
	g := c.mustGrant("p1", "k1")
	c.cutPair[[2]NodeID{"p1", "c"}] = true
	c.mustRelease("p1", "k1", g.Epoch)
	c.cutPair[[2]NodeID{"p1", "c"}] = false
	g2 := c.mustGrant("p1", "k2")
	c.mustRelease("p1", "k2", g2.Epoch)
	c.settle()
	for _, id := range c.m.Voters {
		if c.node(id).acc.regs["k1"] == nil {
			t.Errorf("%s forgot k1, whose release c missed", id)
		}
	}
	if r := c.registers("k1")["c"]; !r.Value.Held {
		t.Fatalf("c holds %v for k1: the scenario wants it to have missed the release", r.Value)
	}
	if got := c.node("p1").prop.Stats().Forgets; got != 0 {
		t.Errorf("p1 asked to forget %d keys, want none", got)
	}
}

// A release on the fast path goes to the voters whose promise of its
// ballot the node holds; one whose acknowledgment of the grant was late
// is left out, and would keep the grant, so that no voter ever forgot the
// key. Once a majority took the release (it is chosen), it goes to that
// voter too, and the key is forgotten everywhere when the node drops it.
func TestScenarioFastReleaseReachesTheVoterItLeftOut(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.restartProposer("p1", idleOne)
	g0 := c.mustGrant("p1", "k0") // p1 hears from every voter
	c.mustRelease("p1", "k0", g0.Epoch)
	c.hold["c"] = true
	g := c.mustGrant("p1", "k1") // on a and b; c answers late
	c.mustRelease("p1", "k1", g.Epoch)
	c.release("c")
	regs := c.registers("k1")
	for _, id := range c.m.Voters {
		if r := regs[id]; r.Value.Held || r.Accepted != regs["a"].Accepted {
			t.Fatalf("%s holds %v at %v; a holds the release at %v", id, r.Value, r.Accepted, regs["a"].Accepted)
		}
	}
	g2 := c.mustGrant("p1", "k2")
	c.mustRelease("p1", "k2", g2.Epoch) // k1 is dropped as k2 goes idle
	c.settle()
	for _, id := range c.m.Voters {
		if c.node(id).acc.regs["k1"] != nil {
			t.Errorf("%s keeps k1 after p1 dropped it", id)
		}
	}
}
