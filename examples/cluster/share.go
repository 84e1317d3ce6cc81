package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// share runs workers on every node that take the lock in turn and, holding
// it, increment the shared counter through the fence.
func (d *demo) share() error {
	workers := d.perNode * len(d.c.voters)
	d.title("%d workers (%d per node) take %q in turn; holding it, each reads the counter, works, "+
		"and writes counter+1 through a fence that checks the lease's token. %d increments in all.",
		workers, d.perNode, key, d.increments)
	var (
		wg      sync.WaitGroup
		inside  int // holders between grant and release: must never exceed 1
		mu      sync.Mutex
		errs    []error
		maxWait time.Duration
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	t := time.Now()
	for w := 0; w < workers; w++ {
		node := d.c.voters[w%len(d.c.voters)]
		who := fmt.Sprintf("%s/%d", node, w/len(d.c.voters)+1)
		n := d.increments / workers
		if w < d.increments%workers {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := d.c.nodes[node]
			for range n {
				ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
				asked := time.Now()
				l, err := m.Acquire(ctx, key, mesh.WaitBehindOwnLease()) // workers on one node take turns too
				cancel()
				if err != nil {
					fail(fmt.Errorf("%s: acquiring %q: %w", who, key, err))
					return
				}
				waited := time.Since(asked)
				mu.Lock()
				inside++
				overlap := inside > 1
				maxWait = max(maxWait, waited)
				mu.Unlock()
				if overlap {
					fail(fmt.Errorf("%s got token %d while another worker held %q", who, l.Token(), key))
				}
				before, after, err := d.st.increment(key, l.Token())
				if err != nil {
					fail(fmt.Errorf("%s: write with token %d refused: %w", who, l.Token(), err))
				} else {
					d.say("%-4s token %d  counter %2d -> %2d  (waited %s)", who, l.Token(), before, after, round(waited))
				}
				if l.Err() != nil {
					fail(fmt.Errorf("%s: lease ended while held: %w", who, l.Err()))
				}
				mu.Lock()
				inside--
				mu.Unlock()
				ctx, cancel = context.WithTimeout(context.Background(), stepTimeout)
				err = l.Release(ctx)
				cancel()
				if err != nil {
					fail(fmt.Errorf("%s: releasing token %d: %w", who, l.Token(), err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	d.writes = d.increments
	if v := d.st.get(); v != d.increments {
		return fmt.Errorf("lost update: counter is %d after %d increments", v, d.increments)
	}
	if err := d.st.checkTokens(d.writes); err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	first, last := d.st.tokenRange()
	d.say("counter = %d after %d increments: no update lost, never two holders at once.", d.st.get(), d.increments)
	d.say("%d grants, tokens strictly increasing from %d to %d; took %s (longest wait %s).",
		d.increments, first, last, round(time.Since(t)), round(maxWait))
	d.say("(Tokens start from the wall clock in microseconds, so they keep growing even after every node restarts.)")
	return nil
}
