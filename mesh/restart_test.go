package mesh

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/transport"
)

// A voter restarts without its state (same name and addresses, a new
// incarnation): it votes on nothing during its quarantine, catches up from
// the other voters, and votes again; tokens keep increasing throughout, and
// a lease held across the restart is never disturbed.
func TestVoterRestartCatchesUp(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := c.nodes[3].Acquire(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	take := func(m *Mesh) {
		t.Helper()
		l, err := m.Acquire(ctx, "counter")
		if err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		l.Release(ctx)
	}
	take(c.nodes[0])
	old := c.nodes[2]
	cfg := old.cfg
	_, port, _ := net.SplitHostPort(old.Addr())
	cfg.BindPort, _ = strconv.Atoi(port)
	cfg.AdvertisePort = cfg.BindPort
	cfg.Seeds = []string{c.nodes[0].Addr()}
	cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
		return c.net.Listen(name, h)
	}
	old.Shutdown()
	take(c.nodes[1]) // two voters of three still grant
	restarted, err := New(&cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	c.nodes[2] = restarted
	if v := restarted.Status().VotingState; v != Quarantined {
		t.Fatalf("a restarted voter is %v, want quarantined", v)
	}
	take(c.nodes[0]) // still granting while it is quarantined
	waitFor(t, 15*time.Second, "the restarted voter to vote again", func() bool {
		return restarted.Status().VotingState == Live
	})
	// Now only the restarted voter and one other can grant.
	c.net.Partition([]string{"node0", "node3"}, []string{"node1", "node2"})
	take(c.nodes[1])
	c.net.Heal()
	take(c.nodes[2])
	if held.Err() != nil {
		t.Fatalf("the lease held across the restart ended: %v", held.Err())
	}
	held.Release(ctx)
}
