package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/lockmesh/lockmesh/mesh"
)

// cluster is a lockmesh of voters in this process, over real TCP on
// loopback: mesh.DefaultLocalConfig (1 s TTL), ports picked by the kernel.
type cluster struct {
	nodes []*mesh.Mesh
	cfgs  []*mesh.Config
	// sink receives every node's metrics, labelled node=<name>.
	sink *metrics.InmemSink
}

// startCluster starts n voters named v1..vn and returns once every voter
// votes (Status().Voting == "live": quarantine and catch-up are over) and
// every node sees every other alive with a ballot address.
func startCluster(ctx context.Context, n int) (*cluster, error) {
	// One interval spans the whole life of a cluster, and every interval
	// is retained: counters are then read as running totals.
	c := &cluster{sink: metrics.NewInmemSink(10*time.Second, 24*time.Hour)}
	var voters []string
	for i := range n {
		voters = append(voters, fmt.Sprintf("v%d", i+1))
	}
	for i, name := range voters {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = voters
		cfg.MetricSink = c.sink
		cfg.Seed = int64(i + 1)
		if i > 0 {
			cfg.Seeds = []string{c.nodes[0].Addr()}
		}
		m, err := mesh.New(cfg)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("starting %s: %w", name, err)
		}
		c.nodes = append(c.nodes, m)
		c.cfgs = append(c.cfgs, cfg)
	}
	// memberlist may take until its next push/pull to spread a join; a
	// join with every node settles the membership at once.
	for _, m := range c.nodes[1:] {
		if _, err := m.Join(c.addrs()...); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) addrs() []string {
	var out []string
	for _, m := range c.nodes {
		out = append(out, m.Addr())
	}
	return out
}

// waitReady waits until every node votes and sees all the others.
func (c *cluster) waitReady(ctx context.Context) error {
	return waitFor(ctx, "every voter live and every member seen", func() (bool, string) {
		for _, m := range c.nodes {
			st := m.Status()
			alive := 0
			for _, mb := range st.Members {
				if mb.State == "alive" && mb.RPCAddr != "" {
					alive++
				}
			}
			if st.Voting != "live" || alive < len(c.nodes) {
				return false, fmt.Sprintf("%s: voting %q, %d of %d members alive", st.Name, st.Voting, alive, len(c.nodes))
			}
		}
		return true, ""
	})
}

func (c *cluster) close() {
	for _, m := range c.nodes {
		m.Shutdown()
	}
}

// counter is the running total of a mesh counter (for example
// "messages.sent") of one node.
func (c *cluster) counter(name, node string) float64 {
	key := "lockmesh." + name + ";node=" + node
	total := 0.0
	for _, iv := range c.sink.Data() {
		iv.RLock()
		if v, ok := iv.Counters[key]; ok {
			total += v.Sum
		}
		iv.RUnlock()
	}
	return total
}

// waitFor polls cond until it holds or ctx ends: it waits for a condition,
// with a deadline, never for a fixed time. cond also says what it is still
// waiting for, for the error.
func waitFor(ctx context.Context, what string, cond func() (bool, string)) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (%s)", what, ctx.Err(), why)
		case <-tick.C:
		}
	}
}

// meshLocker takes locks through one node.
type meshLocker struct{ m *mesh.Mesh }

func (l meshLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lease, err := l.m.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
