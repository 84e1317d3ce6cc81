package quorum

import (
	"fmt"
	"time"
)

// Lease values in the simulator: every acquire carries a value of its own
// (AcquireOptions.Data), and with simConfig.Updates a holder now and then
// writes a new one (Node.Update). The checker holds them to:
//
//	V1 every held value a read or an observer reports carries data its
//	   holder wrote for that key (the grant's, or an update's): values are
//	   never lost, mixed up between holders, or made up, through renewals,
//	   write-backs, catch-ups, voter changes and dropped registers;
//	V2 an update is reported Updated only for the lease it was asked of,
//	   and only while that lease is held.

// nextData is the value of the client's next acquire of key, noted as
// written by this node's life.
func (c *simClient) nextData(key string) string {
	c.data = fmt.Sprintf("c%d@%d", c.id, c.s.now.Microseconds())
	if c.sem != nil {
		c.data = c.sem.sem.SlotValue(c.data)
	}
	c.s.check.wroteData(c.n, key, c.data)
	return c.data
}

func (k *simChecker) wroteData(n *simNode, key, data string) {
	if k.data == nil {
		k.data = make(map[string]map[string]bool)
	}
	w := key + "|" + n.holderName()
	if k.data[w] == nil {
		k.data[w] = make(map[string]bool)
	}
	k.data[w][data] = true
}

// checkData checks V1 on a held value a node reported.
func (k *simChecker) checkData(n *simNode, key string, v Value, what string) {
	if !v.Held {
		if v.Data != "" {
			k.s.failf("V1: %s's %s of %q is free but carries data %q", n.id, what, key, v.Data)
		}
		return
	}
	if !k.data[key+"|"+holderName(v.Holder, v.HolderInc)][v.Data] {
		k.s.failf("V1: %s's %s of %q: held by %s/%d (token %d) with data %q, which that holder never wrote",
			n.id, what, key, v.Holder, v.HolderInc, v.Epoch, v.Data)
	}
}

// maybeUpdate has the client write a new value under grant g, now and
// then, while it holds it.
func (c *simClient) maybeUpdate(g *grantRec, holdFor time.Duration) {
	s := c.s
	if !s.cfg.Updates || c.scripted || s.rand.Float64() > 0.3 {
		return
	}
	c.later(time.Duration(s.rand.Int63n(int64(holdFor)+1)), func() {
		if c.state != cHolding || c.grant != g || c.stalled || c.updating(c.updateOp) {
			return
		}
		data := fmt.Sprintf("c%d@%d+", c.id, s.now.Microseconds())
		if c.s.cfg.Semaphore > 0 {
			data = s.semaphore().SlotValue(data)
		}
		id, err := c.n.node.Update(g.key, g.token, data, 0)
		if err != nil {
			return // lost meanwhile
		}
		s.check.wroteData(c.n, g.key, data)
		s.stats.Updates++
		c.updateOp, c.updateInc = id, c.n.inc
		c.n.ops[id] = c
	})
}

// updating reports whether op is the client's update in flight (in this
// life of its node: operation ids start again at a restart).
func (c *simClient) updating(op OpID) bool {
	return op != 0 && op == c.updateOp && c.updateInc == c.n.inc
}

// onUpdate checks V2 on an update's result.
func (c *simClient) onUpdate(res OpResult) {
	c.updateOp = 0
	if res.Outcome != Updated {
		return
	}
	g := c.grant
	switch {
	case g == nil || g.key != res.Key || g.token != res.Epoch:
		c.s.failf("V2: c%d's update of %q reported Updated for token %d, which it does not hold", c.id, res.Key, res.Epoch)
	case g.lost || g.closed:
		c.s.failf("V2: c%d's update of %q token %d reported Updated after the lease ended", c.id, res.Key, res.Epoch)
	}
}
