//go:build linux

package faulttest

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// takeoverSlack is what the suite allows beyond the TTL for a killed
// holder's key to reach a waiter (C4 says a round trip; the rest is room
// for a loaded machine running -race binaries).
const takeoverSlack = 750 * time.Millisecond

// kill -9 the holder of a key while another node waits for it: the waiter
// holds the key within the TTL plus a small bound, with a higher token.
// The holder is first a node that does not vote, then a voter (restarted
// afterwards, it must vote again). Clients lock other keys throughout.
func TestKillHolder(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}}, c.nodes...)
	var takeovers []time.Duration
	for i, r := range []struct{ holder, waiter string }{{"p", "b"}, {"a", "c"}} {
		key := fmt.Sprintf("victim%d", i)
		holder, waiter := c.node(r.holder), c.node(r.waiter)
		got := c.do(holder, scripted, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 5000})
		if !got.ok() {
			t.Fatalf("%s could not take %q: %s %s %v", r.holder, key, got.code(), got.r.Msg, got.err)
		}
		if w := c.do(holder, scripted, control.Request{Op: control.OpWrite, Key: key}); !w.ok() || w.fence != nil {
			t.Fatalf("%s's write under token %d: %s %v", r.holder, got.r.Token, w.code(), w.fence)
		}
		waited := make(chan result, 1)
		go func() {
			waited <- c.do(waiter, scripted+1, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 15000})
		}()
		killedAt := control.Now()
		c.kill(holder)
		w := <-waited
		if !w.ok() {
			t.Fatalf("%s waiting for %q after the kill of %s: %s %s %v", r.waiter, key, r.holder, w.code(), w.r.Msg, w.err)
		}
		took := time.Duration(w.r.At - killedAt)
		takeovers = append(takeovers, took)
		t.Logf("kill -9 of %s (holding %q, token %d): %s holds it %v later, token %d",
			r.holder, key, got.r.Token, r.waiter, took.Round(time.Millisecond), w.r.Token)
		if w.r.Token <= got.r.Token {
			t.Errorf("%s's token %d is not above the killed holder's %d", r.waiter, w.r.Token, got.r.Token)
		}
		if bound := c.spec.ttl + takeoverSlack; took > bound {
			t.Errorf("%s held %q %v after the kill, beyond the TTL plus %v (%v)", r.waiter, key, took, takeoverSlack, bound)
		}
		if wr := c.do(waiter, scripted+1, control.Request{Op: control.OpWrite, Key: key}); !wr.ok() || wr.fence != nil {
			t.Errorf("%s's write under token %d: %s %v", r.waiter, w.r.Token, wr.code(), wr.fence)
		}
		c.do(waiter, scripted+1, control.Request{Op: control.OpRelease, Key: key, TimeoutMS: 5000})
		if err := c.start(holder); err != nil {
			t.Fatal(err)
		}
		took, err := c.waitWhole(wholeMeshTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restarted: the mesh is whole again %v later", r.holder, took.Round(time.Millisecond))
	}
	cl.stop()
	s := c.finish()
	t.Logf("figures: kill: %d ops checked, takeover after kill -9 %v (bound %v)", s.ops, takeovers, c.spec.ttl+takeoverSlack)
}

