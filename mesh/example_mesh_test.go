package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/lockmesh/lockmesh/mesh"
)

// startLocal starts nodes on loopback, each joining the first, that found
// a mesh of the given voters (none: they learn them from the others), and
// waits until each is ready. In production each node is a process of its
// own, on its own machine, with cfg := mesh.DefaultConfig().
func startLocal(voters []string, names ...string) []*mesh.Mesh {
	var nodes []*mesh.Mesh
	for _, name := range names {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = voters
		if len(nodes) > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		m, err := mesh.New(cfg)
		if err != nil {
			panic(err)
		}
		nodes = append(nodes, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range nodes {
		if err := m.WaitReady(ctx); err != nil {
			panic(err)
		}
	}
	return nodes
}

func shutdown(nodes []*mesh.Mesh) {
	for _, m := range nodes {
		m.Shutdown()
	}
}

// A mesh of three voters: a lock taken on one node is seen held from the
// others, under its fencing token, and goes to the next holder, with a
// higher token, once released.
func Example_multiNode() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := a.Acquire(ctx, "reports/daily")
	if err != nil {
		panic(err)
	}
	h, _ := b.Holder(ctx, "reports/daily")
	fmt.Println("held by", h.Node, "under the lease's token:", h.Token == l.Token())
	_, err = b.TryAcquire(ctx, "reports/daily")
	var locked *mesh.LockedError
	fmt.Println("b's try finds it locked by", errors.As(err, &locked) && errors.Is(err, mesh.ErrLocked), locked.Holder)

	l.Release(ctx)
	l2, _ := b.Acquire(ctx, "reports/daily")
	fmt.Println("b holds it next, with a higher token:", l2.Token() > l.Token())
	l2.Release(ctx)
	// Output:
	// held by a under the lease's token: true
	// b's try finds it locked by true a
	// b holds it next, with a higher token: true
}

// WithTTL asks for a shorter (or, up to Config.MaxTTL, longer) lease
// than Config.Timing.TTL: a holder that stops renewing (paused,
// partitioned, dead) keeps the key from the others that long. Deadline,
// renewals and the loss notice scale with it.
func ExampleWithTTL() {
	nodes := startLocal([]string{"solo"}, "solo")
	defer shutdown(nodes)
	m := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := m.Acquire(ctx, "cache/warm", mesh.WithTTL(500*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	fmt.Println("TTL:", l.TTL())
	// The holder's share is shorter than the TTL, by the clock-rate bound
	// and a margin: the voters' timers outlast it.
	share := l.Deadline().Sub(l.Granted())
	fmt.Println("the holder may act for less than the TTL:", share > 400*time.Millisecond && share < 500*time.Millisecond)
	_, err = m.Acquire(ctx, "k", mesh.WithTTL(time.Hour))
	fmt.Println("above MaxTTL:", errors.Is(err, mesh.ErrInvalidOption))
	// Output:
	// TTL: 500ms
	// the holder may act for less than the TTL: true
	// above MaxTTL: true
}

// Logs go to the application's hclog logger, and metrics to its
// go-metrics sink (here one in memory; Prometheus, statsd and others
// plug in the same way, and Mesh.Collector serves Prometheus directly),
// labelled with the node's name.
func ExampleConfig_loggerAndMetrics() {
	logger := hclog.New(&hclog.LoggerOptions{Name: "app", Level: hclog.Warn, Output: os.Stderr})
	sink := metrics.NewInmemSink(time.Minute, time.Hour)

	cfg := mesh.DefaultLocalConfig()
	cfg.Name, cfg.Voters = "solo", []string{"solo"}
	cfg.Logger = logger // mesh logs as "app.lockmesh"; memberlist's logs too
	cfg.MetricSink = sink
	m, err := mesh.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, "k")
	if err != nil {
		panic(err)
	}
	l.Release(ctx)

	for _, iv := range sink.Data() {
		iv.RLock()
		for name, c := range iv.Counters {
			if strings.HasPrefix(name, "lockmesh.leases.granted") {
				fmt.Println(name, c.Count)
			}
		}
		iv.RUnlock()
	}
	// Output:
	// lockmesh.leases.granted;node=solo 1
}

// Growing a mesh: a new node starts without Voters (it learns the
// configuration from the mesh) and any node adds it; it votes at once.
// Voter changes need a data directory on every voter (Config.DataDir):
// a voter must not forget the configuration it accepted.
func ExampleMesh_AddVoter() {
	dir, err := os.MkdirTemp("", "lockmesh-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	start := func(name string, voters, seeds []string) *mesh.Mesh {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name, cfg.Voters, cfg.Seeds = name, voters, seeds
		cfg.DataDir = dir + "/" + name
		m, err := mesh.New(cfg)
		if err != nil {
			panic(err)
		}
		return m
	}
	a := start("a", []string{"a"}, nil)
	defer a.Shutdown()
	b := start("b", nil, []string{a.Addr()}) // no Voters: learned from a
	defer b.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		panic(err)
	}

	if err := a.AddVoter(ctx, "b"); err != nil {
		panic(err)
	}
	vs, _ := a.Voters() // b learns it too, moments later
	fmt.Println("voters:", vs.Voters, "pending:", vs.Pending)
	// Output:
	// voters: [a b] pending: false
}
