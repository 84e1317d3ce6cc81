package mesh

import (
	"context"
	"testing"
	"time"
)

// A voter dies for good: the autopilot adds the healthy non-voter and then
// removes the dead voter, and locks go on being granted by the new voters.
// A node that asked never to vote is left alone.
func TestAutopilotReplacesDeadVoter(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 2, dataDirs: true, tweak: func(cfg *Config) {
		cfg.Autopilot = &AutopilotConfig{DeadAfter: 300 * time.Millisecond, Interval: 50 * time.Millisecond}
		cfg.NoVote = cfg.Name == "node4"
		// The lease below must be renewed while a voter is dead and the
		// configuration changes: once node3 is added, three of the four
		// voters make a majority, so a renewal needs node0, node1 and
		// node3 all to answer, each on the new configuration. The local
		// 1s TTL leaves about 600ms to retry in, which a loaded run under
		// -race can spend in one stall; the test is about the changes
		// keeping the lease, not about its length.
		cfg.Timing.TTL = 3 * time.Second
	}})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[2].Shutdown()
	start := time.Now()
	got := waitConfig(t, c.nodes[1], "node0", "node1", "node3")
	t.Logf("replaced in %v (gossip's failure detection included); version %d", time.Since(start).Round(time.Millisecond), got.Version)
	waitFor(t, 10*time.Second, "node3 to vote", func() bool { return c.nodes[3].Status().VotingState == Live })
	if st := c.nodes[4].Status(); st.VotingState != NotVoter {
		t.Fatalf("node4 asked never to vote, but votes (%v)", st.VotingState)
	}
	// The lease taken before survived the changes.
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost during the changes: %v", l.Err())
	default:
	}
	if _, err := c.nodes[4].TryAcquire(ctx, "k"); err == nil {
		t.Fatal("a held key was granted again after the changes")
	}
	l.Release(ctx)
	l2, err := c.nodes[4].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	l2.Release(ctx)
}

// With nobody to promote, a dead voter is removed, but never below Min.
func TestAutopilotShrinksToMin(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, dataDirs: true, tweak: func(cfg *Config) {
		cfg.Autopilot = &AutopilotConfig{DeadAfter: 300 * time.Millisecond, Interval: 50 * time.Millisecond, Min: 2}
	}})
	c.waitVoting()
	c.nodes[2].Shutdown()
	waitConfig(t, c.nodes[0], "node0", "node1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.nodes[1].Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("two voters left grant: %v", err)
	}
	l.Release(ctx)
}

func TestAutopilotConfigValidation(t *testing.T) {
	for _, ap := range []AutopilotConfig{{Target: -1}, {Target: 3, Min: 4}, {DeadAfter: -time.Second}, {Target: 11}} {
		cfg := DefaultLocalConfig()
		cfg.Name = "n"
		cfg.Autopilot = &ap
		if err := cfg.Validate(); err == nil {
			t.Errorf("autopilot %+v accepted", ap)
		}
	}
}
