package mesh

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// book is what gossip told us about other nodes: where to send ballots, and
// the gossip address of every node ever seen (to rejoin after a partition).
// memberlist's callbacks run under its own locks; they only update the book
// and return.
type book struct {
	mu     sync.Mutex
	rpc    map[string]string // name → ballot address
	gossip map[string]string // name → gossip address, kept after death
	alive  map[string]bool
}

func (b *book) note(n *memberlist.Node, meta nodeMeta, alive bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rpc == nil {
		b.rpc, b.gossip, b.alive = make(map[string]string), make(map[string]string), make(map[string]bool)
	}
	if meta.RPC != "" {
		b.rpc[n.Name] = meta.RPC
	}
	b.gossip[n.Name] = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	b.alive[n.Name] = alive
}

func (b *book) rpcAddr(name string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.rpc[name]
	return a, ok
}

func (b *book) known(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.gossip[name]
	return ok
}

// gossip implements memberlist's Delegate and EventDelegate.
type gossip struct{ m *Mesh }

func (g gossip) NodeMeta(limit int) []byte {
	g.m.book.mu.Lock()
	meta := g.m.meta
	g.m.book.mu.Unlock()
	b, err := meta.encode()
	if err != nil || len(b) > limit {
		g.m.log.Error("gossip metadata does not fit", "error", err)
		return nil
	}
	return b
}

func (gossip) NotifyMsg([]byte)                           {}
func (gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (gossip) LocalState(join bool) []byte                { return nil }
func (gossip) MergeRemoteState(buf []byte, join bool)     {}

func (g gossip) NotifyJoin(n *memberlist.Node)   { g.seen(n, true) }
func (g gossip) NotifyUpdate(n *memberlist.Node) { g.seen(n, true) }
func (g gossip) NotifyLeave(n *memberlist.Node)  { g.seen(n, false) }

func (g gossip) seen(n *memberlist.Node, alive bool) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		g.m.log.Warn("ignoring a node with bad metadata", "peer", n.Name, "error", err)
		g.m.incr("gossip.bad_meta", 1)
		return
	}
	g.m.book.note(n, meta, alive)
	if meta.Config != 0 || meta.Expect != 0 {
		// Forming the configuration takes locks of ours; not under
		// memberlist's.
		go g.m.maybeBootstrap()
	}
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
	for _, n := range m.ml.Members() {
		if n.State == memberlist.StateAlive {
			alive[net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))] = true
			alive[n.Name] = true
		}
	}
	var targets []string
	for _, s := range m.cfg.Seeds {
		if !alive[s] {
			targets = append(targets, s)
		}
	}
	m.setupMu.Lock()
	voters := m.voters
	m.setupMu.Unlock()
	if voters != nil {
		m.book.mu.Lock()
		for _, v := range voters.Voters {
			if a, ok := m.book.gossip[string(v)]; ok && !alive[string(v)] && v != m.name {
				targets = append(targets, a)
			}
		}
		m.book.mu.Unlock()
	}
	slices.Sort(targets)
	return slices.Compact(targets)
}
