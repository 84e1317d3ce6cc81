package mesh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/lockmesh/lockmesh/quorum"
)

// AcquireSemaphore takes one of the n slots of the counting semaphore
// name: up to n holders at once, mesh-wide (Consul's semaphore and
// Hazelcast's ISemaphore are the models). Each slot is a lock of its own,
// keyed name#0 to name#(n−1), so a holder gets an ordinary Lease, with
// every promise a lease makes, per slot: exclusion (one holder per slot,
// so at most n in all), a fencing token of its own that grows with every
// grant of its slot (Token; a resource shared by the n holders fences per
// slot: Lease.Key names it), renewals and a loss notice (Done), and a slot
// of a crashed holder free again within its TTL.
//
// It first tries every slot once, from one of its own choosing, and takes
// the first free one; if all are held, it waits on every slot at once,
// in turn with the other waiters of each (no polling), and takes the first
// that frees, until ctx ends (then a *CancelledError, as Acquire). The
// value of WithValue, if any, is published with the slot.
//
// Every node must give name the same n. Each slot's value says the n its
// holder used, and an acquire that finds a slot held under another n, or
// by a plain lock, returns a *SemaphoreError (ErrSemaphoreMismatch); once
// granted it also reads the other slots, and slot n (the first beyond its
// own), and gives the slot back on a mismatch. Two acquires of different
// n racing each other may both succeed; the next acquire of either kind
// reports it. It needs every node on protocol version 3
// (ErrUpgradeRequired).
func (m *Mesh) AcquireSemaphore(ctx context.Context, name string, n int, opts ...AcquireOption) (*Lease, error) {
	if n < 1 || n > quorum.MaxSemaphore {
		return nil, fmt.Errorf("%w: a semaphore of %d holders (1 to %d)", ErrInvalidOption, n, quorum.MaxSemaphore)
	}
	sem := quorum.Semaphore{Name: name, N: n}
	if err := m.userKey(sem.Slot(n)); err != nil {
		return nil, err
	}
	o, err := m.options(opts)
	if err != nil {
		return nil, err
	}
	value := sem.SlotValue(o.value)
	if err := m.checkValue(value); err != nil {
		return nil, fmt.Errorf("%w (a semaphore's slot adds %d bytes)", err, len(value)-len(o.value))
	}
	if err := m.valuesAllowed(); err != nil {
		return nil, err
	}
	slotOpts := append(append([]AcquireOption(nil), opts...), WithValue([]byte(value)))
	start := rand.IntN(n)
tries:
	for i := range n {
		slot := sem.Slot((start + i) % n)
		l, err := m.TryAcquire(ctx, slot, slotOpts...)
		if err == nil {
			return m.semaphoreGranted(ctx, sem, l)
		}
		var locked *LockedError
		switch {
		case errors.As(err, &locked):
			holder, value := locked.Holder, locked.Value
			if holder == "" {
				// Contended ("being taken"): the try named nobody. Read the
				// slot, or a slot held as a plain lock or by a semaphore of
				// another size would only be found out once its holder let
				// go, and the wait below could last that long.
				if h, err := m.readHolder(ctx, slot); err == nil && h.Held && h.Node != string(m.name) {
					holder, value = h.Node, h.Value
				}
			}
			if holder != "" && !locked.ThisNode && holder != string(m.name) {
				if theirs, ok := sem.Check(string(value)); !ok {
					return nil, &SemaphoreError{Name: name, N: n, Theirs: theirs, Slot: slot, Holder: holder}
				}
			}
		case errors.Is(err, ErrNoQuorum):
			break tries // the waits wait for a majority too, as Acquire does
		default:
			return nil, err
		}
	}
	return m.waitSemaphore(ctx, sem, append(slotOpts, WaitBehindOwnLease()))
}

// waitSemaphore waits on every slot at once and takes the first granted;
// the others are cancelled, and any granted meanwhile given back.
func (m *Mesh) waitSemaphore(ctx context.Context, sem quorum.Semaphore, opts []AcquireOption) (*Lease, error) {
	wctx, cancel := context.WithCancel(ctx)
	type grant struct {
		l   *Lease
		err error
	}
	results := make(chan grant, sem.N)
	var wg sync.WaitGroup
	for i := range sem.N {
		wg.Go(func() {
			l, err := m.Acquire(wctx, sem.Slot(i), opts...)
			results <- grant{l, err}
		})
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	var errs []error
	for r := range results {
		if r.l == nil {
			errs = append(errs, r.err)
			continue
		}
		cancel()
		go func() {
			// The other waits end within a round; one granted meanwhile
			// goes back at once.
			for r := range results {
				if r.l != nil {
					r.l.Release(context.Background())
				}
			}
		}()
		return m.semaphoreGranted(ctx, sem, r.l)
	}
	cancel()
	if ctx.Err() != nil {
		return nil, firstOf(errs, ctx.Err())
	}
	return nil, firstOf(errs, ErrClosed)
}

// firstOf is the first error that says more than cancellation by this
// call itself, or def.
func firstOf(errs []error, def error) error {
	for _, err := range errs {
		var c *CancelledError
		if !errors.As(err, &c) || c.Waiting != nil || c.MayHaveBeenGranted() {
			return err
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return def
}

// semaphoreGranted checks the other slots of a granted one, and slot N:
// held under another N, the grant is given back.
func (m *Mesh) semaphoreGranted(ctx context.Context, sem quorum.Semaphore, l *Lease) (*Lease, error) {
	l.mu.Lock()
	l.sem = &sem
	l.mu.Unlock()
	type found struct {
		slot string
		h    Holder
		err  error
	}
	out := make(chan found, sem.N+1)
	for i := 0; i <= sem.N; i++ {
		slot := sem.Slot(i)
		if slot == l.Key() {
			out <- found{slot: slot}
			continue
		}
		go func() {
			h, err := m.readHolder(ctx, slot)
			out <- found{slot, h, err}
		}()
	}
	var mismatch *SemaphoreError
	for range sem.N + 1 {
		f := <-out
		if f.err != nil || !f.h.Held || mismatch != nil {
			continue // unread slots are checked by later acquires
		}
		if theirs, ok := sem.Check(string(f.h.Value)); !ok {
			mismatch = &SemaphoreError{Name: sem.Name, N: sem.N, Theirs: theirs, Slot: f.slot, Holder: f.h.Node}
		}
	}
	if mismatch != nil {
		l.Release(context.WithoutCancel(ctx))
		return nil, mismatch
	}
	return l, nil
}
