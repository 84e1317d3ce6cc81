package quorum

import (
	"testing"
	"time"
)

// A renewal's op is reused by a later renewal once it finished, and the
// round timer its earlier life left armed does not time out the new round:
// the op's timerGen only grows. Here the renewal interval is shorter than
// a round timeout, so that the first renewal's round timer is still armed
// when the second renewal starts on the same op.
func TestRenewalOpReusedWithoutItsOldTimers(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	bc := &benchCluster{c: c, p: c.node("p1").prop, accs: make(map[NodeID]*Acceptor)}
	for _, id := range voters3 {
		bc.accs[id] = c.node(id).acc
	}
	p := bc.p
	opts := scOpts(false)
	opts.RenewEvery = 40 * time.Millisecond // below scRoundTimeout (50ms)
	if _, err := p.Acquire("k", opts); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := bc.drive(nil, nil); len(res) != 1 || res[0].Outcome != Granted {
		t.Fatalf("acquire: %+v", res)
	}
	inFlight := func() *op {
		t.Helper()
		x := p.keys["k"].active
		if n := p.Pending(); n != 1 || x == nil || x.kind != kindRenew {
			t.Fatalf("%d operations in flight, the key's %+v; want the renewal alone", n, x)
		}
		return x
	}

	bc.advance(opts.RenewEvery)
	p.Tick()
	first := inFlight()
	if _, ev, _ := bc.drive(nil, nil); len(ev) != 1 || ev[0].Lost {
		t.Fatalf("first renewal: %+v", ev)
	}

	// The second renewal starts before the first one's round timer is due,
	// and its answers are held back past that time.
	bc.advance(opts.RenewEvery)
	p.Tick()
	if second := inFlight(); second != first {
		// renewOps is a sync.Pool: a collection empties it, and the race
		// detector drops what is put in at random.
		t.Skip("the second renewal runs on a new op: the pool had none to give")
	}
	rd := p.Ready()
	bc.advance(scRoundTimeout - opts.RenewEvery + time.Millisecond)
	p.Tick()
	if n := p.Stats().Timeouts; n != 0 {
		t.Fatalf("%d round timeouts: the first renewal's timer timed out the second's round", n)
	}
	for i := range rd.Requests {
		p.Step(bc.accs[rd.Requests[i].To].HandleRequest(&rd.Requests[i]))
	}
	if _, ev, _ := bc.drive(nil, nil); len(ev) != 1 || ev[0].Lost || p.Stats().Renewed != 2 {
		t.Fatalf("second renewal: %+v, %d renewed", ev, p.Stats().Renewed)
	}
}

// A proposer reuses only its own renewal ops. Another proposer of the same
// process (another node) runs on another goroutine, and would write an op
// while this proposer's timer heap still reads it.
func TestRenewalOpsStayWithTheirProposer(t *testing.T) {
	opts := scOpts(false)
	var clusters []*benchCluster
	for range 2 {
		c := newTestCluster(t, voters3, "p1")
		bc := &benchCluster{c: c, p: c.node("p1").prop, accs: make(map[NodeID]*Acceptor)}
		for _, id := range voters3 {
			bc.accs[id] = c.node(id).acc
		}
		if _, err := bc.p.Acquire("k", opts); err != nil {
			t.Fatal(err)
		}
		if res, _, _ := bc.drive(nil, nil); len(res) != 1 || res[0].Outcome != Granted {
			t.Fatalf("acquire: %+v", res)
		}
		clusters = append(clusters, bc)
	}
	a, b := clusters[0], clusters[1]
	// a renews, and its op goes back for reuse at its next Tick.
	a.advance(opts.RenewEvery)
	a.p.Tick()
	var used *op
	for _, x := range a.p.ops {
		used = x
	}
	if _, ev, _ := a.drive(nil, nil); len(ev) != 1 || ev[0].Lost {
		t.Fatalf("a's renewal: %+v", ev)
	}
	a.advance(time.Millisecond)
	a.p.Tick()
	// b renews now: on an op of its own.
	b.advance(opts.RenewEvery)
	b.p.Tick()
	for _, x := range b.p.ops {
		if x == used {
			t.Fatal("b's renewal runs on the op a finished")
		}
	}
	if _, ev, _ := b.drive(nil, nil); len(ev) != 1 || ev[0].Lost {
		t.Fatalf("b's renewal: %+v", ev)
	}
}
