package quorum

import (
	"slices"
	"testing"
	"time"
)

// Fencing tokens across a majority loss, with voters on disks: tokens must
// then never depend on wall clocks. Soak seed 307844 with 7 voters granted
// one token twice. n9's stale grant became the register's value again when
// every other voter lost its memory and caught up from n9; n9 wrote it back
// and took its next grant on the fast path, whose round hears no replies,
// with the epoch after its base: the token n1 had been granted meanwhile.
// Here, at three voters: a keeps p2's stale value while b and c grant p1
// the next token, then b and c lose their registers.

// tokenLedger checks each grant of a key against every grant before it: no
// token is granted twice (the simulator's I3) and each is above every one
// before (I2).
type tokenLedger struct {
	t     testing.TB
	by    map[uint64]NodeID // who was granted each token
	top   uint64
	topBy NodeID
}

func newTokenLedger(t testing.TB) *tokenLedger {
	return &tokenLedger{t: t, by: make(map[uint64]NodeID)}
}

func (l *tokenLedger) granted(who NodeID, res OpResult) {
	l.t.Helper()
	if res.Outcome != Granted {
		l.t.Fatalf("%s: %v, want granted", who, res.Outcome)
	}
	if prev, ok := l.by[res.Epoch]; ok {
		l.t.Errorf("I3: token %d granted twice: to %s, then to %s", res.Epoch, prev, who)
	}
	if res.Epoch <= l.top {
		l.t.Errorf("I2: %s granted token %d, not above token %d granted to %s before", who, res.Epoch, l.top, l.topBy)
	}
	l.by[res.Epoch] = who
	if res.Epoch > l.top {
		l.top, l.topBy = res.Epoch, who
	}
}

// newEpochCluster makes voters a, b and c on disks and proposers p1 and p2,
// and restarts every voter once, as the soak's voters had: tokens continue
// from the voters' epoch marks, up to 2^26 µs (67 s) above the wall clocks,
// so that each grant's token is the last one plus one, not the wall clock.
func newEpochCluster(t *testing.T, tokens *tokenLedger) *testCluster {
	t.Helper()
	c := newTestCluster(t, voters3, "p1", "p2")
	c.useDisks()
	g := c.mustGrant("p1", "k")
	tokens.granted("p1", g)
	c.mustRelease("p1", "k", g.Epoch)
	for _, id := range voters3 {
		c.restartAcceptor(id)
	}
	c.advance(scQuarantine + scRoundTimeout)
	mustBeLive(t, c, voters3...)
	return c
}

func mustBeLive(t *testing.T, c *testCluster, ids ...NodeID) {
	t.Helper()
	for _, id := range ids {
		if a := c.node(id).acc; a.State() != Live {
			t.Fatalf("%s is %v after its quarantine, want live", id, a.State())
		}
	}
}

// mustHold fails unless voter id holds key granted to holder at epoch.
func mustHold(t *testing.T, c *testCluster, id NodeID, key string, holder NodeID, epoch uint64) {
	t.Helper()
	if v := c.registers(key)[id].Value; !v.Held || v.Holder != holder || v.Epoch != epoch {
		t.Fatalf("%s holds %v for %q; the scenario wants %s's grant of %d there", id, v, key, holder, epoch)
	}
}

// loseMajority crashes p1 for good and restarts b and c, which keep only
// their disks (their epoch marks), heals any partition, and waits until b
// and c vote again: p1's grant is gone, and what they hold of the key, if
// anything, they learned from a.
func loseMajority(t *testing.T, c *testCluster) {
	t.Helper()
	c.node("p1").prop = nil
	c.restartAcceptor("b")
	c.restartAcceptor("c")
	c.cutPair = make(map[[2]NodeID]bool)
	c.advance(scQuarantine + scRoundTimeout)
	mustBeLive(t, c, "b", "c")
}

