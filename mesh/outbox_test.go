package mesh

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/lockmesh/lockmesh/quorum"
)

// merge joins the leading requests of one configuration, keeping the order
// of their operations, and leaves a request of another configuration for a
// message of its own.
func TestMergeKeepsConfigurationsApart(t *testing.T) {
	req := func(cfg uint64, ids ...uint64) quorum.Request {
		r := quorum.Request{Config: cfg, From: "a", To: "b"}
		for _, id := range ids {
			r.Ops = append(r.Ops, quorum.Op{ID: id})
		}
		return r
	}
	ids := func(r quorum.Request) []uint64 {
		var out []uint64
		for _, op := range r.Ops {
			out = append(out, op.ID)
		}
		return out
	}
	queue := []quorum.Request{req(1, 1), req(1, 2, 3), req(2, 4), req(1, 5)}
	first, rest := merge(queue)
	if first.Config != 1 || !slices.Equal(ids(first), []uint64{1, 2, 3}) {
		t.Fatalf("first message: configuration %d, operations %v; want 1, [1 2 3]", first.Config, ids(first))
	}
	if len(rest) != 2 || rest[0].Config != 2 || rest[1].Config != 1 {
		t.Fatalf("left %d requests: %+v", len(rest), rest)
	}
	second, rest := merge(rest)
	if second.Config != 2 || !slices.Equal(ids(second), []uint64{4}) || len(rest) != 1 {
		t.Fatalf("second message: configuration %d, operations %v, %d left", second.Config, ids(second), len(rest))
	}
}

// Under load the operations of many callers share messages: 64 goroutines
// taking and releasing their own keys on one voter send far fewer ballot
// requests than one per operation per voter.
func TestConcurrentCallersShareMessages(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	c := newCluster(t, clusterOpts{voters: 3, tcp: true, tweak: func(cfg *Config) { cfg.MetricSink = sink }})
	c.waitVoting()
	m := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sent := func() float64 {
		var n float64
		for _, iv := range sink.Data() {
			iv.RLock()
			if s, ok := iv.Counters["lockmesh.messages.sent;node=node0"]; ok {
				n += s.Sum
			}
			iv.RUnlock()
		}
		return n
	}
	const callers, pairs = 64, 20
	before := sent()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("share-%d", g)
			for range pairs {
				l, err := m.Acquire(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	msgs := sent() - before
	// One message per operation per voter would be at least 4 per pair:
	// the acquire and the release each reach the 2 other voters.
	unbatched := float64(4 * callers * pairs)
	t.Logf("%d Acquire+Release pairs by %d callers: %.0f ballot requests sent (%.2f per pair; one per operation per voter would be ≥ %.0f)",
		callers*pairs, callers, msgs, msgs/float64(callers*pairs), unbatched)
	if msgs > unbatched/2 {
		t.Errorf("%.0f requests for %d pairs: operations of concurrent callers are not sharing messages", msgs, callers*pairs)
	}
}