// SIGSTOP the holder beyond its TTL, let another node take the key, then
// SIGCONT: the resumed process reports its lease lost, and the write it
// had already decided on, sent under its old token, is refused by the
// fenced resource.
func TestPausedHolderIsFenced(t *testing.T) {
	requireFaults(t)
	c := newCluster(t, clusterSpec{voters: []string{"a", "b", "c"}, others: []string{"p"}})
	cl := c.startClients(workload{keys: []string{"k1", "k2"}}, c.nodes...)
	const key = "fenced"
	var takeovers, notices []time.Duration
	for _, r := range []struct{ holder, waiter string }{{"a", "b"}, {"p", "c"}} {
		holder, waiter := c.node(r.holder), c.node(r.waiter)
		got := c.do(holder, scripted, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 5000})
		if !got.ok() {
			t.Fatalf("%s could not take %q: %s %s %v", r.holder, key, got.code(), got.r.Msg, got.err)
		}
		if w := c.do(holder, scripted, control.Request{Op: control.OpWrite, Key: key}); !w.ok() || w.fence != nil {
			t.Fatalf("%s's write under token %d: %s %v", r.holder, got.r.Token, w.code(), w.fence)
		}
		waited := make(chan result, 1)
		go func() {
			waited <- c.do(waiter, scripted+1, control.Request{Op: control.OpAcquire, Key: key, TimeoutMS: 15000})
		}()
		p := holder.proc()
		stoppedAt := control.Now()
		if err := p.signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		w := <-waited
		if !w.ok() {
			t.Fatalf("%s waiting for %q while %s is stopped: %s %s %v", r.waiter, key, r.holder, w.code(), w.r.Msg, w.err)
		}
		if w.r.Token <= got.r.Token {
			t.Errorf("%s's token %d is not above the stopped holder's %d", r.waiter, w.r.Token, got.r.Token)
		}
		if wr := c.do(waiter, scripted+1, control.Request{Op: control.OpWrite, Key: key}); !wr.ok() || wr.fence != nil {
			t.Errorf("%s's write under token %d: %s %v", r.waiter, w.r.Token, wr.code(), wr.fence)
		}
		// The pause is the fault: it lasts two TTLs at least.
		if rest := time.Duration(stoppedAt + int64(2*c.spec.ttl) - control.Now()); rest > 0 {
			time.Sleep(rest)
		}
		// The write the paused process had decided on waits in its
		// input; it runs as soon as the process does.
		late := make(chan result, 1)
		go func() {
			late <- c.do(holder, scripted, control.Request{Op: control.OpWrite, Key: key, Stale: true})
		}()
		resumedAt := control.Now()
		if err := p.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		lw := <-late
		switch {
		case !lw.ok():
			t.Errorf("the resumed %s did not write: %s %s %v", r.holder, lw.code(), lw.r.Msg, lw.err)
		case lw.fence == nil:
			t.Errorf("the fence accepted the resumed %s's late write under token %d (after %s's %d)", r.holder, lw.r.Token, r.waiter, w.r.Token)
		default:
			t.Logf("the resumed %s's late write under token %d: refused: %v", r.holder, lw.r.Token, lw.fence)
		}
		g, err := c.hist.waitEnded(key, got.r.Token, 5*time.Second)
		if err != nil {
			t.Fatalf("after SIGCONT: %v", err)
		}
		if g.How != control.EndLost {
			t.Errorf("the resumed %s reports its lease on %q %s, want %s", r.holder, key, g.How, control.EndLost)
		}
		takeovers = append(takeovers, time.Duration(w.r.At-stoppedAt))
		notices = append(notices, time.Duration(g.Reported-resumedAt))
		if g.End >= w.r.At {
			t.Errorf("%s was granted %q at %d, before the stopped holder's deadline %d", r.waiter, key, w.r.At, g.End)
		}
		t.Logf("SIGSTOP of %s (token %d) for %v: %s held %q %v after the stop (token %d), %v after the holder's deadline; "+
			"the resumed holder reported the lease %s %v after SIGCONT",
			r.holder, got.r.Token, time.Duration(resumedAt-stoppedAt).Round(time.Millisecond), r.waiter, key,
			time.Duration(w.r.At-stoppedAt).Round(time.Millisecond), w.r.Token, time.Duration(w.r.At-g.End).Round(time.Millisecond),
			g.How, time.Duration(g.Reported-resumedAt).Round(time.Millisecond))
		c.do(waiter, scripted+1, control.Request{Op: control.OpRelease, Key: key, TimeoutMS: 5000})
		took, err := c.waitWhole(wholeMeshTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the mesh is whole again %v after SIGCONT", took.Round(time.Millisecond))
	}
	cl.stop()
	s := c.finish()
	t.Logf("figures: pause: %d ops checked; takeover after SIGSTOP %v; loss reported after SIGCONT %v", s.ops, takeovers, notices)
}
