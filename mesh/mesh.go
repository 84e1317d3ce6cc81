package mesh

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/quorum"
	"github.com/lockmesh/lockmesh/transport"
)

// Mesh is one node of a lock mesh. It is safe for concurrent use.
type Mesh struct {
	cfg  Config
	name quorum.NodeID
	inc  uint64
	log  hclog.Logger
	met  *metrics.Metrics // nil: no Config.MetricSink
	lbl  []metrics.Label
	// sinkLbl are the labels a go-metrics sink gets with each figure of
	// metricList: lbl, and its family's label (setupMetrics).
	sinkLbl [][]metrics.Label
	stats   meters // the node's own figures (metrics.go)
	clock   *nodeClock
	lim     limits
	qo      quorum.AcquireOptions // for the configured TTL (timing takes exact arithmetic)

	ml     *memberlist.Memberlist
	addr   string        // gossip address
	gossip time.Duration // memberlist's GossipInterval
	tr     transport.Transport
	metaMu sync.Mutex
	meta   nodeMeta // what this node tells the others
	// publishMu makes publishMeta's calls take turns: memberlist's
	// UpdateNode is not safe to call concurrently (each reads the local
	// node's state outside the lock another's aliveNode writes it under,
	// a data race).
	// Leave sets left under it, and no UpdateNode runs from then on:
	// memberlist's Leave reads the node's incarnation, then broadcasts
	// that it left under it, and an UpdateNode in between raises the
	// incarnation, so that the leave is dropped as stale (and Leave waits
	// out its whole timeout).
	publishMu sync.Mutex
	left      bool // Leave told gossip (publishMu)
	book      book
	noisy     limiter  // rate-limits logs about refused peers
	lasting   lasting  // how long refusals of a peer have lasted (ratelimit.go)
	refused   refusals // peers refused for their settings (settings.go)

	keyring *memberlist.Keyring // gossip keys; nil when gossip is not encrypted

	// The voter configuration, once known (the newest this node adopted);
	// ready closes when the first is.
	setupMu  sync.Mutex
	current  atomic.Pointer[quorum.Membership]
	ready    chan struct{}
	fetchMu  sync.Mutex
	fetching map[fetchKey]bool
	// founders are the founding voters of this node's mesh, sorted, when
	// it knows them (voters.go, setFounders).
	founders atomic.Pointer[[]quorum.NodeID]
	// rs is readiness: its level, Ready's channel, what the probes heard,
	// the mismatches seen (ready.go).
	rs readyState

	// combMu guards the callers of drive waiting for the driver.
	combMu  sync.Mutex
	driving bool
	pending []driveWaiter

	// The protocol: the node, driven under nodeMu (engine.go), and what
	// waits on it.
	nodeMu  sync.Mutex
	node    *quorum.Node
	voting  atomic.Pointer[quorum.VotingState] // as the node last said
	rand    *rand.Rand
	waiters map[quorum.OpID]chan outcome
	// hold counts the leases this node holds by TTL, for its gossip
	// metadata; peerTTLMu orders hearPeerTTLs' calls, and peerTTL is
	// what the node was last told (holding.go).
	hold      holding
	peerTTLMu sync.Mutex
	peerTTL   time.Duration
	// (The leases this node holds are kept by the node, each with its
	// Lease: Node.TagLease, LeaseTag, LeaseTags.) orphans are those the
	// node renewed after their Lease had ended as lost (leaseEvent), to be
	// let go once the Ready is done with (releaseOrphans).
	orphans []*Lease
	// Requests received from the network wait for the node's answer in
	// inbound, by the Ref they were given (nodeMu; engine.go, ask).
	nextRef atomic.Uint64
	inbound map[uint64]*inbound

	// dd is the data directory (nil without Config.DataDir), and saved
	// what it held when the node started (nil: nothing yet).
	dd    *dataDir
	saved *savedState

	started chan struct{} // closed when New is done
	// observe, when a test sets it, sees every operation result
	// (internal ones included) under nodeMu.
	observe func(quorum.OpResult)

	outbox outboxes // requests waiting for a free call, per voter
	watch  watches  // Watch's subscribers by key (watch.go; nodeMu)

	kick      chan struct{}
	armed     time.Duration // when the timer loop will next tick (nodeMu)
	closed    chan struct{}
	leaving   atomic.Bool // Leave has begun: no new acquire
	bootRetry atomic.Bool // a retry of maybeBootstrap is pending
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New starts a node: gossip, the ballot transport, and (once the voter
// configuration is known) the protocol. It joins cfg.Seeds, if any, but does
// not fail when none answers: the node keeps trying in the background.
func New(cfg *Config) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := *cfg
	m := &Mesh{
		cfg:      c,
		name:     quorum.NodeID(c.Name),
		log:      c.Logger,
		clock:    newClock(c.Clock),
		lim:      c.limits(),
		ready:    make(chan struct{}),
		waiters:  make(map[quorum.OpID]chan outcome),
		inbound:  make(map[uint64]*inbound),
		fetching: make(map[fetchKey]bool),
		kick:     make(chan struct{}, 1),
		started:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	m.qo = timingOptions(c.Timing)
	m.clock.wall = c.WallClock
	m.rs.init()
	m.log = meshLogger(c.Logger).With("node", c.Name)
	for _, w := range c.Warnings() {
		m.log.Warn(w)
	}
	if c.DataDir != "" {
		if err := m.openDataDir(); err != nil {
			return nil, err
		}
	}
	inc, err := m.newIncarnation() // saved in the data directory before any use
	if err != nil {
		m.dd.close()
		return nil, err
	}
	m.inc = inc
	seed := c.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	m.rand = rand.New(rand.NewSource(seed))
	if err := m.setupMetrics(); err != nil {
		m.dd.close()
		return nil, err
	}
	if err := m.startTransport(); err != nil {
		m.dd.close()
		return nil, err
	}
	if err := m.startGossip(); err != nil {
		m.tr.Close()
		m.dd.close()
		return nil, err
	}
	switch {
	case m.saved != nil:
		// The configuration the data directory kept: the newest this
		// node adopted (and no older one than Config.Voters').
		if len(m.saved.Founders) > 0 {
			m.setFounders(founding(m.saved.Founders).Voters)
		}
		if err := m.setup(m.saved.State.Membership); err != nil {
			m.Shutdown()
			return nil, err
		}
	case len(c.Voters) > 0:
		m.setFounders(founding(c.Voters).Voters)
		if err := m.setup(founding(c.Voters)); err != nil {
			m.Shutdown()
			return nil, err
		}
	}
	m.wg.Add(4)
	go m.timerLoop()
	go m.rejoinLoop()
	go m.autopilotLoop()
	go m.readyLoop()
	if len(c.Seeds) > 0 {
		if _, err := m.ml.Join(c.Seeds); err != nil {
			// Routine while the nodes of a mesh start together; readiness
			// says if it lasts.
			m.log.Info("no seed answered yet; retrying in the background", "seeds", c.Seeds, "error", err)
		}
	}
	m.clock.lead.attach(m)
	close(m.started)
	m.maybeBootstrap()
	return m, nil
}

// meshLogger is the logger the mesh logs through: l (nil: silent), named
// "lockmesh" unless its name already ends so (a logger the application
// named "svc.lockmesh" is not made "svc.lockmesh.lockmesh").
func meshLogger(l hclog.Logger) hclog.Logger {
	if l == nil {
		return hclog.NewNullLogger()
	}
	if n := l.Name(); n == "lockmesh" || strings.HasSuffix(n, ".lockmesh") {
		return l
	}
	return l.Named("lockmesh")
}

func (m *Mesh) startTransport() error {
	var err error
	if m.cfg.Transport != nil {
		m.tr, err = m.cfg.Transport(m.cfg.Name, handler{m})
	} else {
		tc := transport.DefaultTCPConfig()
		if m.cfg.local {
			tc = transport.DefaultLocalTCPConfig()
		}
		tc.Name = m.cfg.Name
		tc.BindAddr = m.cfg.rpcBind(m.cfg.BindPort)
		tc.AdvertiseAddr = m.cfg.RPCAdvertise
		tc.Handler = handler{m}
		if err := m.secureTransport(&tc); err != nil { // TLS, limits, OnError
			return err
		}
		m.settingsTransport(&tc) // settings in the hello, both ways
		m.tr, err = transport.NewTCP(tc)
	}
	if err != nil {
		return fmt.Errorf("mesh: starting the ballot transport: %w", err)
	}
	m.meta.RPC = m.tr.Addr()
	m.meta.Expect = m.cfg.BootstrapExpect
	m.meta.Inc = m.inc
	m.meta.NoVote = m.cfg.NoVote
	m.meta.Disk = m.cfg.DataDir != ""
	m.meta.SetSettings(m.settings())
	return nil
}

func (m *Mesh) startGossip() error {
	mc := m.cfg.Memberlist
	if mc == nil {
		if m.cfg.local {
			mc = memberlist.DefaultLocalConfig()
			// A lost gossip about a join waits for the next push/pull
			// (15s in memberlist's local defaults): on one machine, sync
			// often.
			mc.PushPullInterval = 2 * time.Second
		} else {
			mc = memberlist.DefaultLANConfig()
		}
	} else {
		cp := *mc
		mc = &cp
	}
	mc.Name = m.cfg.Name
	mc.BindAddr = m.cfg.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = m.cfg.BindPort
	mc.AdvertiseAddr = m.cfg.AdvertiseAddr
	mc.AdvertisePort = m.cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = m.cfg.BindPort
	}
	mc.Delegate = gossip{m}
	mc.Events = gossip{m}
	mc.Alive = gossip{m}    // vets alive messages (identity.go)
	mc.Conflict = gossip{m} // reports one name at two addresses
	m.book.ids.pushPull = mc.PushPullInterval
	m.gossip = max(mc.GossipInterval, 10*time.Millisecond)
	if err := m.secureGossip(mc); err != nil { // key, label, logger
		return err
	}
	// Checked at its fullest: a configuration id and a word of leases held
	// (holding.go) join it later, and metadata that outgrows memberlist's
	// limit then would not be sent at all.
	full := m.meta
	full.Config, full.Holding = math.MaxUint64, lease.MaxTTL
	if _, err := full.encode(); err != nil {
		return err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("mesh: starting gossip: %w", err)
	}
	m.ml = ml
	n := ml.LocalNode()
	m.addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	return nil
}

// founding is the first configuration of a mesh founded by the given
// voters: every node started with the same list agrees on it without
// talking, and it names the mesh for good (see quorum.ClusterID).
func founding(names []string) quorum.Membership {
	ids := make([]quorum.NodeID, len(names))
	for i, n := range names {
		ids[i] = quorum.NodeID(n)
	}
	return quorum.NewMembership(quorum.ClusterID(ids), ids...)
}

// setup installs the first voter configuration this node knows: from then
// on it proposes, and votes when it is one of the voters. It happens once;
// later configurations come through configChanged.
func (m *Mesh) setup(vs quorum.Membership) error {
	m.setupMu.Lock()
	defer m.setupMu.Unlock()
	if m.current.Load() != nil {
		return nil
	}
	rt := m.cfg.roundTimeout()
	nc := quorum.NodeConfig{
		ID: m.name, Incarnation: m.inc, Membership: vs, Clock: m.clock,
		Rand: rand.New(rand.NewSource(m.rand.Int63())), RoundTimeout: rt, Drift: m.cfg.Timing.Drift,
		MaxTTL: m.cfg.maxTTL(), Quarantine: m.quarantine(), CatchUpBuckets: 64,
		RetryInterval: 2 * rt, HandoffGrace: 2 * rt, NewMesh: m.cfg.NewMesh,
	}
	if m.dd != nil {
		if f := m.founders.Load(); f != nil {
			m.dd.setFounders(*f)
		}
		nc.Disk = m.dd
		if m.saved != nil {
			nc.Durable = &m.saved.State
		}
	}
	node, err := quorum.NewNode(nc)
	if err != nil {
		return err
	}
	m.nodeMu.Lock()
	m.node = node
	m.nodeMu.Unlock()
	// The node's first Ready reports its configuration and voting state
	// (configChanged, votingChanged).
	m.drive(nil)
	close(m.ready)
	go m.reviewLeaseHorizons()
	return nil
}

// quarantine is how long a restarted voter of this node's settings stays
// out of the vote at least: until every lease it may have accepted has
// ended (it may stay out longer if other voters report longer leases).
func (m *Mesh) quarantine() time.Duration {
	timing := m.cfg.Timing
	timing.TTL = m.cfg.maxTTL()
	return timing.Quarantine()
}

// publishMeta gossips this node's current metadata.
func (m *Mesh) publishMeta() {
	m.publishMu.Lock()
	defer m.publishMu.Unlock()
	if m.left {
		return
	}
	if err := m.ml.UpdateNode(5 * time.Second); err != nil {
		m.log.Debug("publishing gossip metadata", "error", err)
	}
}

// retryBootstrap runs maybeBootstrap again a few round timeouts from now,
// unless a retry is already pending.
func (m *Mesh) retryBootstrap() {
	if !m.bootRetry.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(4*m.cfg.roundTimeout(), func() {
		m.bootRetry.Store(false)
		m.maybeBootstrap()
	})
}

// maybeBootstrap forms the voter configuration once exactly
// BootstrapExpect voters see each other, or adopts one a peer announces.
func (m *Mesh) maybeBootstrap() {
	select {
	case <-m.started:
	case <-m.closed:
		return
	}
	select {
	case <-m.ready:
		return
	case <-m.closed:
		return
	default:
	}
	// A configuration a peer uses wins: the newest one announced.
	var names []string
	var from string
	var id uint64
	expecting := 0
	for _, p := range m.book.snapshot() {
		if p.meta.Config != 0 && p.state == "alive" {
			if c, n := (quorum.Membership{ID: p.meta.Config}), (quorum.Membership{ID: id}); id == 0 || n.Newer(c) {
				id, from = p.meta.Config, p.name
			}
		}
		if m.cfg.BootstrapExpect > 0 && p.meta.Expect == m.cfg.BootstrapExpect && p.state == "alive" {
			expecting++
			names = append(names, p.name)
		}
	}
	if id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*m.cfg.roundTimeout())
		defer cancel()
		info, err := m.fetchInfo(ctx, from)
		if err != nil {
			m.log.Debug("fetching the voter configuration", "peer", from, "error", err)
			// Asked again at the next gossip update, but in a quiet mesh
			// there may be none: try again soon in any case.
			m.retryBootstrap()
			return
		}
		vs := info.Membership
		m.learnFounders(info)
		if err := m.setup(vs); err != nil {
			m.log.Error("cannot adopt the voter configuration", "voters", vs.Voters, "error", err)
		}
		return
	}
	if m.cfg.BootstrapExpect == 0 {
		return
	}
	switch {
	case expecting > m.cfg.BootstrapExpect:
		m.log.Error("more nodes expect to bootstrap than BootstrapExpect; not forming a configuration",
			"expect", m.cfg.BootstrapExpect, "seen", names)
	case expecting == m.cfg.BootstrapExpect:
		slices.Sort(names)
		m.log.Info("bootstrapping the voter configuration", "voters", names)
		m.setFounders(founding(names).Voters)
		if err := m.setup(founding(names)); err != nil {
			m.log.Error("cannot bootstrap", "error", err)
		}
	}
}