// The soak's sequence. p2's grant is stranded at a while b and c grant p1
// the next token, then lose their registers: p2's grant is the register's
// value again. p2 frees it (a cleanup, standing for the soak's voter
// change, which wrote it back), and holds a fast path whose base is that
// stale grant's epoch. Its next acquire goes straight to accept: the token
// must be above every epoch the voters reported to p2's rounds before (b's
// and c's marks, above p1's token), not the epoch after the base.
func TestScenarioFastPathGrantAfterMajorityLossTakesANewToken(t *testing.T) {
	tokens := newTokenLedger(t)
	c := newEpochCluster(t, tokens)
	// p2 keeps trying to free a grant nobody holds for longer than the
	// outage below lasts.
	c.restartProposer("p2", func(cfg *ProposerConfig) { cfg.CleanupTimeout = 10 * time.Second })
	g2 := c.mustGrant("p2", "k")
	tokens.granted("p2", g2)

	// A partition: {p2, a} | {p1, b, c}. p2's renewals reach a alone: it
	// reports its lease lost and goes on trying to free the grant. p1,
	// waiting, is granted the key by b and c once p2's lease has run out
	// there: the next token.
	c.cutPair[[2]NodeID{"p2", "b"}] = true
	c.cutPair[[2]NodeID{"p2", "c"}] = true
	c.cutPair[[2]NodeID{"p1", "a"}] = true
	op := c.acquire("p1", "k", true)
	tokens.granted("p1", c.waitResult("p1", op, 3*scTTL))
	mustHold(t, c, "a", "k", "p2", g2.Epoch)

	loseMajority(t, c)
	// p2's cleanup, trying again, finds its grant the register's value and
	// frees it, which leaves p2 a fast path.
	p2 := c.node("p2")
	freed := func() bool {
		for _, r := range p2.results {
			if r.Internal && r.Outcome == Released && r.Epoch == g2.Epoch {
				return true
			}
		}
		return false
	}
	for start := c.now; !freed(); c.advance(time.Millisecond) {
		if c.now-start > 4*scRoundTimeout {
			t.Fatalf("p2 has not freed its stranded grant of %d %v after b and c went live", g2.Epoch, c.now-start)
		}
	}
	if p2.prop.keys["k"].fastVoters == nil {
		t.Fatalf("p2 holds no fast path for %q after freeing its grant", "k")
	}

	mark := len(c.waves)
	tokens.granted("p2", c.mustGrant("p2", "k"))
	if w := c.wavesSince(mark); len(w) == 0 || !slices.Equal(kinds(w[0]), []OpKind{OpAccept}) {
		t.Errorf("p2's acquire sent %v: the scenario wants it on the fast path (accept first)", waveKinds(w))
	}
}

// A fast path that rests on promises given before the loss: nothing told
// p2 of p1's grant, so its acquire proposes the epoch after its base, p1's
// token, and only a, the voter that kept its promise, accepts. The next
// round (a answers first) finds p2's own grant, a moment old, the
// register's value: it keeps its epoch only if no voter reported a higher
// one. b and c report their marks, above p1's token: a fresh token.
func TestScenarioOwnGrantTakenUpAfterMajorityLossTakesANewToken(t *testing.T) {
	tokens := newTokenLedger(t)
	c := newEpochCluster(t, tokens)
	// p2 is granted the key and releases it: it holds a fast path on
	// every voter, its base the freed key at p2's token.
	g2 := c.mustGrant("p2", "k")
	tokens.granted("p2", g2)
	c.mustRelease("p2", "k", g2.Epoch)

	// p1 is granted the next token by b and c; a hears nothing of it.
	c.cutPair[[2]NodeID{"p1", "a"}] = true
	tokens.granted("p1", c.mustGrant("p1", "k"))

	loseMajority(t, c)
	if c.node("p2").prop.keys["k"].fastVoters == nil {
		t.Fatalf("p2 holds no fast path for %q", "k")
	}
	mark := len(c.answers)
	tokens.granted("p2", c.mustGrant("p2", "k"))
	// The scenario: p2's acquire went straight to accept, and a alone
	// accepted.
	var fast []NodeID
	for _, a := range c.answers[mark:] {
		if a.req.Ops[0].Kind != OpAccept {
			break
		}
		if a.resp.Status == StatusOK && a.resp.Results[0].OK {
			fast = append(fast, a.req.To)
		}
	}
	if !slices.Equal(fast, []NodeID{"a"}) {
		t.Errorf("voters that accepted p2's fast-path grant: %v; the scenario wants a alone", fast)
	}
}
