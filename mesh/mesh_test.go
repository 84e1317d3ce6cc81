package mesh

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/transport"
)

// cluster is a mesh of nodes in this process: real memberlist gossip on
// loopback, and the ballot traffic on an in-memory network with faults (or
// real TCP).
type cluster struct {
	t     testing.TB
	net   *transport.Network
	nodes []*Mesh
	names []string
	// dataRoot, with clusterOpts.dataDirs, holds a data directory per
	// node name, kept across its restarts.
	dataRoot string
}

type clusterOpts struct {
	voters, proposers int
	tcp               bool
	// dataDirs gives every node a data directory (Config.DataDir): voter
	// changes need them.
	dataDirs bool
	// missing voters (the last ones) are named in Config.Voters but never
	// started; with proposers, the nodes' indices then shift.
	missing int
	tweak   func(*Config)
}

// dataDir is the data directory of the named node ("" without them).
func (c *cluster) dataDir(name string) string {
	if c.dataRoot == "" {
		return ""
	}
	return filepath.Join(c.dataRoot, name)
}

func newCluster(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	c := newClusterNoWait(t, o)
	start := time.Now()
	c.waitMembers()
	if d := time.Since(start); d > 2*time.Second {
		t.Logf("gossip took %v to show every node alive", d)
	}
	return c
}

func newClusterNoWait(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, net: transport.NewNetwork(1)}
	if o.dataDirs {
		c.dataRoot = t.TempDir()
	}
	var voters []string
	for i := 0; i < o.voters+o.proposers; i++ {
		name := fmt.Sprintf("node%d", i)
		c.names = append(c.names, name)
		if i < o.voters {
			voters = append(voters, name)
		}
	}
	for i, name := range c.names {
		if i >= o.voters-o.missing && i < o.voters {
			continue
		}
		cfg := DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = voters
		cfg.Seed = int64(i + 1)
		cfg.DataDir = c.dataDir(name)
		if testing.Verbose() {
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Name: name})
		}
		if !o.tcp {
			cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
				return c.net.Listen(name, h)
			}
		}
		if len(c.nodes) > 0 {
			cfg.Seeds = []string{c.nodes[0].Addr()}
		}
		if o.tweak != nil {
			o.tweak(cfg)
		}
		m, err := New(cfg)
		if err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		c.nodes = append(c.nodes, m)
	}
	t.Cleanup(c.shutdown)
	// memberlist sometimes takes until its next push/pull (seconds) to
	// spread a join; a join with every node settles membership at once.
	var addrs []string
	for _, m := range c.nodes {
		addrs = append(addrs, m.Addr())
	}
	for _, m := range c.nodes[1:] {
		m.Join(addrs...)
	}
	return c
}

func (c *cluster) shutdown() {
	for _, m := range c.nodes {
		m.Shutdown()
	}
}

// waitMembers waits until every node sees every other alive.
func (c *cluster) waitMembers() {
	c.t.Helper()
	waitFor(c.t, 30*time.Second, "full membership", func() bool {
		for _, m := range c.nodes {
			if m.isClosed() {
				continue
			}
			alive := 0
			for _, mem := range m.Status().Members {
				if mem.State == "alive" {
					alive++
				}
			}
			if alive < len(c.live()) {
				return false
			}
		}
		return true
	})
}

// waitVoting waits until every voter votes (quarantine and catch-up over).
func (c *cluster) waitVoting() {
	c.t.Helper()
	waitFor(c.t, 30*time.Second, "every voter to vote", func() bool {
		for _, m := range c.live() {
			if st := m.Status(); st.VotingState != NotVoter && st.VotingState != Live {
				return false
			}
		}
		return true
	})
}

func (c *cluster) live() []*Mesh {
	var out []*Mesh
	for _, m := range c.nodes {
		if !m.isClosed() {
			out = append(out, m)
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes. It waits on a
// condition, with a deadline, never for a fixed time.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(limit, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// poll reports whether cond became true within limit.
func poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a wait for an event
	}
	return true
}

func TestAcquireRelease(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "invoices/2026-11")
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.Token() == 0 {
		t.Fatal("token 0")
	}
	_, err = c.nodes[1].TryAcquire(ctx, "invoices/2026-11")
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Holder != "node0" || locked.Token != l.Token() {
		t.Fatalf("try-acquire of a held key: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	l2, err := c.nodes[1].TryAcquire(ctx, "invoices/2026-11")
	if err != nil {
		t.Fatalf("try-acquire after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token went from %d to %d", l.Token(), l2.Token())
	}
}

// A lease makes its channels and context only when asked for them (a node
// renewing 100,000 leases must not make a channel per renewal). Asked for
// first after the lease ended, they say it ended all the same: Done is
// closed, the context is cancelled with Err as its cause, and Renewed is a
// channel that will not close (nothing moves the deadline any more).
func TestLeaseChannelsAskedForAfterTheEnd(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	early, err := c.nodes[0].Acquire(ctx, "early")
	if err != nil {
		t.Fatal(err)
	}
	done, lctx, renewed := early.Done(), early.Context(), early.Renewed()
	late, err := c.nodes[0].Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lease{early, late} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %s: %v", l.Key(), err)
		}
	}
	for name, ch := range map[string]<-chan struct{}{
		"early Done": done, "early Context().Done": lctx.Done(), "early Renewed": renewed,
		"late Done": late.Done(), "late Context().Done": late.Context().Done(),
	} {
		select {
		case <-ch:
		default:
			t.Errorf("%s: open after Release", name)
		}
	}
	for _, l := range []*Lease{early, late} {
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
			t.Errorf("%s: context's cause %v, want ErrReleased", l.Key(), cause)
		}
	}
	select {
	case <-late.Renewed():
		t.Error("late Renewed: closed after the end, though no renewal came")
	default:
	}
}
