package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/mesh"
)

// cluster is the demo's nodes, all in this process, each with its own
// gossip (memberlist) and ballot (TCP) ports on loopback.
type cluster struct {
	voters  []string
	nodes   map[string]*mesh.Mesh
	configs map[string]*mesh.Config
	verbose bool
	rebinds *rebinds
}

func newCluster(voters []string, verbose bool) *cluster {
	return &cluster{
		voters:  voters,
		nodes:   make(map[string]*mesh.Mesh),
		configs: make(map[string]*mesh.Config),
		verbose: verbose,
		rebinds: &rebinds{seen: make(map[[2]string]time.Time), changed: make(chan struct{})},
	}
}

// start starts node name and has it join the nodes already running. The
// ports are free ones picked by the system.
func (c *cluster) start(name string) (*mesh.Mesh, error) {
	cfg := mesh.DefaultLocalConfig() // loopback, free ports, 1s TTL
	cfg.Name = name
	cfg.Voters = c.voters
	cfg.Seeds = c.seeds(name)
	opts := &hclog.LoggerOptions{Name: name, Level: hclog.Off}
	if c.verbose {
		opts.Level, opts.Output = hclog.Debug, os.Stderr
	}
	logger := hclog.NewInterceptLogger(opts)
	logger.RegisterSink(c.rebinds.sink(name))
	cfg.Logger = logger
	m, err := mesh.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting node %s: %w", name, err)
	}
	c.nodes[name] = m
	c.configs[name] = cfg
	return m, nil
}

// restart starts node name again after a crash, on the same gossip and
// ballot ports (gossip knows a node by name and address). The new node
// remembers nothing of the old one.
func (c *cluster) restart(name string, old mesh.Status) (*mesh.Mesh, error) {
	cfg := *c.configs[name]
	_, port, err := splitPort(old.Addr)
	if err != nil {
		return nil, err
	}
	cfg.BindPort = port
	cfg.RPCAddr = old.RPCAddr
	cfg.Seeds = c.seeds(name)
	m, err := mesh.New(&cfg)
	if err != nil {
		return nil, fmt.Errorf("restarting node %s: %w", name, err)
	}
	c.nodes[name] = m
	return m, nil
}

// seeds are the gossip addresses of the other running nodes.
func (c *cluster) seeds(except string) []string {
	var out []string
	for n, m := range c.nodes {
		if n != except {
			out = append(out, m.Addr())
		}
	}
	return out
}

// waitReady waits until every node in names sees all of them alive in
// gossip and knows every voter among them live: each such voter answered
// its probes, saying it votes. A node's own view is not enough: a
// restarted voter votes once its quarantine is over, but the others take
// its ballots only once they have checked that its new process is the one
// gossip names, and until then they cannot form a majority with it.
func (c *cluster) waitReady(ctx context.Context, names ...string) error {
	for {
		ready, why := c.ready(names)
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes %v not ready: %s: %w", names, why, ctx.Err())
		case <-time.After(10 * time.Millisecond): // polling Status
		}
	}
}

func (c *cluster) ready(names []string) (bool, string) {
	for _, n := range names {
		st := c.nodes[n].Status()
		if st.VotingState != mesh.NotVoter && st.VotingState != mesh.Live {
			return false, fmt.Sprintf("%s is %s", n, st.VotingState)
		}
		alive := map[string]bool{}
		for _, mem := range st.Members {
			if mem.State == "alive" {
				alive[mem.Name] = true
			}
		}
		live := map[string]bool{}
		for _, v := range st.LiveVoters {
			live[v] = true
		}
		for _, o := range names {
			if !alive[o] {
				return false, fmt.Sprintf("%s does not see %s alive yet", n, o)
			}
			if slices.Contains(st.Voters, o) && !live[o] {
				return false, fmt.Sprintf("%s does not know voter %s live yet", n, o)
			}
		}
	}
	return true, ""
}

// rebinds notes when a node starts taking a restarted peer's ballots.
// A restarted node votes once its quarantine is over, but each other node
// takes its ballots only once it has checked that the new process is the
// one gossip names; until then the two cannot form a majority together.
// No API says when that is done: a
// node logs it, at info level, so the demo reads its logs.
type rebinds struct {
	mu      sync.Mutex
	seen    map[[2]string]time.Time // node, peer → when node last rebound peer
	changed chan struct{}           // closed and replaced at every note
}

// rebindMessage is what mesh logs when a peer's ballots move to its new
// process (mesh/identity.go).
const rebindMessage = "a node restarted: its ballots go to its new process"

// sink is the log sink of node: it notes each peer node rebinds.
func (r *rebinds) sink(node string) hclog.SinkAdapter { return &rebindSink{r, node} }

type rebindSink struct {
	r    *rebinds
	node string
}

func (s *rebindSink) Accept(_ string, _ hclog.Level, msg string, args ...any) {
	if msg != rebindMessage {
		return
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "peer" {
			s.r.note(s.node, fmt.Sprint(args[i+1]))
		}
	}
}

func (r *rebinds) note(node, peer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[[2]string{node, peer}] = time.Now()
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait waits until every node of others has rebound peer since since, and
// returns when the last one did.
func (r *rebinds) wait(ctx context.Context, peer string, since time.Time, others []string) (time.Time, error) {
	for {
		r.mu.Lock()
		var last time.Time
		missing := ""
		for _, n := range others {
			at := r.seen[[2]string{n, peer}]
			if at.Before(since) {
				missing = n
				break
			}
			if at.After(last) {
				last = at
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if missing == "" {
			return last, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s does not take %s's ballots yet: %w", missing, peer, ctx.Err())
		}
	}
}

// shutdown stops every node still running.
func (c *cluster) shutdown() {
	for _, m := range c.nodes {
		m.Shutdown()
	}
}

func splitPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	return host, p, err
}
