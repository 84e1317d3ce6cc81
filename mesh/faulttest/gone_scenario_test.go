//go:build linux

package faulttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// A voter's machine is gone for good: kill -9 of a voter, never started
// again, then, through surviving nodes, AddVoter of a node that did not
// vote and RemoveVoter of the dead one (the order README gives: a majority
// of the voters stays alive throughout). Both changes must succeed; every
// live node must end on the new configuration (the spare in and voting,
// the dead voter out and retired). Clients lock on every node throughout
// and after: on the nodes that stay up, every acquire is granted within
// waitBound, and the whole history passes the checks.
func TestVoterGoneForGood(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p", "q"}, dataDirs: true})
	cl := c.startClients(workload{keys: []string{"k1", "k2", "k3"}}, c.nodes...)
	warmUp(t, c, cl)
	dead, spare := c.node("c"), c.node("p")
	// The add runs through a voter, the remove through the other node
	// that does not vote: any node may change the voters.
	addVia, removeVia := c.node("a"), c.node("q")
	if _, err := c.waitConfig(configWant{voters: []string{"a", "b", "c"}}, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}

	killedAt := control.Now()
	c.kill(dead)
	t.Logf("kill -9 of voter %s; it is never started again", dead.name)

	add, err := c.addVoter(addVia, spare.name)
	if err != nil {
		t.Fatalf("replacing the dead voter: %v", err)
	}
	t.Logf("%v; %s then knows %s", add, addVia.name, describeConfig(add.config))
	if !slices.Contains(add.config.Voters, spare.name) {
		t.Errorf("AddVoter(%s) returned, but %s knows voters %v", spare.name, addVia.name, add.config.Voters)
	}
	spread, err := c.waitConfig(configWant{voters: []string{"a", "b", "c", "p"}}, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("after AddVoter(%s): %v", spare.name, err)
	}
	t.Logf("every live node knows the added voter %v after the change returned; %s votes", spread.Round(time.Millisecond), spare.name)
	keepWorking(t, c, cl)

	remove, err := c.removeVoter(removeVia, dead.name)
	if err != nil {
		t.Fatalf("removing the dead voter: %v", err)
	}
	t.Logf("%v; %s then knows %s", remove, removeVia.name, describeConfig(remove.config))
	if slices.Contains(remove.config.Voters, dead.name) {
		t.Errorf("RemoveVoter(%s) returned, but %s knows voters %v", dead.name, removeVia.name, remove.config.Voters)
	}
	final := configWant{voters: []string{"a", "b", "p"}, retired: []string{dead.name}}
	spread, err = c.waitConfig(final, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("after RemoveVoter(%s): %v", dead.name, err)
	}
	settledAt := control.Now()
	t.Logf("every live node knows %v %v after the change returned", final, spread.Round(time.Millisecond))

	s, w := endOnNewVoters(t, c, cl, killedAt, settledAt, dead.name)
	t.Logf("figures: voter gone for good: %d ops checked; add %v, remove %v; kill to settled %v; acquires on live nodes from the kill to the settled configuration: %v",
		s.ops, add.took.Round(time.Millisecond), remove.took.Round(time.Millisecond),
		time.Duration(settledAt-killedAt).Round(time.Millisecond), w)
}

