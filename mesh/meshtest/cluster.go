package meshtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/transport"
)

// Cluster is a mesh of nodes in this process, every one a voter unless an
// Option says otherwise, named node0, node1, ...: gossip on loopback,
// ballots on an in-memory network, a data directory each, and the short
// timers of mesh.DefaultLocalConfig (a 1 s lease TTL). Its methods are
// meant for the test's goroutine (they fail the test with Fatalf); Node's
// mesh is for any.
type Cluster struct {
	tb      testing.TB // nil: made by Start (failures panic)
	net     *transport.Network
	root    string // the nodes' data directories
	ownRoot bool   // Start made root: Close removes it
	voters  []string
	opts    options

	mu       sync.Mutex
	nodes    []*node
	isolated map[string]bool   // nodes cut off from every other
	byAddr   map[string]string // gossip address → node name
	closed   bool
}

// node is one node of the cluster, across its restarts.
type node struct {
	name  string
	dir   string
	port  int // gossip port, kept across restarts
	cfg   *mesh.Config
	clock *mesh.Clock
	m     *mesh.Mesh
	up    bool
}

// Option changes how New and Start build a cluster.
type Option func(*options)

type options struct {
	edit func(i int, cfg *mesh.Config)
}

// WithConfig has edit change node i's configuration before the node
// starts, and again before each restart: Timing, limits, Voters (the same
// list on every node: a node left out takes locks without voting), a
// Logger, a MetricSink. The cluster then sets Name, DataDir, NewMesh,
// Seeds, Clock, Transport, BindAddr, BindPort and Memberlist.Transport
// itself: its faults and restarts work through them.
func WithConfig(edit func(i int, cfg *mesh.Config)) Option {
	return func(o *options) { o.edit = edit }
}

// timeout bounds every wait of the cluster: readiness, a lease's loss.
const timeout = 20 * time.Second

// New starts a cluster of n nodes for tb's test, waits until every node
// is ready, and shuts it down when the test ends. It fails the test if
// the cluster cannot start or is not ready within 20 s (a 3-node cluster
// is ready in about 200 ms).
func New(tb testing.TB, n int, opts ...Option) *Cluster {
	tb.Helper()
	c, err := start(tb, n, opts)
	if err != nil {
		tb.Fatalf("meshtest: %v", err)
	}
	return c
}

// Start is New for code without a testing.TB (an Example, TestMain): the
// cluster keeps its data directories under os.TempDir until Close, which
// the caller must call, and its methods panic where New's would fail the
// test.
func Start(n int, opts ...Option) (*Cluster, error) {
	return start(nil, n, opts)
}

func start(tb testing.TB, n int, opts []Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("a cluster of %d nodes", n)
	}
	c := &Cluster{tb: tb, net: transport.NewNetwork(1), isolated: map[string]bool{}, byAddr: map[string]string{}}
	for _, o := range opts {
		o(&c.opts)
	}
	if tb != nil {
		c.root = tb.TempDir()
		tb.Cleanup(c.Close)
	} else {
		root, err := os.MkdirTemp("", "meshtest-")
		if err != nil {
			return nil, err
		}
		c.root, c.ownRoot = root, true
	}
	for i := range n {
		name := "node" + strconv.Itoa(i)
		c.voters = append(c.voters, name)
		c.nodes = append(c.nodes, &node{name: name, dir: filepath.Join(c.root, name)})
	}
	for i := range c.nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{c.nodes[0].m.Addr()}
		}
		if err := c.startNode(i, seeds); err != nil {
			c.Close()
			return nil, err
		}
	}
	// A join spreads by gossip, which may wait for the next push/pull
	// (seconds); joining every node at once settles membership now.
	c.joinAll()
	if err := c.waitReady(c.running()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startNode starts node i, joining seeds.
func (c *Cluster) startNode(i int, seeds []string) error {
	nd := c.nodes[i]
	cfg := mesh.DefaultLocalConfig()
	cfg.Voters = c.voters
	cfg.Seed = int64(i + 1)
	if c.opts.edit != nil {
		c.opts.edit(i, cfg)
	}
	cfg.Name, cfg.DataDir, cfg.Seeds = nd.name, nd.dir, seeds
	// The operator's word, true at the first start only: no voter of this
	// mesh has voted, so none need wait for every other to say so.
	cfg.NewMesh = nd.m == nil
	cfg.BindAddr, cfg.BindPort = "127.0.0.1", 0
	nd.clock = &mesh.Clock{} // a new process's
	cfg.Clock = nd.clock
	cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
		return c.net.Listen(name, h)
	}
	mc := memberlist.DefaultLocalConfig()
	if cfg.Memberlist != nil {
		cp := *cfg.Memberlist
		mc = &cp
	} else {
		// As the mesh sets for one machine: a lost gossip about a join
		// waits for the next push/pull.
		mc.PushPullInterval = 2 * time.Second
	}
	link, err := c.gossipLink(nd, cfg.Logger)
	if err != nil {
		return fmt.Errorf("starting %s's gossip: %w", nd.name, err)
	}
	mc.Transport = link
	cfg.Memberlist = mc
	m, err := mesh.New(cfg)
	if err != nil {
		link.Shutdown()
		return fmt.Errorf("starting %s: %w", nd.name, err)
	}
	_, port, _ := net.SplitHostPort(m.Addr())
	c.mu.Lock()
	nd.port, _ = strconv.Atoi(port)
	nd.cfg, nd.m, nd.up = cfg, m, true
	c.byAddr[m.Addr()] = nd.name
	c.mu.Unlock()
	return nil
}

