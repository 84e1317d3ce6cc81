package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// How a Lease ends: exactly once, released or lost, whatever the order in
// which the node reports its releases, losses and grants.

// TestReleasesRacingLossesThenLeave: the node, not a map of the mesh's,
// keeps which Lease stands for which of its leases. A node cut off from
// the voters loses its leases while its callers release some of them at
// the same moment: every Lease ends exactly once (released or lost, never
// both, never neither), the node counts none afterwards, and the Leases
// of the same keys taken again after the heal get the renewals (the ended
// ones' deadlines stay where they ended). Leave then releases every one of
// them, and another node takes each key at once.
func TestReleasesRacingLossesThenLeave(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := c.nodes[3] // a proposer only: its voters are all elsewhere
	const n = 24
	keys := make([]string, n)
	first := make([]*Lease, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("race/%d", i)
		var opts []AcquireOption
		if i%3 == 0 {
			opts = append(opts, WithValue([]byte("v")))
		}
		l, err := m.Acquire(ctx, keys[i], opts...)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = l
	}
	if got := m.Status().Leases; got != n {
		t.Fatalf("Status().Leases = %d holding %d", got, n)
	}
	c.net.Partition([]string{"node3"}, []string{"node0", "node1", "node2"})
	// Half are released while renewals fail; the release of a lease the
	// node reports lost a moment earlier says so.
	var wg sync.WaitGroup
	relErr := make([]error, n)
	for i := 0; i < n; i += 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer rcancel()
			relErr[i] = first[i].Release(rctx)
		}()
	}
	ttl := m.cfg.Timing.TTL
	for i, l := range first {
		select {
		case <-l.Done():
		case <-time.After(2 * ttl):
			t.Fatalf("%s (token %d) not ended %v after the partition", l.Key(), l.Token(), 2*ttl)
		}
		err := l.Err()
		switch {
		case errors.Is(err, ErrReleased) && errors.Is(err, ErrLeaseLost):
			t.Errorf("%s: both released and lost: %v", l.Key(), err)
		case i%2 == 1 && !errors.Is(err, ErrLeaseLost):
			t.Errorf("%s, not released: Err %v, want ErrLeaseLost", l.Key(), err)
		case i%2 == 0 && !errors.Is(err, ErrReleased) && !errors.Is(err, ErrLeaseLost):
			t.Errorf("%s, released: Err %v", l.Key(), err)
		}
	}
	wg.Wait()
	for i := 0; i < n; i += 2 {
		// Release may fail to reach the voters (cut off), but it must
		// not call a lease it ended itself lost, nor the reverse.
		if errors.Is(first[i].Err(), ErrReleased) && errors.Is(relErr[i], ErrLeaseLost) {
			t.Errorf("%s: Err says released, Release said lost: %v", keys[i], relErr[i])
		}
	}
	if got := m.Status().Leases; got != 0 {
		t.Fatalf("Status().Leases = %d after every lease ended", got)
	}
	ended := make([]time.Time, n)
	for i, l := range first {
		ended[i] = l.Deadline()
		// A released lease's deadline is the release's moment; a lost
		// one keeps the deadline it had (the loss is told before it).
		if errors.Is(l.Err(), ErrReleased) && l.Deadline().After(time.Now()) {
			t.Errorf("%s: deadline %v after its release, in the future", l.Key(), time.Until(l.Deadline()))
		}
	}

	c.net.Heal()
	again := make([]*Lease, n)
	for i, k := range keys {
		l, err := m.Acquire(ctx, k)
		if err != nil {
			t.Fatalf("acquire %s after the heal: %v", k, err)
		}
		if l.Token() <= first[i].Token() {
			t.Fatalf("%s: token %d after %d", k, l.Token(), first[i].Token())
		}
		again[i] = l
	}
	if got := m.Status().Leases; got != n {
		t.Fatalf("Status().Leases = %d holding %d again", got, n)
	}
	// The new Leases are renewed; the ended ones stay ended.
	for _, l := range again {
		select {
		case <-l.Renewed():
		case <-time.After(2 * ttl):
			t.Fatalf("%s (token %d) not renewed within %v", l.Key(), l.Token(), 2*ttl)
		}
	}
	for i, l := range first {
		if !l.Deadline().Equal(ended[i]) || l.Err() == nil {
			t.Errorf("%s: the ended Lease moved: deadline %v -> %v, Err %v", l.Key(), ended[i], l.Deadline(), l.Err())
		}
	}

	if err := m.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	for _, l := range again {
		select {
		case <-l.Done():
		default:
			t.Fatalf("%s not ended by Leave", l.Key())
		}
		if !errors.Is(l.Err(), ErrReleased) {
			t.Errorf("%s: Err %v after Leave, want ErrReleased", l.Key(), l.Err())
		}
	}
	// Released by the leave, not left to expire: another node takes
	// every key well within the TTL.
	half, cancelHalf := context.WithTimeout(ctx, ttl/2)
	defer cancelHalf()
	for _, k := range keys {
		l, err := c.nodes[0].TryAcquire(half, k)
		if err != nil {
			t.Fatalf("%s after the leave: %v", k, err)
		}
		l.Release(ctx)
	}
}

// TestGrantLostInTheSameReady: a Ready may report a grant and, among its
// lease events, the loss of that same lease (the driver stepped the answer
// that completed the grant, then ticked past its notice time before taking
// the Ready: quorum's TestScenarioGrantAndItsLossInOneReady). The mesh
// applies events before results, so the loss comes before any Lease stands
// for it; the Lease the grant then makes must say it is lost at once, not
// stay open with no event left to end it (and no node lease to count it).
func TestGrantLostInTheSameReady(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1})
	c.waitVoting()
	m := c.nodes[0]
	const id = quorum.OpID(1 << 62) // no operation of the node's own
	ch := make(chan outcome, 1)
	now := m.clock.Now()
	ttl := m.cfg.Timing.TTL
	m.nodeMu.Lock()
	m.waiters[id] = ch
	// The Ready: its events first (the loss), then its results (the grant).
	m.leaseEvents([]quorum.LeaseEvent{{Key: "k", Epoch: 7, Deadline: now + ttl/2, Lost: true, Reason: quorum.LostNoQuorum}})
	m.result(quorum.OpResult{ID: id, Key: "k", Outcome: quorum.Granted, Epoch: 7,
		Deadline: now + ttl/2, LeaseStart: now - ttl/2, Value: quorum.Value{Held: true, Epoch: 7, TTL: ttl}})
	m.nodeMu.Unlock()
	out := <-ch
	l := out.lease
	if l == nil {
		t.Fatalf("no Lease for the grant: %+v", out)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the Lease of a grant lost in the same Ready is open")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Errorf("Err %v, want ErrLeaseLost", l.Err())
	}
	if n := m.Status().Leases; n != 0 {
		t.Errorf("Status().Leases = %d", n)
	}
}
