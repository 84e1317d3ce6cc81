//go:build linux

package faulttest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// A rolling upgrade from the previous release (protocol version 1, commit
// previous) to this tree (version 2) while clients lock on every node: a
// mesh of two old voters, a new voter, an old and a new node that do not
// vote; then each old node in turn leaves and starts again on the new
// binary. The history checks hold throughout (exclusion, tokens, fence,
// linearizability), every node is granted leases in the mixed mesh, and no
// node refuses another: no old node sees the operation kind it does not
// know (OpUnwatch, stripped from requests to it; a waiter that gives up on
// a held key makes a new node send it, which the scenario does on purpose
// at each stage), and no node refuses another's settings.
func TestRollingUpgrade(t *testing.T) {
	requireFaults(t)
	old := oldNodeBinary(t)
	t.Logf("the node binary of %s built in %v", previous, oldBuild.took.Round(time.Millisecond))
	oldNodes := []string{"a", "b", "q"}
	binaries := make(map[string]string)
	for _, name := range oldNodes {
		binaries[name] = old
	}
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p", "q"}, binaries: binaries})
	cl := c.startClients(workload{keys: []string{"k1", "k2", "k3"}}, c.nodes...)
	grantedOnEvery(t, c)
	unwatchFromNewNodes(t, c, "mixed mesh")

	for _, name := range oldNodes {
		n := c.node(name)
		start := control.Now()
		if err := c.upgrade(n, c.bin); err != nil {
			t.Fatal(err)
		}
		if _, err := c.waitWhole(wholeMeshTimeout); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s upgraded: whole again %v after it left", name, time.Duration(control.Now()-start).Round(time.Millisecond))
		keepWorking(t, c, cl)
		unwatchFromNewNodes(t, c, "after upgrading "+name)
	}
	cl.stop()
	s := c.finish()

	for _, n := range c.nodes {
		lines := readLines(c.logPath(n.name))
		for _, bad := range []string{"operation kind", "REFUSING A PEER"} {
			if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, bad) }); i >= 0 {
				t.Errorf("%s logged %q: %s", n.name, bad, lines[i])
			}
		}
	}
	t.Logf("figures: rolling upgrade from %s: %d ops checked", previous, s.ops)
}

// grantedOnEvery waits until the clients of every node were granted a
// lease.
func grantedOnEvery(t *testing.T, c *cluster) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var missing []string
		for _, n := range c.nodes {
			if !slices.ContainsFunc(c.hist.grantsOf(""), func(g grant) bool { return g.Node == n.name }) {
				missing = append(missing, n.name)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease granted on %v in 30s", missing)
		}
		<-tick.C
	}
}

// unwatchFromNewNodes makes each node of this tree's binary wait for a key
// another node holds and give up: an acquire that ends ungranted after
// waiting sends OpUnwatch to every voter, old ones included, unless it is
// stripped from what goes to them.
func unwatchFromNewNodes(t *testing.T, c *cluster, when string) {
	t.Helper()
	holder := c.node("c") // of this tree from the start
	res := c.do(holder, scripted, control.Request{Op: control.OpAcquire, Key: "w", TimeoutMS: 10000})
	if !res.ok() {
		t.Fatalf("%s: c could not take the key w: %s %s %v", when, res.code(), res.r.Msg, res.err)
	}
	gaveUp := 0
	for i, n := range c.nodes {
		if n == holder || n.bin != c.bin {
			continue
		}
		r := c.do(n, scripted+1+i, control.Request{Op: control.OpAcquire, Key: "w", TimeoutMS: 300})
		if r.code() == control.ErrTimeout {
			gaveUp++
		}
	}
	c.do(holder, scripted, control.Request{Op: control.OpRelease, Key: "w", TimeoutMS: 5000})
	t.Logf("%s: %d acquires of a held key gave up (each sends OpUnwatch to every voter)", when, gaveUp)
}