// Join joins the mesh through the given gossip addresses and returns how
// many answered.
func (m *Mesh) Join(addrs ...string) (int, error) {
	if m.isClosed() {
		return 0, ErrClosed
	}
	n, err := m.ml.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("mesh: join: %w", err)
	}
	return n, nil
}

// Addr is this node's gossip address, the one other nodes use as a seed.
func (m *Mesh) Addr() string { return m.addr }

// Name is this node's name.
func (m *Mesh) Name() string { return m.cfg.Name }

// Leave releases every lease this node holds, tells the other nodes it is
// leaving, and shuts down. Waiters on other nodes get the released keys at
// once, without waiting for the leases to expire.
func (m *Mesh) Leave(ctx context.Context) error {
	if m.isClosed() {
		return ErrClosed
	}
	// No acquire starts from here on, and those waiting end: one granted
	// meanwhile is given back by the proposer (as for any cancelled
	// acquire), so that no lease outlives the leave.
	m.leaving.Store(true)
	m.nodeMu.Lock()
	if m.node != nil {
		ids := make([]quorum.OpID, 0, len(m.waiters))
		for id := range m.waiters {
			ids = append(ids, id)
		}
		for _, id := range ids {
			m.node.Cancel(id) // only acquires are cancelled
		}
	}
	var held []*Lease
	if m.node != nil {
		for _, t := range m.node.LeaseTags() {
			held = append(held, t.(*Lease))
		}
	}
	m.nodeMu.Unlock()
	m.drive(nil) // send what the cancellations want sent
	var wg sync.WaitGroup
	errs := make([]error, len(held))
	for i, l := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Release(ctx)
		}()
	}
	wg.Wait()
	m.leaveGossip(ctx)
	m.Shutdown()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("mesh: leave: releasing a lease: %w", err)
		}
	}
	return nil
}

