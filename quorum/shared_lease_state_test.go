package quorum

import (
	"slices"
	"testing"
	"time"
)

// deliverHeld delivers the held requests to acceptor to that carry an
// operation of kind on key, and keeps holding the rest.
func (c *testCluster) deliverHeld(to NodeID, key string, kind OpKind) {
	held := c.held
	c.held = nil
	for _, h := range held {
		if h.req.To == to && slices.ContainsFunc(h.req.Ops, func(o Op) bool { return o.Key == key && o.Kind == kind }) {
			was := c.hold[to]
			c.hold[to] = false
			c.deliver(h.from, h.req)
			c.hold[to] = was
			continue
		}
		c.held = append(c.held, h)
	}
	c.settle()
}

// TestScenarioSharedFastPathsTakeLateVotersApart: two keys whose fast paths
// began with the same voters share one set of them (sharedIncs). A late
// acceptance adds its voter to its own key's fast path only: x's late voter
// d and y's late voter e each join one key, and neither shows up in the
// other's set, nor gets the other key's next fast-path accept. (Appending a
// late voter into a shared array would put one key's voter into the
// other's set, or overwrite it.)
func TestScenarioSharedFastPathsTakeLateVotersApart(t *testing.T) {
	voters := []NodeID{"a", "b", "c", "d", "e"}
	c := newTestCluster(t, voters, "p1")
	p1 := c.node("p1")
	c.mustGrant("p1", "warm") // p1 learns every voter's incarnation
	c.hold["d"], c.hold["e"] = true, true
	gx := c.mustGrant("p1", "x")
	gy := c.mustGrant("p1", "y")
	fx, fy := p1.prop.keys["x"].fastVoters, p1.prop.keys["y"].fastVoters
	if fx == nil || fy == nil {
		t.Fatal("no fast path after the grants")
	}
	if len(*fx) != 3 || len(*fy) != 3 || &(*fx)[0] != &(*fy)[0] {
		t.Fatalf("fast paths of the same three voters: x %v, y %v (not one shared set)", *fx, *fy)
	}
	// The accepts the held voters get late: d's of x, e's of y.
	c.deliverHeld("d", "x", OpAccept)
	c.deliverHeld("e", "y", OpAccept)
	fx, fy = p1.prop.keys["x"].fastVoters, p1.prop.keys["y"].fastVoters
	for _, w := range []struct {
		key      string
		incs     voterIncs
		has, not NodeID
	}{{"x", *fx, "d", "e"}, {"y", *fy, "e", "d"}} {
		for _, v := range []NodeID{"a", "b", "c", w.has} {
			if w.incs.get(v) == 0 {
				t.Errorf("%s's fast path lacks %s: %v", w.key, v, w.incs)
			}
		}
		if w.incs.get(w.not) != 0 || len(w.incs) != 4 {
			t.Errorf("%s's fast path %v holds %s, the other key's late voter", w.key, w.incs, w.not)
		}
	}
	// Each key's next fast-path write goes to its own voters only.
	c.hold["d"], c.hold["e"] = false, false
	c.held = nil
	for _, w := range []struct {
		key   string
		epoch uint64
		to    []NodeID
	}{{"x", gx.Epoch, []NodeID{"a", "b", "c", "d"}}, {"y", gy.Epoch, []NodeID{"a", "b", "c", "e"}}} {
		mark := len(c.waves)
		c.mustRelease("p1", w.key, w.epoch)
		waves := c.wavesSince(mark)
		if len(waves) == 0 {
			t.Fatalf("release of %s sent nothing", w.key)
		}
		var to []NodeID
		for _, r := range waves[0] {
			if slices.ContainsFunc(r.Ops, func(o Op) bool { return o.Key == w.key && o.Kind == OpAccept }) {
				to = append(to, r.To)
			}
		}
		slices.Sort(to)
		if !slices.Equal(to, w.to) {
			t.Errorf("fast release of %s: accepts to %v, want %v", w.key, to, w.to)
		}
	}
}

// TestScenarioLeasesOfOtherOptionsKeepTheirOwn: leases taken alike share
// one copy of their options (Proposer.leaseOptions); leases taken with
// other options, in between, keep theirs. Each lease's grant, renewals and
// loss notice follow its own holder TTL, renewal interval and notice.
func TestScenarioLeasesOfOtherOptionsKeepTheirOwn(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	short := AcquireOptions{TTL: 600 * time.Millisecond, HolderTTL: 540 * time.Millisecond,
		RenewEvery: 150 * time.Millisecond, Notice: 60 * time.Millisecond}
	withData := scOpts(false)
	withData.Data = "three"
	opts := map[string]AcquireOptions{"k1": scOpts(false), "k2": short, "k3": withData, "k4": scOpts(false), "k5": short}
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	for _, k := range keys {
		o := opts[k]
		o.Deadline = p1.clock.Now() + time.Second
		op, err := p1.prop.Acquire(k, o)
		if err != nil {
			t.Fatal(err)
		}
		c.settle()
		res := c.waitResult("p1", op, 4*scRoundTimeout)
		if res.Outcome != Granted || res.Deadline-res.LeaseStart != o.HolderTTL {
			t.Fatalf("%s: %v, deadline %v after its start, want granted for %v", k, res.Outcome, res.Deadline-res.LeaseStart, o.HolderTTL)
		}
	}
	if a, b := p1.prop.keys["k1"].lease.opts, p1.prop.keys["k4"].lease.opts; *a != *b || a.Deadline != 0 {
		t.Errorf("k1 and k4, taken alike, hold options %+v and %+v", *a, *b)
	}
	c.advance(3 * scRenewEvery)
	renewals := map[string]int{}
	for _, ev := range p1.events {
		if ev.Lost {
			t.Fatalf("%s lost while the voters answer: %+v", ev.Key, ev)
		}
		renewals[ev.Key]++
		if d := ev.Deadline - ev.Started; d != opts[ev.Key].HolderTTL {
			t.Errorf("%s renewed for %v, want its own %v", ev.Key, d, opts[ev.Key].HolderTTL)
		}
	}
	for _, k := range keys {
		// In 900ms: every 150ms (short) or 300ms, give or take a batch.
		if min := int(3*scRenewEvery/opts[k].RenewEvery) - 1; renewals[k] < min {
			t.Errorf("%s renewed %d times in %v, want at least %d", k, renewals[k], 3*scRenewEvery, min)
		}
	}
	for id, r := range c.registers("k3") {
		if r.Value.Data != "three" {
			t.Errorf("%s holds k3 with data %q after renewals, want %q", id, r.Value.Data, "three")
		}
	}
	for _, v := range voters3 {
		c.cut[v] = true
	}
	mark := len(p1.events)
	c.advance(scHolderTTL)
	lost := map[string]bool{}
	for i, ev := range p1.events[mark:] {
		if !ev.Lost {
			continue
		}
		lost[ev.Key] = true
		at := p1.eventAt[mark+i]
		if want := ev.Deadline - opts[ev.Key].Notice; at != want {
			t.Errorf("%s reported lost at %v, want its own notice time %v (deadline %v)", ev.Key, at, want, ev.Deadline)
		}
	}
	for _, k := range keys {
		if !lost[k] {
			t.Errorf("%s not reported lost within %v of the cut", k, scHolderTTL)
		}
	}
}
