package quorum

import (
	"testing"
	"time"
)

// A proposer never uses a ballot twice (design.md R4), not even after it
// forgot an idle key's state.

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

// A proposer that evicted an idle key's state does not start the key's
// ballots again: every prepare it sends on the key is above every ballot it
// used on it before, and two accepts at one ballot carry one value
// (design.md R4). Two values at one ballot would break Paxos: a reader may
// pick the stale one and write it back over a live grant.
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