// The autopilot on in every node (DeadAfter 2s, Target 3) replaces a voter
// killed for good: with nobody's help, every live node ends on the
// configuration with the healthy spare in and voting, the dead voter out
// and retired. The killed voter is a, the lowest name, which was the
// autopilot's pilot: another voter must take over. A node started with
// NoVote, whose name sorts before the spare's, is never made a voter
// (checked in every configuration seen while waiting, and at the end);
// and as far as the configurations seen show, the dead voter was never
// removed before its replacement was added. Clients lock throughout, as in
// TestVoterGoneForGood.
func TestAutopilotReplacesGoneVoter(t *testing.T) {
	requireFaults(t)
	ap := &mesh.AutopilotConfig{DeadAfter: 2 * time.Second, Interval: 200 * time.Millisecond, Target: 3}
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"novote", "spare"}, dataDirs: true,
		autopilot: ap, noVote: []string{"novote"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2", "k3"}}, c.nodes...)
	warmUp(t, c, cl)
	dead, noVote := c.node("a"), c.node("novote")
	// With every voter alive, the autopilot changes nothing.
	before, err := c.voters(c.node("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.waitConfig(configWant{voters: []string{"a", "b", "c"}}, 10*time.Second, nil); err != nil {
		t.Fatalf("with every voter alive: %v", err)
	}

	killedAt := control.Now()
	c.kill(dead)
	t.Logf("kill -9 of voter %s (the pilot); it is never started again", dead.name)

	// While waiting: when the next pilot's gossip shows the dead voter
	// dead, when the first change is seen, and every configuration seen.
	pilot := c.node("b")
	var deadAt, changedAt int64
	seen := make(map[string]bool)
	var broken []string
	see := func(node string, cfg *control.Configuration) {
		if deadAt == 0 && node == pilot.name {
			if st, err := c.status(pilot); err == nil && st.Members[dead.name] == "dead" {
				deadAt = control.Now()
				t.Logf("%.3fs after the kill, %s's gossip shows %s dead", time.Duration(deadAt-killedAt).Seconds(), pilot.name, dead.name)
			}
		}
		if changedAt == 0 && cfg.Version != before.Version {
			changedAt = control.Now()
		}
		d := describeConfig(cfg)
		if seen[d] {
			return
		}
		seen[d] = true
		t.Logf("%.3fs after the kill, %s knows %s", time.Duration(control.Now()-killedAt).Seconds(), node, d)
		switch {
		case slices.Contains(cfg.Voters, noVote.name):
			broken = append(broken, fmt.Sprintf("%s, started with NoVote, is a voter: %s knows %s", noVote.name, node, d))
		case len(cfg.Voters) < ap.Target:
			broken = append(broken, fmt.Sprintf("the dead voter was removed before a replacement was added: %s knows %s", node, d))
		}
	}
	final := configWant{voters: []string{"b", "c", "spare"}, retired: []string{dead.name}}
	_, err = c.waitConfig(final, 45*time.Second, see)
	settledAt := control.Now()
	for _, b := range broken {
		t.Error(b)
	}
	if err != nil {
		t.Fatalf("the autopilot did not replace %s: %v", dead.name, err)
	}
	replaced := time.Duration(settledAt - killedAt)
	t.Logf("every live node knows %v %v after the kill (gossip's failure detection and DeadAfter %v included)",
		final, replaced.Round(time.Millisecond), ap.DeadAfter)
	if deadAt == 0 || changedAt < deadAt+int64(ap.DeadAfter) {
		// Either gossip never said dead and the autopilot acted anyway,
		// or it acted before DeadAfter had passed.
		t.Errorf("the first change was seen %v after the kill, the dead voter was seen dead %v after it: not DeadAfter (%v) later",
			time.Duration(changedAt-killedAt), time.Duration(deadAt-killedAt), ap.DeadAfter)
	}
	after, err := c.voters(c.node("b"))
	if err != nil {
		t.Fatal(err)
	}
	if after.Version <= before.Version {
		t.Errorf("the configuration's version went from %d to %d", before.Version, after.Version)
	}
	if st, err := c.status(noVote); err != nil {
		t.Fatal(err)
	} else if st.Voting != "" {
		t.Errorf("%s, started with NoVote, votes (%q)", noVote.name, st.Voting)
	}

	s, w := endOnNewVoters(t, c, cl, killedAt, settledAt, dead.name)
	t.Logf("figures: autopilot: %d ops checked; kill to settled replacement %v (seen dead in gossip %v, first change seen %v, version %d to %d); acquires on live nodes from the kill to the settled configuration: %v",
		s.ops, replaced.Round(time.Millisecond), time.Duration(deadAt-killedAt).Round(time.Millisecond),
		time.Duration(changedAt-killedAt).Round(time.Millisecond), before.Version, after.Version, w)
}

// endOnNewVoters ends a scenario whose voters were replaced: the new voters
// must serve on their own (more grants, a whole mesh), then the history is
// checked, and the acquires of clients on live nodes between the kill and
// the settled configuration (checkWaits).
func endOnNewVoters(t *testing.T, c *cluster, cl *clients, killedAt, settledAt int64, dead string) (summary, waitStats) {
	t.Helper()
	keepWorking(t, c, cl)
	if took, err := c.waitWhole(wholeMeshTimeout); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("the mesh of the new voters is whole (%v)", took.Round(time.Millisecond))
	}
	cl.stop()
	s := c.finish()
	return s, checkWaits(t, cl, killedAt, settledAt, dead)
}

// waitStats are the acquires of clients on nodes that stayed up, over a
// window.
type waitStats struct {
	n                 int
	p50, p99, longest time.Duration
	longestOn, codes  string
}

func (w waitStats) String() string {
	return fmt.Sprintf("n=%d p50 %v p99 %v longest %v (on %s)%s", w.n, w.p50, w.p99, w.longest, w.longestOn, w.codes)
}

// checkWaits looks at the acquires of clients on nodes other than dead
// that overlap [from, to]: each must be granted (an acquire waits; with a
// majority alive throughout, none may time out, fail, or go unanswered)
// within waitBound (a key the dead node held is free a TTL after the
// kill; see waitBound). It returns their waits.
func checkWaits(t *testing.T, cl *clients, from, to int64, dead string) waitStats {
	t.Helper()
	var waits []time.Duration
	var w waitStats
	failed := make(map[string]int)
	for _, a := range cl.timings() {
		unanswered := a.code == "unknown" // no answer at all: ret is 0
		if a.kind != control.OpAcquire || a.node == dead || a.call > to || (a.ret < from && !unanswered) {
			continue
		}
		switch a.code {
		case "":
		case control.ErrBusy:
			continue // refused by the node itself (its last lease on the key is still ending)
		default:
			failed[a.code]++
			t.Errorf("an acquire on %s (up throughout) around the voter changes ended %q after %v", a.node, a.code, a.took())
			continue
		}
		waits = append(waits, a.took())
		if a.took() > w.longest {
			w.longest, w.longestOn = a.took(), a.node
		}
		if a.took() > waitBound {
			t.Errorf("a client on %s waited %v for an acquire around the voter changes, beyond %v", a.node, a.took(), waitBound)
		}
	}
	w.n = len(waits)
	if w.n == 0 {
		t.Errorf("no acquire of a client on a live node overlapped the voter changes")
	}
	p := percentiles(waits, 50, 99)
	w.p50, w.p99 = p[0], p[1]
	if len(failed) > 0 {
		w.codes = fmt.Sprintf("; failed: %v", failed)
	}
	return w
}
