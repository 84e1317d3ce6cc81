//go:build linux

package faulttest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// deadWindow is memberlist's GossipToTheDeadTime in the partition
// scenario: shorter than the local default (15s) so that a cut outlasting
// it fits in CI time. Past it, memberlist no longer gossips to the nodes it
// declared dead; only the mesh's rejoin loop brings them back.
const deadWindow = 3 * time.Second

// Five voters, each in its own network namespace, and a holding a key when
// each cut starts. First a → c only (one way): everyone keeps a majority,
// grants fresh keys, and a keeps its lease. Then {a,b} is cut from {c,d,e}:
// both ways, one way ({a,b} cannot send, then cannot receive), and both
// ways for longer than memberlist's dead-node gossip window. In those the
// minority grants nothing (fresh keys included), a's lease is reported
// lost, and the majority takes a's key only after a's lease ended. After
// every heal the mesh is whole again and every node grants again, with
// nothing restarted. Clients lock on every node throughout.
func TestPartition(t *testing.T) {
	requireFaults(t)
	names := []string{"a", "b", "c", "d", "e"}
	lab := newNetlab(t, names)
	c := newCluster(t, clusterSpec{voters: names, lab: lab, deadWindow: deadWindow})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}, acquireTimeout: 5 * time.Second}, c.nodes...)
	warmUp(t, c, cl)
	minority, majority := names[:2], names[2:]
	type window struct{ from, to int64 }
	var cuts []window
	var heals, takeovers []time.Duration
	for i, cut := range []struct {
		name  string
		apply func()
		// isolated: a and b have no majority during the cut.
		isolated, long bool
	}{
		// First, while every connection is fresh: after a cut, a node's
		// pooled ballot connections to the far side stay in TCP
		// retransmission backoff for seconds after the heal.
		{name: "a -> c dropped (one way)", apply: func() { lab.cut([]string{"a"}, []string{"c"}) }},
		{name: "{a,b} | {c,d,e}", apply: func() { lab.split(minority, majority) }, isolated: true},
		{name: "{a,b} -> {c,d,e} dropped (one way)", apply: func() { lab.cut(minority, majority) }, isolated: true},
		{name: "{c,d,e} -> {a,b} dropped (one way)", apply: func() { lab.cut(majority, minority) }, isolated: true},
		{name: "{a,b} | {c,d,e} beyond the dead-node gossip window", apply: func() { lab.split(minority, majority) }, isolated: true, long: true},
	} {
		t.Logf("cut %d: %s", i+1, cut.name)
		held := fmt.Sprintf("held%d", i)
		g := c.do(c.node("a"), scripted, control.Request{Op: control.OpAcquire, Key: held, TimeoutMS: 10000})
		if !g.ok() {
			t.Fatalf("a could not take %q before the cut: %s %s %v", held, g.code(), g.r.Msg, g.err)
		}
		cut.apply()
		cutAt := control.Now() // every rule is in place

		// Fresh keys, never held: granted on every side that has a
		// majority, on no other.
		var wg sync.WaitGroup
		for j, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("fresh%d%s", i, name)
				res := c.do(c.node(name), scripted+2+j, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 1500})
				inMinority := cut.isolated && slices.Contains(minority, name)
				switch {
				case inMinority && res.ok():
					t.Errorf("%s, in the minority, was granted %q (token %d) during the cut", name, key, res.r.Token)
				case !inMinority && !res.ok():
					t.Errorf("%s, with a majority, was not granted %q during the cut: %s %s", name, key, res.code(), res.r.Msg)
				}
				if res.ok() {
					c.do(c.node(name), scripted+2+j, control.Request{Op: control.OpRelease, Key: key, TimeoutMS: 5000})
				}
			}()
		}
		wg.Wait()

		if cut.isolated {
			// a cannot renew: its lease ends, and only then may the
			// majority grant the key.
			ended, err := c.hist.waitEnded(held, g.r.Token, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if ended.How != control.EndLost {
				t.Errorf("a's lease on %q ended %s during the cut, want %s", held, ended.How, control.EndLost)
			}
			w := c.do(c.node("c"), scripted+1, control.Request{Op: control.OpAcquire, Key: held, TimeoutMS: 10000})
			if !w.ok() {
				t.Fatalf("c, with the majority, could not take %q from the cut-off a: %s %s %v", held, w.code(), w.r.Msg, w.err)
			}
			if w.r.At <= ended.End {
				t.Errorf("c was granted %q at %d, before a's lease ended at %d", held, w.r.At, ended.End)
			}
			takeovers = append(takeovers, time.Duration(w.r.At-cutAt))
			t.Logf("a's lease (token %d) reported lost %v after the cut; c holds %q %v after the cut, %v after a's deadline (token %d)",
				g.r.Token, time.Duration(ended.Reported-cutAt).Round(time.Millisecond), held,
				time.Duration(w.r.At-cutAt).Round(time.Millisecond), time.Duration(w.r.At-ended.End).Round(time.Millisecond), w.r.Token)
			c.do(c.node("c"), scripted+1, control.Request{Op: control.OpRelease, Key: held, TimeoutMS: 5000})
		} else {
			if ended := c.hist.grantsOf(held); len(ended) != 1 || ended[0].End != 0 {
				t.Errorf("a's lease on %q did not survive a cut that left it a majority: %v", held, ended)
			}
			c.do(c.node("a"), scripted, control.Request{Op: control.OpRelease, Key: held, TimeoutMS: 5000})
		}

		if cut.long {
			deadAt := waitDead(t, c, "c", "a")
			waitDead(t, c, "a", "c")
			// The cut itself: it lasts past memberlist's window.
			if rest := time.Duration(deadAt + int64(deadWindow+time.Second) - control.Now()); rest > 0 {
				time.Sleep(rest)
			}
			t.Logf("the cut lasted %v; c declared a dead %v after it began",
				time.Duration(control.Now()-cutAt).Round(time.Millisecond), time.Duration(deadAt-cutAt).Round(time.Millisecond))
		}
		healAt := control.Now()
		lab.heal()
		cuts = append(cuts, window{cutAt, healAt})
		if cut.isolated {
			for _, gr := range c.hist.grantsOf("") {
				if slices.Contains(minority, gr.Node) && gr.Call > cutAt && gr.Start < healAt {
					t.Errorf("the minority granted during the cut: %v (asked %v after the cut began)", &gr, time.Duration(gr.Call-cutAt))
				}
			}
		}
		took, err := c.waitWhole(wholeMeshTimeout)
		if err != nil {
			t.Fatalf("after healing %s: %v", cut.name, err)
		}
		// Every node grants again. The first grant on the healed minority
		// can wait out the TCP retransmission backoff of its pooled ballot
		// connections (seconds after a long cut), hence the generous wait.
		var slowest time.Duration
		var mu sync.Mutex
		for j, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("after%d%s", i, name)
				res := c.do(c.node(name), scripted+2+j, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 30000})
				if !res.ok() {
					t.Errorf("%s could not take %q after the heal: %s %s %v", name, key, res.code(), res.r.Msg, res.err)
					return
				}
				c.do(c.node(name), scripted+2+j, control.Request{Op: control.OpRelease, Key: key, TimeoutMS: 5000})
				mu.Lock()
				slowest = max(slowest, time.Duration(res.r.At-healAt))
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		heals = append(heals, slowest)
		t.Logf("healed: the mesh is whole %v later; every node grants within %v", took.Round(time.Millisecond), slowest.Round(time.Millisecond))
		keepWorking(t, c, cl)
	}
	cl.stop()
	s := c.finish()
	t.Logf("figures: partition: %d ops checked; majority takeover after the cut %v; heal to every node granting %v", s.ops, takeovers, heals)
}

// waitDead waits until observer's gossip declares name dead and returns
// when it saw it.
func waitDead(t *testing.T, c *cluster, observer, name string) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.status(c.node(observer))
		if err == nil && st.Members[name] == "dead" {
			return control.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not see %s dead 30s into the cut (%v)", observer, name, err)
		}
		<-tick.C
	}
}