// leaveGossip tells the other nodes that this one leaves. memberlist waits
// until its leave message has been gossiped, and returns at once when no
// other node is alive; but when the last other nodes leave at the same
// moment, it may count one as alive as it begins, then find nobody to
// gossip to and wait out its whole timeout. So it is waited for only while
// another node is alive. memberlist v0.7 may also lose the message from
// its queue (an id reused after the queue emptied: hashicorp/memberlist
// pull request 263), and then waits out the timeout too. Either way the
// others see this node leave, or fail: nothing an operator need act on.
func (m *Mesh) leaveGossip(ctx context.Context) {
	timeout := 3 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	m.publishMu.Lock()
	m.left = true
	m.publishMu.Unlock()
	done := make(chan error, 1)
	go func() { done <- m.ml.Leave(max(timeout, 0)) }() // returns by its timeout
	tick := time.NewTicker(m.gossip)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				m.log.Info("left gossip without word that another node heard it: they will see this node fail rather than leave", "error", err)
			}
			return
		case <-tick.C:
			// This node counts itself until its Leave has marked it left,
			// so none counted means that Leave has begun: Shutdown may
			// follow (memberlist panics on a Leave begun after it).
			if m.ml.NumMembers() == 0 {
				m.log.Debug("left gossip; no other node is alive to hear it")
				return
			}
		}
	}
}

