//go:build linux

package faulttest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// waitBound is the longest a client on a node that stays up may wait for
// an acquire during a rolling restart. A key whose holder left is released
// at once, but one granted while its node was leaving is freed only when
// its lease ends, a TTL later; add the other clients' holds (3 × 50ms) and
// a few rounds, about 1.5s in all. The bound is 2.5 times that: room for a
// loaded two-core machine running -race binaries, and still far below what
// a lost wake-up or a lease outliving its holder would cost.
const waitBound = 3*defaultTTL + time.Second

// Every voter in turn leaves (SIGTERM-like: leases released, gossip told)
// and starts again, while a client on every node keeps locking: no double
// grant, tokens keep increasing, and no client of a node that stayed up
// waits longer than waitBound. The next voter goes only once the mesh is
// whole again (the restarted voter votes).
func TestRollingRestart(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2", "k3"}}, c.nodes...)
	type outage struct {
		node       string
		start, end int64
	}
	var outages []outage
	var back []time.Duration
	warmUp(t, c, cl)
	for _, n := range c.nodes {
		if !n.voter {
			continue
		}
		start := control.Now()
		c.leave(n)
		if err := c.start(n); err != nil {
			t.Fatal(err)
		}
		took, err := c.waitWhole(wholeMeshTimeout)
		if err != nil {
			t.Fatal(err)
		}
		end := control.Now()
		outages = append(outages, outage{n.name, start, end})
		back = append(back, time.Duration(end-start))
		t.Logf("voter %s left and started again; it votes %v after it left (%v after its start)",
			n.name, time.Duration(end-start).Round(time.Millisecond), took.Round(time.Millisecond))
		keepWorking(t, c, cl)
	}
	cl.stop()
	s := c.finish()

	// A client's wait counts unless its own node was restarting.
	var waits []time.Duration
	var over []timed
	for _, a := range cl.timings() {
		if a.kind != control.OpAcquire || a.code == control.ErrBusy {
			continue
		}
		mine := slices.ContainsFunc(outages, func(o outage) bool {
			return o.node == a.node && a.call < o.end && (a.code == "unknown" || a.ret > o.start)
		})
		if mine {
			continue
		}
		if a.code == "unknown" {
			t.Errorf("an acquire on %s (up throughout) got no answer", a.node)
			continue
		}
		waits = append(waits, a.took())
		if a.took() > waitBound || a.code == control.ErrTimeout {
			over = append(over, a)
		}
	}
	for _, a := range over {
		what := "granted"
		if a.code != "" {
			what = a.code
		}
		t.Errorf("a client on %s waited %v for an acquire (%s), beyond %v", a.node, a.took(), what, waitBound)
	}
	p := percentiles(waits, 50, 99, 100)
	t.Logf("figures: rolling restart: %d ops checked; voters back %v after leaving; acquire waits of clients on nodes up: n=%d p50 %v p99 %v max %v (bound %v)",
		s.ops, back, len(waits), p[0], p[1], p[2], waitBound)
}

// Every node is killed at once and started again: all lock state is gone,
// and the first tokens granted afterwards must still exceed every token
// granted before.
func TestFullRestart(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}}, c.nodes...)
	warmUp(t, c, cl)
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.kill(n)
		}()
	}
	wg.Wait()
	killedAt := control.Now()
	c.hist.allDown(killedAt)
	before := c.hist.maxToken()
	startedAt := control.Now()
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			t.Fatal(err)
		}
	}
	took, err := c.waitWhole(wholeMeshTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every node killed and started again; the mesh is whole %v after the starts", took.Round(time.Millisecond))
	keepWorking(t, c, cl)
	// The clients go on: wait for grants of every key after the restart.
	keys := []string{"k1", "k2"}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	firstAfter := make(map[string]grant)
	for len(firstAfter) < len(keys) && time.Now().Before(deadline) {
		<-tick.C
		for _, k := range keys {
			for _, g := range c.hist.grantsOf(k) {
				if g.Start > killedAt && (firstAfter[k].Token == 0 || g.Start < firstAfter[k].Start) {
					firstAfter[k] = g
				}
			}
		}
	}
	cl.stop()
	s := c.finish()
	if len(firstAfter) < len(keys) {
		t.Fatalf("after the restart only %d of %d keys were granted within 30s", len(firstAfter), len(keys))
	}
	var firstGrant time.Duration
	for _, k := range keys {
		g := firstAfter[k]
		if g.Token <= before {
			t.Errorf("the first grant of %q after the full restart has token %d, not above %d granted before", k, g.Token, before)
		}
		if d := time.Duration(g.Start - startedAt); firstGrant == 0 || d < firstGrant {
			firstGrant = d
		}
		t.Logf("%q: first token after the restart %d (highest before %d)", k, g.Token, before)
	}
	for _, g := range c.hist.grantsOf("") {
		if g.Start > killedAt && g.Token <= before {
			t.Errorf("%v after the full restart is not above %d", &g, before)
		}
	}
	t.Logf("figures: full restart: %d ops checked; first grant %v after the restart began (voters quarantine one MaxTTL)",
		s.ops, firstGrant.Round(time.Millisecond))
}

// warmUp lets the clients work until they have been granted a few leases.
func warmUp(t *testing.T, c *cluster, cl *clients) {
	t.Helper()
	keepWorking(t, c, cl)
}

// keepWorking waits until the clients have been granted a few more leases:
// the mesh serves them between two faults.
func keepWorking(t *testing.T, c *cluster, cl *clients) {
	t.Helper()
	const more = 10
	want := len(c.hist.grantsOf("")) + more
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(c.hist.grantsOf("")) < want {
		if time.Now().After(deadline) {
			t.Fatalf("the clients were granted fewer than %d leases in 30s", more)
		}
		<-tick.C
	}
}
