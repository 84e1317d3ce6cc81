//go:build linux

package faulttest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// clusterSpec describes the nodes of a scenario.
type clusterSpec struct {
	// voters form the voter configuration, the same on every node; others
	// are nodes that take locks without voting.
	voters, others []string
	// ttl is the lease TTL (default 1s); roundTimeout one ballot round's
	// wait (default: DefaultLocalConfig's); deadWindow memberlist's
	// GossipToTheDeadTime (default: memberlist's local 15s).
	ttl, roundTimeout, deadWindow time.Duration
	// lab, when set, runs each node in the lab's namespace of its name, on
	// fixed ports; otherwise every node runs on loopback, on ports picked
	// at its first start and kept across restarts.
	lab *netlab
	// viaProxy makes every node advertise a port of the lab's "proxy"
	// host, which relays (and shapes) all traffic between nodes.
	viaProxy bool
	// autopilot, when set, turns the autopilot on in every node with
	// these settings (zero fields: the library's defaults); noVote are
	// nodes started with Config.NoVote.
	autopilot *mesh.AutopilotConfig
	noVote    []string
	// dataDirs gives every node a data directory (Config.DataDir) kept
	// across its restarts; the autopilot and voter changes need them.
	dataDirs bool
	// notStarted are nodes newCluster does not start (a voter whose
	// machine is not up yet).
	notStarted []string
	// newMesh starts every node's first process with the operator's word
	// that the mesh is brand-new (Config.NewMesh): with data directories,
	// a majority of the voters founds it without the others.
	newMesh bool
	// binaries maps nodes to the node binary they start with (the
	// upgrade scenario's previous release); the others run this tree's.
	binaries map[string]string
}

// Fixed ports in a lab; the proxy relays port base+i to node i.
const (
	labGossipPort      = 7946
	labRPCPort         = 7947
	proxyGossipPortAt  = 8000
	proxyRPCPortAt     = 9000
	proxyHostOctet     = 254
	defaultTTL         = time.Second
	nodeStartAttempts  = 3
	wholeMeshTimeout   = 45 * time.Second
	closeGrace         = 10 * time.Second
	requestWaitAllowed = 30 * time.Second // beyond the request's own timeout
)

// cluster is a scenario's nodes, each an OS process (or down), and the
// history of what its clients did.
type cluster struct {
	t      *testing.T
	spec   clusterSpec
	bin    string
	logDir string
	hist   *history
	nodes  []*node
	proxy  *proc
	// dataRoot holds the nodes' data directories (clusterSpec.dataDirs).
	dataRoot string
}

// node is one lockmesh node: a name and addresses that outlive its
// processes.
type node struct {
	c     *cluster
	name  string
	voter bool
	index int
	// bind and rpc are where it listens, advGossip and advRPC what it
	// advertises through the proxy ("" without one).
	bind, rpc, advGossip, advRPC string
	// bin is the node binary its next process runs; wallBack sets its
	// next process's wall clock back (Config.WallClock).
	bin      string
	wallBack time.Duration

	mu      sync.Mutex
	p       *proc
	changed chan struct{} // closed when p changes
	starts  int
}

// newCluster starts every node, joins them all and waits until the mesh is
// whole (every node sees every other alive, every voter votes).
func newCluster(t *testing.T, spec clusterSpec) *cluster {
	t.Helper()
	if spec.ttl == 0 {
		spec.ttl = defaultTTL
	}
	c := &cluster{t: t, spec: spec, bin: nodeBinary(t), logDir: t.TempDir(), hist: &history{}, dataRoot: t.TempDir()}
	t.Cleanup(c.shutdown)
	for _, name := range spec.voters {
		c.newNode(name, true)
	}
	for _, name := range spec.others {
		c.newNode(name, false)
	}
	if spec.viaProxy {
		c.startProxy()
	}
	for _, n := range c.nodes {
		if slices.Contains(spec.notStarted, n.name) {
			continue
		}
		if err := c.start(n); err != nil {
			t.Fatal(err)
		}
	}
	c.joinAll()
	if took, err := c.waitWhole(wholeMeshTimeout); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("mesh of %d nodes whole %v after the last start", len(c.nodes), took.Round(time.Millisecond))
	}
	return c
}

func (c *cluster) newNode(name string, voter bool) *node {
	n := &node{c: c, name: name, voter: voter, index: len(c.nodes), changed: make(chan struct{}), bin: c.bin}
	if bin, ok := c.spec.binaries[name]; ok {
		n.bin = bin
	}
	if lab := c.spec.lab; lab != nil {
		if _, ok := lab.hosts[name]; !ok {
			lab.addHost(name, 100+n.index)
		}
		ip := lab.host(name).ip
		n.bind = ip + ":" + strconv.Itoa(labGossipPort)
		n.rpc = ip + ":" + strconv.Itoa(labRPCPort)
		if c.spec.viaProxy {
			proxy := labSubnet + strconv.Itoa(proxyHostOctet)
			n.advGossip = proxy + ":" + strconv.Itoa(proxyGossipPortAt+n.index)
			n.advRPC = proxy + ":" + strconv.Itoa(proxyRPCPortAt+n.index)
		}
	} else {
		n.bind = "127.0.0.1:0"
	}
	c.nodes = append(c.nodes, n)
	return n
}

