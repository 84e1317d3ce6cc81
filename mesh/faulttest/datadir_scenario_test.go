//go:build linux

package faulttest

import (
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// A brand-new mesh of three voters with data directories, of which only two
// are started, with the operator's word that the mesh is new (NewMesh):
// nobody ever voted, so the two vote at once (no quarantine) and grant,
// while the third machine is not up.
func TestColdStartTwoOfThree(t *testing.T) {
	requireFaults(t)
	nodeBinary(t) // built (or found built) before the clock starts
	start := control.Now()
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"},
		dataDirs: true, newMesh: true, notStarted: []string{"c"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}}, c.node("a"), c.node("b"), c.node("p"))
	warmUp(t, c, cl)
	cl.stop()
	s := c.finish()
	first := int64(0)
	for _, g := range c.hist.grantsOf("") {
		if first == 0 || g.Start < first {
			first = g.Start
		}
	}
	t.Logf("figures: cold start, 2 of 3 voters, data dirs: %d ops checked; first grant %v after the first node was started",
		s.ops, time.Duration(first-start).Round(time.Millisecond))
}

// Every node is killed at once; voter c's machine is gone for good, and the
// others start again with their data directories and their wall clocks an
// hour back. A majority of the voters (a and b) brings the mesh back, and
// the first tokens granted afterwards exceed every token granted before:
// with data directories tokens rest on the voters' epoch marks, not on
// wall clocks.
func TestFullRestartWithVoterGone(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"}, dataDirs: true})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}}, c.node("a"), c.node("b"), c.node("p"))
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
		if n.name == "c" {
			continue
		}
		n.wallBack = time.Hour
		if err := c.start(n); err != nil {
			t.Fatal(err)
		}
	}
	c.joinAll()
	took, err := c.waitWhole(wholeMeshTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every node killed, c gone for good, the others started again with their wall clocks an hour back; a and b vote %v after the starts",
		took.Round(time.Millisecond))
	keepWorking(t, c, cl)
	cl.stop()
	s := c.finish()
	first := int64(0)
	for _, g := range c.hist.grantsOf("") {
		if g.Start <= killedAt {
			continue
		}
		if g.Token <= before {
			t.Errorf("%v after the full restart is not above %d", &g, before)
		}
		if first == 0 || g.Start < first {
			first = g.Start
		}
	}
	t.Logf("figures: full restart with a voter gone, data dirs: %d ops checked; first grant %v after the restart began (restarted voters quarantine one MaxTTL)",
		s.ops, time.Duration(first-startedAt).Round(time.Millisecond))
}
