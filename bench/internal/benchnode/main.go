// Command benchnode is one lockmesh node for the bench program's rows that
// run in separate OS processes (lockmesh-procs, renewal):
// mesh.DefaultLocalConfig on loopback with free ports, driven by the line
// protocol of package nodecmd on stdin and stdout.
//
// examples/node does not fit those rows: it runs one command at a time, so
// 64 goroutines cannot take locks at once, and timing through its
// terminal protocol would add a pipe round trip to every operation.
//
//	go build -o /tmp/benchnode ./bench/internal/benchnode
//	/tmp/benchnode -name v1 -voters v1,v2,v3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/lockmesh/lockmesh/bench/internal/nodecmd"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

func main() {
	name := flag.String("name", "", "node name")
	voters := flag.String("voters", "", "comma list of voter names")
	seeds := flag.String("seeds", "", "comma list of gossip addresses to join")
	withMetrics := flag.Bool("metrics", false, "keep the mesh's counters in memory (for the stats command; costs CPU on every message)")
	logLevel := flag.String("log", "", "log the mesh's messages at this level and above (warn, info, debug) to stderr; none when empty")
	lanTiming := flag.Bool("lan-timing", false, "lease timing and round timeout of mesh.DefaultConfig (TTL 10s, round timeout 250ms) instead of DefaultLocalConfig's (TTL 1s, 50ms)")
	flag.Parse()
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = *name
	cfg.Voters = strings.Split(*voters, ",")
	if *seeds != "" {
		cfg.Seeds = strings.Split(*seeds, ",")
	}
	if *logLevel != "" {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: *name, Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	}
	if *lanTiming {
		cfg.Timing = lease.DefaultTiming()
		cfg.RoundTimeout = 250 * time.Millisecond
	}
	var sink *metrics.InmemSink
	if *withMetrics {
		// One interval for the node's whole life, every interval kept:
		// counters read as running totals.
		sink = metrics.NewInmemSink(10*time.Second, 24*time.Hour)
		cfg.MetricSink = sink
	}
	m, err := mesh.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchnode:", err)
		os.Exit(1)
	}
	// quit stops the node like a crash (no release): the bench ends it.
	nodecmd.Serve(context.Background(), m, len(cfg.Voters), sink, os.Stdin, os.Stdout)
	m.Shutdown()
}