// gossipLink makes node nd's gossip transport, on the port it had before
// if it had one and that port is free.
func (c *Cluster) gossipLink(nd *node, logger hclog.Logger) (*gossipLink, error) {
	out := log.New(io.Discard, "", 0)
	if logger != nil {
		out = logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	}
	tc := &memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: nd.port, Logger: out}
	t, err := memberlist.NewNetTransport(tc)
	if err != nil && nd.port != 0 {
		tc.BindPort = 0
		t, err = memberlist.NewNetTransport(tc)
	}
	if err != nil {
		return nil, err
	}
	return &gossipLink{NodeAwareTransport: t, c: c, name: nd.name}, nil
}

// Len is the number of nodes, running or stopped.
func (c *Cluster) Len() int { return len(c.nodes) }

// Name is node i's name: "node" and i.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Node is node i's mesh: the one running now, or the last one if it is
// stopped (Stop).
func (c *Cluster) Node(i int) *mesh.Mesh {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].m
}

// WaitReady waits until every running node that is not cut off is ready
// (mesh.Mesh.Ready), and fails the test if one is not within 20 s, saying
// what it waits for.
func (c *Cluster) WaitReady() {
	c.helper()
	var ms []*mesh.Mesh
	for _, m := range c.running() {
		if !c.isCutOff(m.Name()) {
			ms = append(ms, m)
		}
	}
	if err := c.waitReady(ms); err != nil {
		c.fatalf("%v", err)
	}
}

func (c *Cluster) waitReady(ms []*mesh.Mesh) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, m := range ms {
		if err := m.WaitReady(ctx); err != nil {
			return fmt.Errorf("%s not ready: %w", m.Name(), err)
		}
	}
	return nil
}

// running lists the running nodes' meshes.
func (c *Cluster) running() []*mesh.Mesh {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*mesh.Mesh
	for _, nd := range c.nodes {
		if nd.up {
			out = append(out, nd.m)
		}
	}
	return out
}

// LoseLease makes l be lost now, as a lease is when its holder is cut off
// from the voters: it cuts the holder's node off from every other node,
// moves that node's clock (alone) to the lease's notice time, so that the
// renewals the cut keeps from succeeding have run out, and returns once
// the node has told l's holder (Done closed, Err wraps mesh.ErrLeaseLost),
// after healing the cut (unless Isolate had made it). Other leases of that
// node whose notice time came first are lost too, as they would be.
//
// The grant still stands at the voters. Once the lease's deadline has
// passed on its clock (the notice margin later, 100 ms by default), the
// node frees it, as a node that lost a lease does, and a waiter on
// another node is granted the key then; had the node stayed cut off, the
// voters would free it when their TTL passed. It fails the test if l has
// ended already, or is not held by a node of this cluster.
func (c *Cluster) LoseLease(l *mesh.Lease) {
	c.helper()
	if err := l.Err(); err != nil {
		c.fatalf("LoseLease(%q): the lease has ended already: %v", l.Key(), err)
	}
	i, err := c.holderOf(l)
	if err != nil {
		c.fatalf("LoseLease(%q): %v", l.Key(), err)
	}
	nd := c.nodes[i]
	if !c.isCutOff(nd.name) {
		c.Isolate(i)
		defer c.rejoin(nd.name)
	}
	margin := nd.cfg.Timing.NoticeMargin
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for l.Err() == nil {
		// A renewal answered just before the cut may still move the
		// deadline; the node's timer for the new one is then due.
		nd.clock.Advance(time.Until(l.Deadline()) - margin)
		select {
		case <-l.Done():
		case <-limit.C:
			c.fatalf("LoseLease(%q): %s did not tell the holder within %v", l.Key(), nd.name, timeout)
		case <-time.After(10 * time.Millisecond): // read the deadline again
		}
	}
	if err := l.Err(); !errors.Is(err, mesh.ErrLeaseLost) {
		c.fatalf("LoseLease(%q): the lease ended otherwise: %v", l.Key(), err)
	}
}