// addNode starts a node that is not in the voter configuration and joins
// it to the mesh, as a scenario that changes the voters would.
func (c *cluster) addNode(name string) *node {
	c.t.Helper()
	n := c.newNode(name, false)
	if err := c.start(n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// seed is the gossip address the other nodes join n through ("" while
// unknown).
func (n *node) seed() string {
	switch {
	case n.advGossip != "":
		return n.advGossip
	case strings.HasSuffix(n.bind, ":0"):
		return ""
	}
	return n.bind
}

func (c *cluster) seeds(except *node) []string {
	var out []string
	for _, m := range c.nodes {
		if s := m.seed(); m != except && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// start starts a process for n, with the addresses of its earlier ones.
func (c *cluster) start(n *node) error {
	args := []string{"-name", n.name, "-bind", n.bind, "-voters", strings.Join(c.spec.voters, ","),
		"-ttl", c.spec.ttl.String(), "-seeds", strings.Join(c.seeds(n), ",")}
	if n.rpc != "" {
		args = append(args, "-rpc", n.rpc)
	}
	if n.advGossip != "" {
		args = append(args, "-advertise", n.advGossip, "-rpc-advertise", n.advRPC)
	}
	if c.spec.roundTimeout != 0 {
		args = append(args, "-round-timeout", c.spec.roundTimeout.String())
	}
	if c.spec.deadWindow != 0 {
		args = append(args, "-gossip-to-the-dead", c.spec.deadWindow.String())
	}
	if ap := c.spec.autopilot; ap != nil {
		args = append(args, "-autopilot", "-autopilot-dead-after", ap.DeadAfter.String(),
			"-autopilot-interval", ap.Interval.String(),
			"-autopilot-target", strconv.Itoa(ap.Target), "-autopilot-min", strconv.Itoa(ap.Min))
	}
	if slices.Contains(c.spec.noVote, n.name) {
		args = append(args, "-no-vote")
	}
	if c.spec.dataDirs {
		args = append(args, "-data-dir", filepath.Join(c.dataRoot, n.name))
	}
	n.mu.Lock()
	first := n.starts == 0
	n.mu.Unlock()
	if c.spec.newMesh && first {
		args = append(args, "-new-mesh") // the first start only, as an operator gives it
	}
	if n.wallBack != 0 {
		args = append(args, "-wall-back", n.wallBack.String())
	}
	n.mu.Lock()
	argv := append([]string{n.bin}, args...)
	n.mu.Unlock()
	if c.spec.lab != nil {
		argv = c.spec.lab.exec(n.name, argv...)
	}
	n.mu.Lock()
	n.starts++
	name := fmt.Sprintf("%s#%d", n.name, n.starts)
	n.mu.Unlock()
	var p *proc
	var err error
	// A port just freed by a killed process can be taken meanwhile;
	// retry a start that fails at once.
	for attempt := 0; attempt < nodeStartAttempts; attempt++ {
		p, err = startProc(name, argv, c.logPath(n.name), c.onReply(n), c.onExit(n))
		if err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", n.name, err)
	}
	n.mu.Lock()
	if strings.HasSuffix(n.bind, ":0") {
		n.bind, n.rpc = p.hello.Addr, p.hello.RPC // kept across restarts
	}
	n.p = p
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
	return nil
}

// upgrade stops n (it leaves: leases released, gossip told) and starts it
// again on bin, with the addresses of its earlier processes.
func (c *cluster) upgrade(n *node, bin string) error {
	c.leave(n)
	n.mu.Lock()
	n.bin = bin
	n.mu.Unlock()
	return c.start(n)
}

// startProxy starts the relay every node advertises: port 8000+i and
// 9000+i of the lab's "proxy" host forward to node i's gossip and ballot
// ports.
func (c *cluster) startProxy() {
	c.t.Helper()
	lab := c.spec.lab
	h := lab.addHost("proxy", proxyHostOctet)
	var maps []string
	for _, n := range c.nodes {
		maps = append(maps,
			fmt.Sprintf("%d=%s", proxyGossipPortAt+n.index, n.bind),
			fmt.Sprintf("%d=%s", proxyRPCPortAt+n.index, n.rpc))
	}
	argv := lab.exec("proxy", c.bin, "proxy", "-listen", h.ip, "-map", strings.Join(maps, ","))
	p, err := startProc("proxy", argv, c.logPath("proxy"), nil, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	c.proxy = p
}

func (c *cluster) logPath(name string) string { return filepath.Join(c.logDir, name+".log") }

// onReply records what a node's answers mean for the history: grants open
// intervals, ended events close them, writes go to the fence.
func (c *cluster) onReply(n *node) func(*proc, *pendingCall, control.Reply, int64) error {
	return func(p *proc, pc *pendingCall, r control.Reply, at int64) error {
		switch {
		case r.Event == control.EventEnded:
			c.hist.ended(p, r)
		case pc == nil || r.Err != "":
		case pc.req.Op == control.OpAcquire || pc.req.Op == control.OpTry:
			c.hist.granted(p, n.name, r.Key, r.Token, pc.callAt, r.At, r.Deadline)
		case pc.req.Op == control.OpWrite:
			return c.hist.wrote(n.name, r.Key, r.Token, at, pc.req.Stale)
		}
		return nil
	}
}

func (c *cluster) onExit(n *node) func(*proc) {
	return func(p *proc) {
		c.hist.exited(p, p.exitAt)
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.p == p {
			n.p = nil
			close(n.changed)
			n.changed = make(chan struct{})
		}
	}
}

// current returns n's process (nil while down) and a channel closed when
// that changes.
func (n *node) current() (*proc, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p, n.changed
}

func (n *node) proc() *proc {
	p, _ := n.current()
	return p
}

// do sends req to n and records the operation in the history.
func (c *cluster) do(n *node, client int, req control.Request) result {
	p := n.proc()
	if p == nil {
		return result{err: errDown}
	}
	wait := time.Duration(req.TimeoutMS)*time.Millisecond + requestWaitAllowed
	res := p.call(req, wait)
	c.hist.record(n.name, p.name, client, req, res)
	return res
}

// status asks n for its view of the mesh.
func (c *cluster) status(n *node) (*control.Status, error) {
	p := n.proc()
	if p == nil {
		return nil, errDown
	}
	res := p.call(control.Request{Op: control.OpStatus}, 5*time.Second)
	switch {
	case res.err != nil:
		return nil, res.err
	case res.r.Err != "" || res.r.Status == nil:
		return nil, fmt.Errorf("status: %s %s", res.r.Err, res.r.Msg)
	}
	return res.r.Status, nil
}

// joinAll asks every node to join every other: memberlist may otherwise
// take until its next push/pull to spread a join.
func (c *cluster) joinAll() {
	for _, n := range c.nodes {
		if p := n.proc(); p != nil {
			p.call(control.Request{Op: control.OpJoin, Seeds: c.seeds(n), TimeoutMS: 5000}, 10*time.Second)
		}
	}
}

// whole reports whether every running node sees every other running node
// alive and every running voter votes, and if not, why.
func (c *cluster) whole() (bool, string) {
	var running []*node
	for _, n := range c.nodes {
		if n.proc() != nil {
			running = append(running, n)
		}
	}
	for _, n := range running {
		st, err := c.status(n)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.name, err)
		}
		for _, m := range running {
			if m != n && st.Members[m.name] != "alive" {
				return false, fmt.Sprintf("%s sees %s as %q", n.name, m.name, st.Members[m.name])
			}
		}
		if n.voter && st.Voting != "live" {
			return false, fmt.Sprintf("voter %s is %q", n.name, st.Voting)
		}
	}
	return true, ""
}

// waitWhole waits until the mesh is whole and returns how long that took.
func (c *cluster) waitWhole(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := c.whole()
		if ok {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("the mesh is not whole after %v: %s", timeout, why)
		}
		<-tick.C
	}
}

// kill sends SIGKILL to n's process and waits until it is gone.
func (c *cluster) kill(n *node) {
	c.t.Helper()
	p := n.proc()
	if p == nil {
		c.t.Fatalf("kill %s: not running", n.name)
	}
	p.kill()
}

// leave makes n release its leases and leave the mesh, and waits for its
// exit.
func (c *cluster) leave(n *node) {
	c.t.Helper()
	p := n.proc()
	if p == nil {
		c.t.Fatalf("leave %s: not running", n.name)
	}
	res := p.call(control.Request{Op: control.OpLeave}, closeGrace)
	if res.err == nil && res.r.Err != "" {
		c.t.Logf("%s left with an error: %s %s", n.name, res.r.Err, res.r.Msg)
	}
	timer := time.NewTimer(closeGrace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		c.t.Errorf("%s did not exit within %v of leaving; killing it", n.name, closeGrace)
		p.kill()
	}
}

// finish stops every process (each node reports how its leases ended) and
// checks the history.
func (c *cluster) finish() summary {
	c.t.Helper()
	c.stopAll()
	return verify(c.t, c.hist)
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if p := n.proc(); p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.close(closeGrace)
			}()
		}
	}
	wg.Wait()
}

// shutdown is the cleanup: every process stopped, the logs checked for
// data races, and shown when the test failed.
func (c *cluster) shutdown() {
	c.stopAll()
	if c.proxy != nil {
		c.proxy.close(closeGrace)
	}
	names := make([]string, 0, len(c.nodes)+1)
	for _, n := range c.nodes {
		names = append(names, n.name)
	}
	if c.proxy != nil {
		names = append(names, "proxy")
	}
	for _, name := range names {
		lines := readLines(c.logPath(name))
		if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "WARNING: DATA RACE") }); i >= 0 {
			c.t.Errorf("node %s reported a data race:\n%s", name, strings.Join(lines[i:min(len(lines), i+80)], "\n"))
		}
		if c.t.Failed() {
			c.t.Logf("last lines of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
