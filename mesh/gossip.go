package mesh

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// book is what gossip told us about other nodes, copied inside memberlist's
// callbacks (memberlist hands out pointers into its own state, which it
// changes under its own lock, so they must not be read later). It also keeps
// the gossip address of every node ever seen, to rejoin after a partition.
// memberlist's callbacks run under its locks: they only update the book.
type book struct {
	mu    sync.Mutex
	peers map[string]*peer
	ids   identities // who is who: rebinds being vetted, name conflicts (identity.go)
}

type peer struct {
	gossip string // gossip address
	// meta is what gossip last showed, except RPC and Inc: those are the
	// node's binding, the ballot address and the process this node talks
	// to by that name. Gossip sets them the first time; after that only
	// rebind changes them, once the change is vetted (identity.go).
	meta  nodeMeta
	state string // "alive", "dead" or "left"
}

func (b *book) note(n *memberlist.Node, meta nodeMeta, state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers == nil {
		b.peers = make(map[string]*peer)
	}
	p := b.peers[n.Name]
	if p == nil {
		p = &peer{}
		b.peers[n.Name] = p
	}
	p.gossip = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	p.state = state
	switch {
	case meta.RPC == "":
	case p.meta.RPC == "" || (p.meta.RPC == meta.RPC && p.meta.Inc == meta.Inc):
		p.meta = meta
	default:
		// Another process or address than the one bound: the rest of
		// the metadata is current, the binding stays until rebind.
		rpc, inc := p.meta.RPC, p.meta.Inc
		p.meta = meta
		p.meta.RPC, p.meta.Inc = rpc, inc
	}
}

// binding returns the ballot address and incarnation bound to name, and
// what gossip last said of it.
func (b *book) binding(name string) (rpc string, inc uint64, state string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[name]
	if p == nil || p.meta.RPC == "" {
		return "", 0, "", false
	}
	return p.meta.RPC, p.meta.Inc, p.state, true
}

// rebind moves name's binding from (oldRPC, oldInc) to (rpc, inc), unless
// it moved meanwhile. It reports whether it did.
func (b *book) rebind(name, oldRPC string, oldInc uint64, rpc string, inc uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[name]
	if p == nil || p.meta.RPC != oldRPC || p.meta.Inc != oldInc {
		return false
	}
	p.meta.RPC, p.meta.Inc = rpc, inc
	return true
}

func (b *book) rpcAddr(name string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[name]
	if p == nil || p.meta.RPC == "" {
		return "", false
	}
	return p.meta.RPC, true
}

func (b *book) known(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.peers[name]
	return ok
}

// snapshot copies the book, sorted by name.
func (b *book) snapshot() []namedPeer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]namedPeer, 0, len(b.peers))
	for name, p := range b.peers {
		out = append(out, namedPeer{name, *p})
	}
	slices.SortFunc(out, func(x, y namedPeer) int { return strings.Compare(x.name, y.name) })
	return out
}

// get returns what the book holds of one peer.
func (b *book) get(name string) (peer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[name]
	if p == nil {
		return peer{}, false
	}
	return *p, true
}

type namedPeer struct {
	name string
	peer
}

// gossip implements memberlist's Delegate and EventDelegate.
type gossip struct{ m *Mesh }

func (g gossip) NodeMeta(limit int) []byte {
	g.m.metaMu.Lock()
	meta := g.m.meta
	g.m.metaMu.Unlock()
	b, err := meta.encode()
	if err != nil || len(b) > limit {
		g.m.log.Error("gossip metadata does not fit", "error", err)
		return nil
	}
	return b
}

// NotifyAlive is memberlist's AliveDelegate: it vets every alive message
// before memberlist applies it (identity.go).
func (g gossip) NotifyAlive(n *memberlist.Node) error { return g.m.checkAlive(n) }

// NotifyConflict is memberlist's ConflictDelegate: two processes gossip
// one name from two addresses (identity.go).
func (g gossip) NotifyConflict(existing, other *memberlist.Node) { g.m.nameConflict(existing, other) }

func (gossip) NotifyMsg([]byte)                           {}
func (gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (gossip) LocalState(join bool) []byte                { return nil }
func (gossip) MergeRemoteState(buf []byte, join bool)     {}

func (g gossip) NotifyJoin(n *memberlist.Node)   { g.seen(n, "alive") }
func (g gossip) NotifyUpdate(n *memberlist.Node) { g.seen(n, "alive") }
func (g gossip) NotifyLeave(n *memberlist.Node) {
	state := "dead"
	if n.State == memberlist.StateLeft {
		state = "left"
	}
	g.seen(n, state)
}

func (g gossip) seen(n *memberlist.Node, state string) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		g.m.log.Warn("ignoring a node with bad metadata", "peer", n.Name, "error", err)
		g.m.incr("gossip.bad_meta", 1)
		return
	}
	g.m.book.note(n, meta, state)
	if g.m.current.Load() == nil {
		if meta.Config != 0 || meta.Expect != 0 {
			// Forming the configuration takes locks of ours; not under
			// memberlist's.
			go g.m.maybeBootstrap()
		}
		return
	}
	if state == "alive" {
		g.m.checkPeerConfig(n.Name, meta.Config)
	}
	// Driving the node takes locks of ours; not under memberlist's.
	go g.m.reviewLeaseHorizons()
}

// rejoinLoop rejoins the seeds and every voter seen before that gossip does
// not show alive. memberlist stops gossiping to a dead node after
// GossipToTheDeadTime; without this, a long partition would never heal.
func (m *Mesh) rejoinLoop() {
	defer m.wg.Done()
	every := m.cfg.rejoinInterval()
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.closed:
			return
		case <-t.C:
		}
		m.reviewLeaseHorizons() // lowers what the metadata says of leases held
		targets := m.rejoinTargets()
		if len(targets) == 0 {
			continue
		}
		if n, err := m.ml.Join(targets); err != nil && n == 0 {
			m.log.Debug("rejoin found nobody", "targets", targets, "error", err)
		} else {
			m.log.Debug("rejoined", "answered", n)
		}
	}
}

func (m *Mesh) rejoinTargets() []string {
	alive := make(map[string]bool)
	gossipAddr := make(map[string]string)
	for _, p := range m.book.snapshot() {
		gossipAddr[p.name] = p.gossip
		if p.state == "alive" {
			alive[p.gossip] = true
			alive[p.name] = true
		}
	}
	var targets []string
	for _, s := range m.cfg.Seeds {
		if !alive[s] {
			targets = append(targets, s)
		}
	}
	if voters := m.current.Load(); voters != nil {
		for _, v := range voters.Voters {
			if a, ok := gossipAddr[string(v)]; ok && !alive[string(v)] && v != m.name {
				targets = append(targets, a)
			}
		}
	}
	slices.Sort(targets)
	return slices.Compact(targets)
}