// holderOf finds the node that holds l, by asking the voters who holds
// its key under its token.
func (c *Cluster) holderOf(l *mesh.Lease) (int, error) {
	var last error
	for _, m := range c.running() {
		if c.isCutOff(m.Name()) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := m.Holder(ctx, l.Key())
		cancel()
		if err != nil {
			last = err
			continue
		}
		if !h.Held || h.Token != l.Token() {
			return 0, fmt.Errorf("the voters say the key is held under token %d, not %d", h.Token, l.Token())
		}
		for i, nd := range c.nodes {
			if nd.name == h.Node {
				return i, nil
			}
		}
		return 0, fmt.Errorf("held by %s, not a node of this cluster", h.Node)
	}
	return 0, fmt.Errorf("no node could read who holds it: %v", last)
}

// Isolate cuts node i off from every other node, both ways, gossip and
// ballots, until Heal: it grants and renews nothing (unless it is the only
// voter), and the others, if a majority of the voters, go on without it.
// Isolating several nodes cuts each off alone.
func (c *Cluster) Isolate(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.isolated[c.nodes[i].name] = true
	c.partitionLocked()
}

// Heal undoes every Isolate and has every running node join the others,
// so that gossip need not wait to find them again.
func (c *Cluster) Heal() {
	c.mu.Lock()
	clear(c.isolated)
	c.partitionLocked()
	c.mu.Unlock()
	c.joinAll()
}

// rejoin undoes the Isolate of one node.
func (c *Cluster) rejoin(name string) {
	c.mu.Lock()
	delete(c.isolated, name)
	c.partitionLocked()
	c.mu.Unlock()
	c.joinAll()
}

func (c *Cluster) partitionLocked() {
	var groups [][]string
	for name := range c.isolated {
		groups = append(groups, []string{name})
	}
	c.net.Partition(groups...)
}

func (c *Cluster) isCutOff(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isolated[name]
}

// cutOff says whether gossip from node from to address a is lost.
func (c *Cluster) cutOff(from string, a memberlist.Address) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	to := a.Name
	if to == "" {
		to = c.byAddr[a.Addr]
	}
	return c.isolated[from] || c.isolated[to]
}

// joinAll has every running node join every other.
func (c *Cluster) joinAll() {
	ms := c.running()
	addrs := make([]string, len(ms))
	for i, m := range ms {
		addrs[i] = m.Addr()
	}
	for _, m := range ms {
		m.Join(addrs...) // one that answers none rejoins in the background
	}
}

// Stop stops node i at once, as a crash would: its leases are not
// released (the voters free their keys when their TTL passes), and other
// nodes see it vanish. Restart starts it again.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	nd.up = false
	c.mu.Unlock()
	nd.m.Shutdown()
}

// Restart stops node i if it runs (as Stop does) and starts it again with
// the same name, data directory and gossip address, as a restarted
// process, and returns its new mesh once it is ready. A voter is ready
// after its quarantine (the longest lease TTL, 1 s by default: it may have
// accepted leases it no longer knows of), as in production. It fails the
// test if the node does not start, or is not ready within 20 s.
func (c *Cluster) Restart(i int) *mesh.Mesh {
	c.helper()
	c.Stop(i)
	var seeds []string
	for _, m := range c.running() {
		seeds = append(seeds, m.Addr())
	}
	if err := c.startNode(i, seeds); err != nil {
		c.fatalf("%v", err)
	}
	m := c.Node(i)
	if err := c.waitReady([]*mesh.Mesh{m}); err != nil {
		c.fatalf("restarted %v", err)
	}
	return m
}

// Close shuts every node down, and removes the data directories Start
// made. New's cluster closes when its test ends. Idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	nodes := c.nodes
	c.mu.Unlock()
	for _, nd := range nodes {
		if nd.m != nil {
			nd.m.Shutdown()
		}
	}
	if c.ownRoot {
		os.RemoveAll(c.root)
	}
}

func (c *Cluster) helper() {
	if c.tb != nil {
		c.tb.Helper()
	}
}

func (c *Cluster) fatalf(format string, args ...any) {
	if c.tb != nil {
		c.tb.Helper()
		c.tb.Fatalf("meshtest: "+format, args...)
	}
	panic(fmt.Sprintf("meshtest: "+format, args...))
}
