package transport

import (
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// Network is an in-memory network for tests of code built on Transport.
// Nodes join it with Listen and reach each other by name. Faults are
// injected per frame (request, reply or one-way message): partitions and
// one-way cuts, random loss, random duplication, and random delay, which
// also reorders frames. All randomness comes from one seeded source, so a
// failing seed can be replayed (up to goroutine scheduling, which decides
// the order in which concurrent senders draw from it).
//
// The zero Network is not usable; create one with NewNetwork.
type Network struct {
	mu       sync.Mutex
	rng      *rand.Rand
	nodes    map[string]*MemTransport // the current transport for each name
	group    map[string]int           // partition group; absent means group 0
	cuts     map[[2]string]bool       // {from, to}: frames from → to are lost
	dropRate float64
	dupRate  float64
	delayMin time.Duration
	delayMax time.Duration
	stats    NetworkStats
}

// NetworkStats counts frames (requests, replies and one-way messages).
// Sent + Duplicated = Delivered + Dropped + frames still in flight.
type NetworkStats struct {
	Sent       uint64 // frames offered to the network
	Delivered  uint64 // frames that reached an open destination and were acted on (the handler returned)
	Dropped    uint64 // frames lost to a partition, a cut, the drop rate, or a destination that closed before they arrived
	Duplicated uint64 // extra copies made by the duplicate rate
}

// NewNetwork returns an empty, fault-free network whose random choices
// come from seed.
func NewNetwork(seed int64) *Network {
	return &Network{
		rng:   rand.New(rand.NewSource(seed)),
		nodes: make(map[string]*MemTransport),
		group: make(map[string]int),
		cuts:  make(map[[2]string]bool),
	}
}

// Listen attaches a node called name with handler h. The name must not be
// in use by an open transport; a closed node's name may be reused, which is
// how a test restarts a node.
func (n *Network) Listen(name string, h Handler) (*MemTransport, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("transport: listen %q: %w", name, err)
	}
	if h == nil {
		return nil, fmt.Errorf("transport: listen %q: nil handler", name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.nodes[name]; old != nil && !old.isClosed() {
		return nil, fmt.Errorf("transport: listen %q: name in use", name)
	}
	m := &MemTransport{
		net:     n,
		name:    name,
		h:       h,
		pending: make(map[uint64]chan result),
		done:    make(chan struct{}),
	}
	n.nodes[name] = m
	return m, nil
}

// Partition splits the network: nodes in different groups cannot reach
// each other. Nodes named in no group form one more group together. It
// replaces any earlier partition; cuts are kept. Partition() with no
// groups removes the partition.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.group)
	for i, g := range groups {
		for _, name := range g {
			n.group[name] = i + 1
		}
	}
}

// Cut makes frames sent by from to to be lost, in that direction only: a
// request from to still arrives at from, but from's reply is lost.
func (n *Network) Cut(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cuts[[2]string{from, to}] = true
}

// Heal removes all partitions and cuts. Drop rate, duplicate rate and
// delay stay as they are.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.group)
	clear(n.cuts)
}

// SetDropRate makes each frame be lost with probability p, clamped to
// [0, 1].
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate = clampProbability(p)
}

// SetDuplicateRate makes each frame that is not lost be delivered twice
// with probability p, clamped to [0, 1]. This deliberately breaks the
// at-most-once promise of Transport, to test that handlers tolerate
// duplicates: a duplicated request runs the handler twice (the caller sees
// the first reply), a duplicated message is handled twice.
func (n *Network) SetDuplicateRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dupRate = clampProbability(p)
}

// SetDelay delays each frame by a duration drawn uniformly from [min, max].
// Negative values count as zero; max below min counts as min. (0, 0)
// delivers each frame at once, on a new goroutine.
func (n *Network) SetDelay(min, max time.Duration) {
	min = maxDuration(min, 0)
	max = maxDuration(max, min)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delayMin, n.delayMax = min, max
}

// Stats returns the frame counters.
func (n *Network) Stats() NetworkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// route decides the fate of one frame from → to and returns the delays of
// the copies to deliver (none if the frame is lost). Lost frames are
// counted here; delivered ones by deliver.
func (n *Network) route(from, to string) []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats.Sent++
	if n.group[from] != n.group[to] || n.cuts[[2]string{from, to}] ||
		(n.dropRate > 0 && n.rng.Float64() < n.dropRate) {
		n.stats.Dropped++
		return nil
	}
	copies := 1
	if n.dupRate > 0 && n.rng.Float64() < n.dupRate {
		copies = 2
		n.stats.Duplicated++
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		delays[i] = n.delayMin
		if span := n.delayMax - n.delayMin; span > 0 {
			delays[i] += time.Duration(n.rng.Int63n(int64(span) + 1))
		}
	}
	return delays
}

// lookup returns the open transport called name, if any.
func (n *Network) lookup(name string) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.nodes[name]; m != nil && !m.isClosed() {
		return m
	}
	return nil
}

// lookupNode returns the open node at addr, which must be node unless node
// is empty: names are addresses here, so asking for one node at another's
// address is a caller's mix-up that TCP with TLS would refuse too.
func (n *Network) lookupNode(node, addr string) (*MemTransport, error) {
	dst := n.lookup(addr)
	switch {
	case dst == nil:
		return nil, fmt.Errorf("%w: %s: no node listening", ErrUnreachable, addr)
	case node != "" && node != dst.name:
		return nil, fmt.Errorf("%w: %w: %s is %q, not %q", ErrUnreachable, ErrIdentity, addr, dst.name, node)
	}
	return dst, nil
}

func (n *Network) count(delivered bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if delivered {
		n.stats.Delivered++
	} else {
		n.stats.Dropped++
	}
}

func clampProbability(p float64) float64 {
	switch {
	case p > 1:
		return 1
	case p > 0:
		return p
	default: // also NaN
		return 0
	}
}

func maxDuration(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
