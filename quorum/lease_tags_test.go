package quorum

import (
	"slices"
	"testing"
)

// TestScenarioLeaseTagsFollowTheLeases: the tags the driver gives its
// leases (TagLease) are the driver's table of them (the mesh keeps no
// other): LeaseTag, LeaseTags and Tagged follow retagging, untagging, a
// tag for another epoch, a release, losses and a new grant of a key, and
// every event of a lease carries its tag at the time.
func TestScenarioLeaseTagsFollowTheLeases(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p := c.node("p1").prop
	g1, g2 := c.mustGrant("p1", "k1"), c.mustGrant("p1", "k2")
	c.mustGrant("p1", "k3")
	check := func(when string, tagged int, tags []any, byKey map[string]any) {
		t.Helper()
		if got := p.Tagged(); got != tagged {
			t.Errorf("%s: Tagged %d, want %d", when, got, tagged)
		}
		got := p.LeaseTags()
		slices.SortFunc(got, func(a, b any) int { return compareTags(a, b) })
		if !slices.Equal(got, tags) {
			t.Errorf("%s: LeaseTags %v, want %v", when, got, tags)
		}
		for k, want := range byKey {
			if got := p.LeaseTag(k); got != want {
				t.Errorf("%s: LeaseTag(%s) %v, want %v", when, k, got, want)
			}
		}
	}
	check("untagged", 0, []any{}, map[string]any{"k1": nil, "k2": nil, "k3": nil, "nokey": nil})
	if !p.TagLease("k1", g1.Epoch, "a") || !p.TagLease("k2", g2.Epoch, "b") {
		t.Fatal("TagLease refused a lease held")
	}
	if p.TagLease("k1", g1.Epoch+1, "x") || p.TagLease("nokey", 1, "x") {
		t.Fatal("TagLease took a tag for a lease not held")
	}
	check("two tagged", 2, []any{"a", "b"}, map[string]any{"k1": "a", "k2": "b", "k3": nil})
	p.TagLease("k1", g1.Epoch, "a2") // retagged: still one
	p.TagLease("k2", g2.Epoch, nil)  // untagged
	check("retag, untag", 1, []any{"a2"}, map[string]any{"k1": "a2", "k2": nil})
	p.TagLease("k2", g2.Epoch, "b")
	n := c.node("p1")
	mark := len(n.events)
	c.advance(scRenewEvery)
	for _, ev := range n.events[mark:] {
		if want := map[string]any{"k1": "a2", "k2": "b", "k3": nil}[ev.Key]; ev.Tag != want {
			t.Errorf("renewal of %s carries tag %v, want %v", ev.Key, ev.Tag, want)
		}
	}
	c.mustRelease("p1", "k1", g1.Epoch)
	check("k1 released", 1, []any{"b"}, map[string]any{"k1": nil, "k2": "b"})
	for _, v := range voters3 {
		c.cut[v] = true
	}
	mark = len(n.events)
	c.advance(scHolderTTL)
	lost := 0
	for _, ev := range n.events[mark:] {
		if ev.Lost {
			lost++
			if want := map[string]any{"k2": "b", "k3": nil}[ev.Key]; ev.Tag != want {
				t.Errorf("loss of %s carries tag %v, want %v", ev.Key, ev.Tag, want)
			}
		}
	}
	if lost != 2 {
		t.Fatalf("%d losses with every voter cut off, want 2 (k2, k3)", lost)
	}
	check("k2, k3 lost", 0, []any{}, map[string]any{"k2": nil, "k3": nil})
	for _, v := range voters3 {
		c.cut[v] = false
	}
	c.advance(scTTL) // the voters' exclusion of the lost grants runs out
	g2b := c.mustGrant("p1", "k2")
	check("k2 granted again", 0, []any{}, map[string]any{"k2": nil})
	p.TagLease("k2", g2b.Epoch, "b2")
	check("k2's new lease tagged", 1, []any{"b2"}, map[string]any{"k2": "b2"})
}

func compareTags(a, b any) int {
	as, bs := a.(string), b.(string)
	switch {
	case as < bs:
		return -1
	case as > bs:
		return 1
	}
	return 0
}
