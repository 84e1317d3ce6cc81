package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
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
}

func newCluster(voters []string, verbose bool) *cluster {
	return &cluster{
		voters:  voters,
		nodes:   make(map[string]*mesh.Mesh),
		configs: make(map[string]*mesh.Config),
		verbose: verbose,
	}
}

// start starts node name and has it join the nodes already running. The
// ports are free ones picked by the system.
func (c *cluster) start(name string) (*mesh.Mesh, error) {
	cfg := mesh.DefaultLocalConfig() // loopback, free ports, 1s TTL
	cfg.Name = name
	cfg.Voters = c.voters
	cfg.Seeds = c.seeds(name)
	if c.verbose {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: os.Stderr})
	}
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
// gossip and every voter among them has left its start-up quarantine.
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
		if st.Voting != "" && st.Voting != "live" {
			return false, fmt.Sprintf("%s is %s", n, st.Voting)
		}
		alive := map[string]bool{}
		for _, mem := range st.Members {
			if mem.State == "alive" {
				alive[mem.Name] = true
			}
		}
		for _, o := range names {
			if !alive[o] {
				return false, fmt.Sprintf("%s does not see %s alive yet", n, o)
			}
		}
	}
	return true, ""
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
