// Command peers measures the lock services lockmesh is compared with —
// hashicorp/raft, etcd and Redlock — with the same workloads as the main
// bench program (package bench/internal/workload), and prints one JSON row
// on stdout. The main program (go run ./bench) builds and runs it once per
// case; it lives in its own module so that lockmesh's go.mod stays small.
//
//	cd bench/peers && go run . -case etcd -n 2000 -duration 5s
//
// Cases: raft, raft-tcp, etcd, etcd-nofsync, redlock. Progress and the
// peers' own logs go to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

func main() {
	name := flag.String("case", "", "raft, raft-tcp, etcd, etcd-nofsync or redlock")
	var p workload.Params
	flag.IntVar(&p.N, "n", 2000, "latency: timed Acquire+Release pairs")
	flag.IntVar(&p.Warmup, "warmup", 100, "latency: untimed pairs first")
	flag.DurationVar(&p.LatencyBudget, "latency-budget", time.Minute, "latency: stop after this long")
	flag.DurationVar(&p.Duration, "duration", 5*time.Second, "throughput and hand-over run time")
	flag.IntVar(&p.Workers, "workers", 64, "throughput goroutines, each on its own key")
	flag.IntVar(&p.Contenders, "handover-workers", 8, "hand-over goroutines on one key")
	flag.DurationVar(&p.Hold, "hold", time.Millisecond, "hand-over: how long a holder keeps the key")
	flag.IntVar(&p.MaxHolds, "max-holds", 2000, "hand-over: stop after this many grants")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on the whole case")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	var row workload.Row
	switch *name {
	case "raft":
		row = runRaft(ctx, p, false)
	case "raft-tcp":
		row = runRaft(ctx, p, true)
	case "etcd":
		row = runEtcd(ctx, p, false)
	case "etcd-nofsync":
		row = runEtcd(ctx, p, true)
	case "redlock":
		row = runRedlock(ctx, p)
	default:
		fmt.Fprintf(os.Stderr, "peers: unknown -case %q\n", *name)
		os.Exit(2)
	}
	row.Case = *name
	row.Seconds = time.Since(start).Seconds()
	row.Versions = versions()
	b, err := json.Marshal(row)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(b, '\n'))
}

// versions are the versions of the measured modules compiled in.
func versions() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = bi.GoVersion
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/hashicorp/raft", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/client/v3",
			"github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9":
			out[d.Path] = d.Version
		}
	}
	return out
}

// logf reports progress on stderr (the main program prefixes the case).
func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
