package mesh

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/transport"
)

// A rolling upgrade to protocol version 3 in one process: node2 speaks
// only up to version 2, as a node of the previous release does. Locks and
// tokens work across the mixed mesh; values, watches, listings and
// semaphores are refused with ErrUpgradeRequired naming node2, not
// half-done; once node2 restarts on version 3, they work, its own reads
// included.
func TestMixedVersionMesh(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, tweak: func(cfg *Config) {
		if cfg.Name == "node2" {
			cfg.maxVersion = wire.Version2
		}
	}})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last uint64
	for _, m := range c.nodes {
		l, err := m.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("%s in the mixed mesh: %v", m.Name(), err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		l.Release(ctx)
	}
	old := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrUpgradeRequired) || !strings.Contains(err.Error(), "node2 (version 1-2)") {
			t.Errorf("%s in the mixed mesh: %v, want ErrUpgradeRequired naming node2", what, err)
		}
	}
	_, err := c.nodes[0].Acquire(ctx, "v", WithValue([]byte("x")))
	old("WithValue", err)
	_, err = c.nodes[0].Watch(ctx, "v")
	old("Watch", err)
	_, err = c.nodes[1].Locks(ctx, "")
	old("Locks", err)
	_, err = c.nodes[1].AcquireSemaphore(ctx, "s", 2)
	old("AcquireSemaphore", err)
	l, err := c.nodes[0].Acquire(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	old("SetValue", l.SetValue(ctx, []byte("x")))
	l.Release(ctx)

	// The upgrade: node2 restarts on this release.
	prev := c.nodes[2]
	cfg := prev.cfg
	cfg.maxVersion = 0
	_, port, _ := net.SplitHostPort(prev.Addr())
	cfg.BindPort, _ = strconv.Atoi(port)
	cfg.AdvertisePort = cfg.BindPort
	cfg.Seeds = []string{c.nodes[0].Addr()}
	cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
		return c.net.Listen(name, h)
	}
	prev.Shutdown()
	up, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[2] = up
	waitFor(t, 30*time.Second, "every node to see node2 on version 3", func() bool {
		for _, m := range c.nodes {
			if m.valuesAllowed() != nil {
				return false
			}
		}
		return true
	})
	l, err = c.nodes[0].Acquire(ctx, "v", WithValue([]byte("after")))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node2 to vote again", func() bool { return up.Status().VotingState == Live })
	if h, err := up.Holder(ctx, "v"); err != nil || string(h.Value) != "after" {
		t.Fatalf("the upgraded node reads %+v, %v", h, err)
	}
	l.Release(ctx)
}
