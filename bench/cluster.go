package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

// cluster is a lockmesh of voters in this process, over real TCP on
// loopback: mesh.DefaultLocalConfig (1 s TTL), ports picked by the kernel,
// no metric sink (the default: a sink costs CPU on every message).
type cluster struct {
	nodes  []*mesh.Mesh // the voters first
	cfgs   []*mesh.Config
	voters int // how many of nodes vote
}

// startCluster starts n voters named v1..vn and returns once every voter
// votes (Status().VotingState is Live: quarantine and catch-up are over) and
// every node sees every other alive with a ballot address.
func startCluster(ctx context.Context, n int) (*cluster, error) {
	return startClusterWith(ctx, n, nil)
}

// lanTiming gives a node mesh.DefaultConfig's lease timing and round
// timeout (TTL 10 s, round timeout 250 ms) on top of DefaultLocalConfig's
// loopback addresses: the production defaults, as the peers run with
// theirs. (DefaultLocalConfig's 50 ms round timeout is for tests: on an
// overloaded machine it makes rounds time out and operations fail with
// ErrNoQuorum.)
func lanTiming(cfg *mesh.Config) {
	cfg.Timing = lease.DefaultTiming()
	cfg.RoundTimeout = 250 * time.Millisecond
}

// startClusterWith is startCluster with tweak applied to every node's
// configuration.
func startClusterWith(ctx context.Context, n int, tweak func(*mesh.Config)) (*cluster, error) {
	return startMixedCluster(ctx, n, 0, tweak)
}

// startMixedCluster starts voters v1..vN and then non-voters n(N+1)..n(N+K)
// (nodes that acquire but do not vote), tweak applied to every node's
// configuration, and returns once every voter votes and every node sees
// every other alive with a ballot address.
func startMixedCluster(ctx context.Context, n, nonVoters int, tweak func(*mesh.Config)) (*cluster, error) {
	c := &cluster{}
	var voters, names []string
	for i := range n {
		voters = append(voters, fmt.Sprintf("v%d", i+1))
	}
	names = append(names, voters...)
	for i := range nonVoters {
		names = append(names, fmt.Sprintf("n%d", n+i+1))
	}
	for i, name := range names {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = voters
		cfg.Seed = int64(i + 1)
		if tweak != nil {
			tweak(cfg)
		}
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
	c.voters = n
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

// waitReady waits until every voter votes and every node sees all the
// others.
func (c *cluster) waitReady(ctx context.Context) error {
	return waitFor(ctx, "every voter live and every member seen", func() (bool, string) {
		for i, m := range c.nodes {
			st := m.Status()
			alive := 0
			for _, mb := range st.Members {
				if mb.State == "alive" && mb.RPCAddr != "" {
					alive++
				}
			}
			if (i < c.voters && st.VotingState != mesh.Live) || alive < len(c.nodes) {
				return false, fmt.Sprintf("%s: %v, %d of %d members alive", st.Name, st.VotingState, alive, len(c.nodes))
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

// waitFor polls cond until it holds or ctx ends: it waits for a condition,
// with a deadline, never for a fixed time. cond also says what it is still
// waiting for, for the error.
func waitFor(ctx context.Context, what string, cond func() (bool, string)) error {
	return waitEvery(ctx, 10*time.Millisecond, what, cond)
}

// waitEvery is waitFor polling every interval: Status of many nodes is not
// free, and polling must not slow down what it waits for.
func waitEvery(ctx context.Context, interval time.Duration, what string, cond func() (bool, string)) error {
	tick := time.NewTicker(interval)
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
	// Goroutines on one node take turns as across nodes.
	lease, err := l.m.Acquire(ctx, key, mesh.WaitBehindOwnLease())
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
