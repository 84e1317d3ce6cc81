package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/lease"
)

// Many goroutines on every node take a few keys in turn and, while holding
// one, do a read-modify-write of a counter behind a fence. No update may be
// lost, no write under a live lease may be refused, and the tokens the
// resource sees for a key must strictly increase.
func TestContendedCounter(t *testing.T) {
	for _, voters := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d voters", voters), func(t *testing.T) {
			c := newCluster(t, clusterOpts{voters: voters, proposers: 1})
			keys := []string{"a", "b", "c"}
			fence := lease.NewFence()
			var mu sync.Mutex
			counters := make(map[string]int)
			lastToken := make(map[string]uint64)
			const perWorker = 8
			workers := 3
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, len(c.nodes)*workers)
			for _, m := range c.nodes {
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < perWorker; i++ {
							key := keys[(w+i)%len(keys)]
							l, err := m.Acquire(ctx, key, WaitBehindOwnLease()) // workers of one node take turns too
							if err != nil {
								errs <- fmt.Errorf("%s acquire %s: %w", m.Name(), key, err)
								return
							}
							err = fence.Apply(key, l.Token(), func() error {
								mu.Lock()
								defer mu.Unlock()
								if l.Token() <= lastToken[key] {
									return fmt.Errorf("token %d after %d on %q", l.Token(), lastToken[key], key)
								}
								lastToken[key] = l.Token()
								v := counters[key]
								counters[key] = v + 1
								return nil
							})
							if err != nil {
								errs <- fmt.Errorf("%s write under a live lease: %w", m.Name(), err)
							}
							if err := l.Release(ctx); err != nil {
								errs <- fmt.Errorf("%s release: %w", m.Name(), err)
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			total := 0
			for _, k := range keys {
				total += counters[k]
			}
			if want := len(c.nodes) * workers * perWorker; total != want {
				t.Fatalf("counted %d increments, want %d: an update was lost", total, want)
			}
		})
	}
}

// A node crashes while holding a key: a waiter elsewhere gets the key once
// the lease has expired on the voters, with a higher token.
func TestCrashedHolderIsTakenOver(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, waiter := c.nodes[3], c.nodes[1]
	l, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, "job")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l2
	}()
	waitFor(t, 5*time.Second, "the waiter to wait", func() bool {
		return waiter.Status().Proposer.Rounds > 0
	})
	crashed := time.Now()
	holder.Shutdown()
	var l2 *Lease
	select {
	case l2 = <-got:
	case <-ctx.Done():
		t.Fatal("no takeover")
	}
	if l2 == nil {
		t.FailNow()
	}
	took := time.Since(crashed)
	ttl := holder.cfg.Timing.TTL
	t.Logf("takeover %v after the crash (TTL %v)", took.Round(time.Millisecond), ttl)
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	// Liveness, not speed: the key must come back within the TTL (stretched
	// for clock error) and a generous allowance for round trips.
	if limit := ttl + ttl/10 + time.Second; took > limit {
		t.Fatalf("takeover took %v, over %v", took, limit)
	}
	if errors.Is(l.Err(), ErrLeaseLost) || l.Err() == nil {
		// The crashed node's lease ends with the node.
		t.Logf("old lease error: %v", l.Err())
	}
}

// A release hands the key to the next waiter within a few round trips.
func TestReleaseHandsOver(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var took []time.Duration
	for i := 0; i < 5; i++ {
		from, to := c.nodes[i%4], c.nodes[(i+1)%4]
		l, err := from.Acquire(ctx, "baton")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l2, err := to.Acquire(ctx, "baton")
			if err != nil {
				t.Errorf("waiter: %v", err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			l2.Release(ctx)
		}()
		waitFor(t, 5*time.Second, "the waiter to wait", func() bool {
			to.nodeMu.Lock()
			defer to.nodeMu.Unlock()
			return len(to.waiters) > 0
		})
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if at.IsZero() {
			t.FailNow()
		}
		took = append(took, at.Sub(released))
		waitFor(t, 5*time.Second, "the waiter's release", func() bool {
			h, err := to.Holder(ctx, "baton")
			return err == nil && !h.Held
		})
	}
	t.Logf("hand-over after release: %v", took)
	for _, d := range took {
		if d > time.Second {
			t.Fatalf("a hand-over took %v: the waiter was not woken by the release", d)
		}
	}
}

// With the ballot network cut between a minority and the majority, the
// minority grants nothing, though gossip (not cut) shows every node alive.
func TestMinorityGrantsNothing(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A voter still catching up when the network splits cannot finish on
	// the majority side alone (it needs a majority of the configuration
	// besides itself): start from every voter voting.
	c.waitVoting()
	c.net.Partition([]string{"node0", "node1"}, []string{"node2", "node3", "node4"})
	for _, m := range c.nodes[:2] {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := m.Acquire(tctx, "split")
		tcancel()
		if err == nil {
			t.Fatalf("%s, in the minority, was granted the key", m.Name())
		}
		t.Logf("%s in the minority: %v", m.Name(), err)
		_, err = m.TryAcquire(ctx, "split")
		if !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("%s try-acquire in the minority: %v, want ErrNoQuorum", m.Name(), err)
		}
	}
	alive := 0
	for _, mem := range c.nodes[0].Status().Members {
		if mem.State == "alive" {
			alive++
		}
	}
	if alive != 5 {
		t.Logf("gossip shows %d alive from the minority", alive)
	}
	l, err := c.nodes[3].Acquire(ctx, "split")
	if err != nil {
		t.Fatalf("the majority cannot acquire: %v", err)
	}
	c.net.Heal()
	if _, err := c.nodes[0].TryAcquire(ctx, "split"); !errors.Is(err, ErrLocked) {
		t.Fatalf("after healing, the minority sees %v, want ErrLocked", err)
	}
	l.Release(ctx)
}
