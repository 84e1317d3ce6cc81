package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// A rolling restart that lowers MaxTTL from 1.5 s to 400 ms, in its second
// pass (every node's default TTL is 400 ms already; node2 runs the new
// MaxTTL): node3, which does not vote, takes a 1.5 s lease that only node0
// and node1 accept (node2 never sees it). node0 and node1 then restart
// together at 400 ms, without data directories, and node3's renewals do not
// reach them. No voter can tell them of the lease: node0 and node1 forgot
// it, node2 never saw it. node3's gossip metadata does (wire.Meta.Holding),
// and a restarted voter must wait it out: its quarantine runs past its own
// 400 ms to the 1.5 s lease's end. A lease no longer than every voter's
// MaxTTL is not published.
func TestRestartedVotersWaitOutALeaseAHolderGossips(t *testing.T) {
	const short, long = 400 * time.Millisecond, 1500 * time.Millisecond
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1, tweak: func(cfg *Config) {
		cfg.Timing.TTL, cfg.MaxTTL = short, long
		if cfg.Name == "node2" {
			cfg.MaxTTL = short
		}
	}})
	c.waitVoting()
	holder := c.nodes[3]
	// node2's horizon from its start (1.5 s, heard from node0 and node1)
	// lapses; until then it would report the long lease itself.
	waitFor(t, 15*time.Second, "node2's horizon to come down to its MaxTTL", func() bool {
		var h time.Duration
		c.nodes[2].drive(func(n *quorum.Node) { h = n.Acceptor().Horizon() })
		return h == short
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := holder.Acquire(ctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	if got := holder.ownMeta().Holding; got != 0 {
		t.Errorf("holding a lease of the default TTL, node3's metadata says %v", got)
	}
	l.Release(ctx)

	c.net.Cut("node3", "node2") // node2 never sees the long lease
	l, err = holder.Acquire(ctx, "long", WithTTL(long))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "gossip to show node3 holding a "+long.String()+" lease", func() bool {
		meta, ok := c.nodes[2].book.peerMeta("node3")
		return ok && meta.Holding == long
	})
	c.net.Cut("node3", "node0") // nor do its renewals reach the restarted voters
	c.net.Cut("node3", "node1")
	own := c.nodes[2].quarantine()
	lowered := func(cfg *Config) { cfg.MaxTTL = short }
	restarted := []*Mesh{c.restartNodeWith(0, false, lowered), c.restartNodeWith(1, false, lowered)}
	for _, m := range restarted {
		waitFor(t, 15*time.Second, m.Name()+" to wait out node3's "+long.String()+" lease", func() bool {
			return m.Status().Waiting.Quarantine > own+short
		})
	}
	// Past its own quarantine it still waits, and says so.
	waitFor(t, 15*time.Second, "node0 to catch up while it waits out the lease", func() bool {
		st := restarted[0].Status()
		return st.VotingState == CatchingUp && st.Waiting.Quarantine > 0
	})
	// Once the lease ends, the word is taken back (twice its length
	// later, at a review).
	rctx, rcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	l.Release(rctx) // the cuts may leave it no quorum; it ends here all the same
	rcancel()
	waitFor(t, 20*time.Second, "node3's metadata to stop saying it holds a long lease", func() bool {
		return holder.ownMeta().Holding == 0
	})
}

// ownMeta is what this node's gossip metadata says.
func (m *Mesh) ownMeta() nodeMeta {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.meta
}