// Shutdown stops the node at once, without releasing its leases (other
// nodes take them over when they expire, as after a crash). Operations in
// progress fail with ErrClosed; every lease reports ErrClosed. Idempotent.
func (m *Mesh) Shutdown() error {
	m.closeOnce.Do(func() {
		close(m.closed)
		m.clock.lead.detach(m)
		m.ml.Shutdown()
		m.tr.Close()
		m.wg.Wait()
		m.nodeMu.Lock()
		for id, ch := range m.waiters {
			ch <- outcome{err: ErrClosed}
			delete(m.waiters, id)
		}
		if m.node != nil {
			for _, t := range m.node.LeaseTags() {
				l := t.(*Lease)
				l.end(ErrClosed)
				m.node.TagLease(l.key, l.token, nil)
			}
		}
		m.nodeMu.Unlock()
		m.dd.close()
	})
	return nil
}

func (m *Mesh) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// openDataDir opens Config.DataDir and checks that what it holds is this
// node's, of this mesh.
func (m *Mesh) openDataDir() error {
	dd, st, err := openDataDir(m.cfg.DataDir, m.cfg.Name)
	if err != nil {
		return err
	}
	if st != nil && len(m.cfg.Voters) > 0 {
		if want := founding(m.cfg.Voters).Cluster(); st.cluster() != want {
			dd.close()
			return fmt.Errorf("%w %s belongs to the mesh founded by voters %q, but Config.Voters is %q: nothing was changed (Voters must stay the founding list, even after voter changes; or use a new directory)",
				ErrDataDir, m.cfg.DataDir, st.Founders, m.cfg.Voters)
		}
	}
	if st != nil && st.State.Membership.ID == 0 {
		dd.close()
		return fmt.Errorf("%w %s: the saved state names no voter configuration", ErrDataDir, m.cfg.DataDir)
	}
	if st != nil && st.State.Voted && m.cfg.NewMesh {
		dd.close()
		return fmt.Errorf("%w: %s shows that this voter has voted, so the mesh is not new: nothing was changed (remove NewMesh, -new-mesh, LOCKMESH_NEW_MESH; it is for a mesh's first start only)",
			ErrNotNewMesh, m.cfg.DataDir)
	}
	m.dd, m.saved = dd, st
	if st != nil {
		m.log.Info("data directory", "path", m.cfg.DataDir, "voted", st.State.Voted,
			"voters", st.State.Membership.Voters, "version", st.State.Membership.Version())
	} else {
		m.log.Info("data directory is new", "path", m.cfg.DataDir)
	}
	return nil
}
