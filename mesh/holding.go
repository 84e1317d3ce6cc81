package mesh

import (
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// What a node tells the others of the leases it holds, and what a voter
// makes of what they tell it.
//
// A voter that restarts without a data directory votes again once every
// lease it may have accepted in its earlier life has ended. It learns how
// long that is from its own MaxTTL and from the other voters
// (quorum.CatchUpResponse.Horizon). A rolling restart that lowers MaxTTL
// breaks that when a majority of the voters, all still at the old setting,
// lose their state together: they come back at the new MaxTTL, and the one
// voter that kept its state runs the new setting already, so it refused
// the longer leases and reports a short horizon. Only the holders know how
// long their leases are. quorum keeps the TTLs of the accepts a voter
// refuses (hearLease), but a holder's renewal may not reach a restarted
// voter before its short quarantine is over.
//
// So a node that holds a lease longer than the MaxTTL of a voter it knows
// says so in its gossip metadata (wire.Meta.Holding), and every node tells
// its quorum.Node the longest such lease among the running nodes
// (quorum.Node.SetPeerTTL): its voter waits that out after a restart, and
// reports it to others that restart. Outside such a roll no lease is
// longer than every voter's MaxTTL allows (a voter refuses longer ones), so
// the metadata says nothing and nothing is published. A value is kept for
// twice its length after the leases that made it end, so that a node
// taking and releasing such leases does not publish at every one.

// holding counts the TTLs of the leases this node holds (Lease.ttl, from
// the grant to Lease.end).
type holding struct {
	mu    sync.Mutex
	count map[time.Duration]int
	// floor is the shortest MaxTTL among the voters, as last reviewed: a
	// lease no longer than it needs no word.
	floor time.Duration
	shown time.Duration // what the metadata says
	seen  time.Time     // when a review last found a lease of shown held
}

// holdingAdd counts a lease of ttl taken (d = 1) or ended (d = -1). A
// lease longer than every voter's MaxTTL allows, and longer than what the
// metadata says, is published at once.
func (m *Mesh) holdingAdd(ttl time.Duration, d int) {
	h := &m.hold
	h.mu.Lock()
	if h.count == nil {
		h.count = make(map[time.Duration]int)
	}
	if h.count[ttl] += d; h.count[ttl] <= 0 {
		delete(h.count, ttl)
	}
	raise := d > 0 && ttl > h.floor && ttl > h.shown
	h.mu.Unlock()
	if raise {
		go m.reviewHolding()
	}
}

// reviewHolding sets what the metadata says of the leases held: the longest
// held, if it is longer than some voter's MaxTTL; a value it said before
// stays until twice its length after no lease of it is held.
func (m *Mesh) reviewHolding() {
	floor := m.votersMaxTTLFloor()
	h := &m.hold
	h.mu.Lock()
	h.floor = floor
	var longest time.Duration
	for ttl := range h.count {
		longest = max(longest, ttl)
	}
	want := time.Duration(0)
	if longest > floor {
		want = longest
	}
	now := time.Now()
	changed := false
	switch {
	case want > h.shown:
		h.shown, h.seen, changed = want, now, true
	case want == h.shown || longest >= h.shown:
		h.seen = now
	case now.Sub(h.seen) > 2*h.shown:
		h.shown, h.seen, changed = want, now, true
	}
	if changed {
		// Under h.mu: two reviews at once set it in their order.
		m.metaMu.Lock()
		m.meta.Holding = h.shown
		m.metaMu.Unlock()
	}
	h.mu.Unlock()
	if changed && m.ml != nil {
		m.publishMeta()
	}
}

// votersMaxTTLFloor is the shortest MaxTTL among the voters of this node's
// configuration, its own included, as far as gossip has shown their
// settings (its own MaxTTL before it has a configuration).
func (m *Mesh) votersMaxTTLFloor() time.Duration {
	floor := m.cfg.maxTTL()
	cur := m.current.Load()
	if cur == nil {
		return floor
	}
	for _, v := range cur.Voters {
		if v == m.name {
			continue
		}
		if meta, ok := m.book.peerMeta(string(v)); ok {
			if theirs, ok := meta.Settings(); ok && theirs.MaxTTL > 0 {
				floor = min(floor, theirs.MaxTTL)
			}
		}
	}
	return floor
}

// hearPeerTTLs tells the node the longest lease a running peer says it
// holds (wire.Meta.Holding; quorum.Node.SetPeerTTL). Gossip only lengthens
// a restarted voter's wait; it never shortens one below what its own
// MaxTTL and the other voters' horizons say. A peer that gossips a lease it
// does not hold can keep restarted voters out of the vote for up to
// lease.MaxTTL, as a voter can with the horizon it reports.
func (m *Mesh) hearPeerTTLs() {
	select {
	case <-m.closed:
		return
	default:
	}
	m.peerTTLMu.Lock()
	defer m.peerTTLMu.Unlock()
	var longest time.Duration
	for _, p := range m.book.snapshot() {
		if p.state == "alive" && p.name != m.cfg.Name {
			longest = max(longest, p.meta.Holding)
		}
	}
	if longest == m.peerTTL {
		return
	}
	m.drive(func(n *quorum.Node) {
		n.SetPeerTTL(longest)
		m.peerTTL = longest
	})
}

// reviewLeaseHorizons runs both reviews: after gossip news, at setup, and
// now and then (rejoinLoop).
func (m *Mesh) reviewLeaseHorizons() {
	select {
	case <-m.closed:
		return
	default:
	}
	m.reviewHolding()
	m.hearPeerTTLs()
}
