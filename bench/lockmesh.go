package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// lockmeshInProcess measures a mesh of voters in this process over real
// TCP on loopback, the caller on a voter (v1). Hand-over spreads its 8
// contenders over every node, so most hand-overs cross nodes.
func lockmeshInProcess(ctx context.Context, o options, name string, voters int) workload.Row {
	setup := fmt.Sprintf("lockmesh, %d voters in 1 process, loopback TCP, state in memory (no disk, no fsync), DefaultConfig timing (TTL 10 s, round timeout 250 ms), caller on voter v1", voters)
	row := workload.Row{Case: name, Setup: setup}
	start := time.Now()
	c, err := startClusterWith(ctx, voters, lanTiming)
	if err != nil {
		row.Error = fmt.Sprintf("start: %v", err)
		return row
	}
	defer c.close()
	row.Notes = append(row.Notes, fmt.Sprintf("cluster ready (all voters live) in %.1fs", time.Since(start).Seconds()))

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
