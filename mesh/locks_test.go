package mesh

import (
	"context"
	"testing"
	"time"
)

// Locks lists exactly the locks held under a prefix, mesh-wide: holder,
// token, value and time left; released ones are gone.
func TestLocksListsHeldLocks(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := map[string]*Lease{}
	for i, key := range []string{"backups/a", "backups/b", "backups/c", "other/x"} {
		l, err := c.nodes[i].Acquire(ctx, key, WithValue([]byte(key+"!")))
		if err != nil {
			t.Fatal(err)
		}
		want[key] = l
	}
	want["backups/b"].Release(ctx)
	got, err := c.nodes[3].Locks(ctx, "backups/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "backups/a" || got[1].Key != "backups/c" {
		t.Fatalf("Locks(backups/) = %+v, want backups/a and backups/c", got)
	}
	for _, h := range got {
		l := want[h.Key]
		if !h.Held || h.Node != c.nodes[0].Name() && h.Key == "backups/a" || h.Token != l.Token() || string(h.Value) != h.Key+"!" ||
			h.TimeLeft <= 0 || h.TimeLeft > l.TTL() {
			t.Errorf("%+v: want held with token %d, value %q, time left in (0, %v]", h, l.Token(), h.Key+"!", l.TTL())
		}
	}
	all, err := c.nodes[1].Locks(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("Locks(\"\") = %+v, %v; want 3", all, err)
	}
}
