package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Clients on four nodes take a semaphore of 2 over and over: never more
// than 2 hold a slot at once, both slots are used, every slot's tokens
// increase, and every client is served (waiters are served in turn).
func TestSemaphoreHoldsAtMostN(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, clients, rounds = 2, 6, 5
	var (
		holding, most atomic.Int32
		mu            sync.Mutex
		tokens        = make(map[string][]uint64) // slot → tokens in grant order
		wg            sync.WaitGroup
		errs          = make(chan error, clients)
	)
	for i := range clients {
		m := c.nodes[i%len(c.nodes)]
		wg.Go(func() {
			for r := range rounds {
				l, err := m.AcquireSemaphore(ctx, "workers", n, WithValue([]byte(fmt.Sprintf("c%d/%d", i, r))))
				if err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
					return
				}
				now := holding.Add(1)
				for old := most.Load(); now > old && !most.CompareAndSwap(old, now); old = most.Load() {
				}
				mu.Lock()
				tokens[l.Key()] = append(tokens[l.Key()], l.Token())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // work under the slot, not a wait for an event
				holding.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := most.Load(); got > n {
		t.Fatalf("%d holders of a semaphore of %d at once", got, n)
	}
	if len(tokens) != n {
		t.Errorf("slots used: %v, want %d", tokens, n)
	}
	for slot, ts := range tokens {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("slot %s: token %d after %d", slot, ts[i], ts[i-1])
			}
		}
	}
	t.Logf("%d grants, at most %d at once, per slot: %v", clients*rounds, most.Load(), tokens)
}

// A node that gives a semaphore another size, or takes a slot's key as a
// plain lock, is told so.
func TestSemaphoreSizeMismatch(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := c.nodes[0].AcquireSemaphore(ctx, "pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Value()) != "" {
		t.Errorf("a slot's value shows its header: %q", a.Value())
	}
	_, err = c.nodes[1].AcquireSemaphore(ctx, "pool", 1)
	var se *SemaphoreError
	if !errors.As(err, &se) || !errors.Is(err, ErrSemaphoreMismatch) || se.N != 1 || se.Theirs != 2 || se.Holder != "node0" {
		t.Fatalf("a semaphore of 1 where node0 holds one of 2: %v", err)
	}
	a.Release(ctx)
	plain, err := c.nodes[2].Acquire(ctx, "pool#0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[1].AcquireSemaphore(ctx, "pool", 1); !errors.As(err, &se) || se.Theirs != 0 {
		t.Fatalf("a semaphore whose slot is a plain lock: %v", err)
	}
	plain.Release(ctx)
	if _, err := c.nodes[1].AcquireSemaphore(ctx, "pool", 0); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a semaphore of 0: %v", err)
	}
}

// What Holder and Locks say of a semaphore's slot is the holder's value,
// without the header that carries the semaphore's N.
func TestSemaphoreSlotShowsTheHoldersValue(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.nodes[0].AcquireSemaphore(ctx, "jobs", 3, WithValue([]byte("worker-7")))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	h, err := c.nodes[1].Holder(ctx, l.Key())
	if err != nil {
		t.Fatal(err)
	}
	if !h.Held || string(h.Value) != "worker-7" {
		t.Errorf("Holder(%q): held %v, value %q; want the holder's value worker-7", l.Key(), h.Held, h.Value)
	}
	locks, err := c.nodes[2].Locks(ctx, "jobs#")
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || string(locks[0].Value) != "worker-7" {
		t.Errorf("Locks: %+v; want one slot with value worker-7", locks)
	}
}
