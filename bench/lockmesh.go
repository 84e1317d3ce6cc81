package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockmesh/lockmesh/mesh"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// lockmeshInProcess measures a mesh of voters in this process over real
// TCP on loopback, the caller on a voter (v1). Hand-over spreads its 8
// contenders over every node, so most hand-overs cross nodes.
//
// With disk, each voter keeps its durable state in a data directory of its
// own under the system's temporary directory (Config.DataDir: fsynced
// before the act it records, once per reserved block of tokens on the
// lock path).
func lockmeshInProcess(ctx context.Context, o options, name string, voters int, disk bool) workload.Row {
	state := "state in memory (no disk, no fsync)"
	if disk {
		state = "voter state in a data dir (Config.DataDir on " + os.TempDir() + ", fsync on)"
	}
	setup := fmt.Sprintf("lockmesh, %d voters in 1 process, loopback TCP, %s, DefaultConfig timing (TTL 10 s, round timeout 250 ms), caller on voter v1", voters, state)
	row := workload.Row{Case: name, Setup: setup}
	tweak := lanTiming
	if disk {
		dir, err := os.MkdirTemp("", "lockmesh-bench")
		if err != nil {
			row.Error = err.Error()
			return row
		}
		defer os.RemoveAll(dir)
		tweak = func(cfg *mesh.Config) {
			lanTiming(cfg)
			cfg.DataDir = filepath.Join(dir, cfg.Name)
		}
	}
	start := time.Now()
	c, err := startClusterWith(ctx, voters, tweak)
	if err != nil {
		row.Error = fmt.Sprintf("start: %v", err)
		return row
	}
	defer c.close()
	row.Notes = append(row.Notes, fmt.Sprintf("cluster ready (all voters live) in %.1fs", time.Since(start).Seconds()))
	if l, err := c.nodes[0].Acquire(ctx, "bench/first"); err == nil {
		row.Notes = append(row.Notes, fmt.Sprintf("first grant %.3fs after the first node started", time.Since(start).Seconds()))
		l.Release(ctx)
	}

	caller := meshLocker{c.nodes[0]}
	err = workload.MeasureLocks(ctx, o.params(), workload.Service{
		Caller:        caller,
		Worker:        func(i int) (workload.Locker, error) { return caller, nil },
		Contender:     func(i int) (workload.Locker, error) { return meshLocker{c.nodes[i%voters]}, nil },
		ContenderName: func(i int) string { return fmt.Sprintf("%s/%d", c.nodes[i%voters].Name(), i) },
		Placement:     fmt.Sprintf("%d goroutines spread over the %d voters (goroutine i on v(i mod %d)+1)", o.handoverWorkers, voters, voters),
		CPU:           []workload.CPUSource{workload.Self(fmt.Sprintf("bench (%d voters and the caller)", voters))},
	}, &row)
	if err != nil {
		row.Error = err.Error()
	}
	return row
}
