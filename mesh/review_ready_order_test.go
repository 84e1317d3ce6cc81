package mesh

import (
	"errors"
	"testing"

	"github.com/lockmesh/lockmesh/quorum"
)

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
