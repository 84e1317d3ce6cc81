package quorum

import (
	"testing"
	"time"
)

// TestScenarioGrantAndItsLossInOneReady: a grant and the loss of the same
// lease can leave in one Ready, when the driver steps the answer that
// completes the grant and then ticks past the lease's notice time before
// it takes the Ready (a stall between the two). A driver that applies a
// Ready's lease events before its results (the mesh does) meets the loss
// before the grant it ends.
func TestScenarioGrantAndItsLossInOneReady(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	o := scOpts(false)
	o.Deadline = p1.clock.Now() + time.Second
	op, err := p1.prop.Acquire("k", o)
	if err != nil {
		t.Fatal(err)
	}
	// Round trips by hand, so that the result of the grant stays in the
	// proposer's Ready.
	for i := 0; ; i++ {
		if _, _, ok := p1.prop.Holds("k"); ok {
			break
		}
		if i > 10 {
			t.Fatal("not granted after 10 round trips")
		}
		rd := p1.prop.Ready()
		if len(rd.Results) > 0 || len(rd.Leases) > 0 {
			t.Fatalf("a result before the grant: %+v %+v", rd.Results, rd.Leases)
		}
		for _, r := range rd.Requests {
			c.deliver(p1, r)
		}
		p1.prop.reuseRequests(rd.Requests)
	}
	_, deadline, _ := p1.prop.Holds("k")
	p1.clock.advance(deadline - o.Notice - p1.clock.Now())
	p1.prop.Tick()
	rd := p1.prop.Ready()
	granted, lost := false, false
	for _, r := range rd.Results {
		granted = granted || (r.ID == op && r.Outcome == Granted)
	}
	for _, ev := range rd.Leases {
		lost = lost || (ev.Key == "k" && ev.Lost)
	}
	if !granted || !lost {
		t.Fatalf("one Ready: granted %v, lost %v (results %+v, events %+v)", granted, lost, rd.Results, rd.Leases)
	}
}
