package main

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// contention is a hand-over case beside the lockmesh row's (8 goroutines
// spread over 3 voters): only the contended key is measured, on a mesh of
// its own.
type contention struct {
	voters, nonVoters int
	workers           int
	// node(i) is the index of the node goroutine i runs on.
	node  func(i int) int
	setup string
	// fair: report how the grants went to the nodes.
	fair bool
}

// contentionCases are the hand-over cases: every node a waiter
// on one key, one node with every waiter, and a symmetric mix of both for
// fairness.
var contentionCases = map[string]contention{
	"lockmesh-8nodes": {
		voters: 3, nonVoters: 5, workers: 8, node: func(i int) int { return i },
		setup: "lockmesh, 8 nodes in 1 process (3 voters v1–v3, 5 non-voters n4–n8), loopback TCP, state in memory, DefaultConfig timing (TTL 10 s, round timeout 250 ms); hand-over only: 8 nodes × 1 goroutine on one key",
	},
	"lockmesh-1node": {
		voters: 3, workers: 8, node: func(int) int { return 0 },
		setup: "lockmesh, 3 voters in 1 process, loopback TCP, state in memory, DefaultConfig timing (TTL 10 s, round timeout 250 ms); hand-over only: 8 goroutines on one key, all on v1",
	},
	"lockmesh-fair": {
		voters: 3, workers: 9, node: func(i int) int { return i % 3 }, fair: true,
		setup: "lockmesh, 3 voters in 1 process, loopback TCP, state in memory, DefaultConfig timing (TTL 10 s, round timeout 250 ms); hand-over only: 3 nodes × 3 goroutines on one key, grants per node",
	},
}

// lockmeshContention runs one of contentionCases.
func lockmeshContention(ctx context.Context, o options, name string) workload.Row {
	cc := contentionCases[name]
	row := workload.Row{Case: name, Setup: cc.setup}
	start := time.Now()
	c, err := startMixedCluster(ctx, cc.voters, cc.nonVoters, lanTiming)
	if err != nil {
		row.Error = fmt.Sprintf("start: %v", err)
		return row
	}
	defer c.close()
	row.Notes = append(row.Notes, fmt.Sprintf("cluster ready (all voters live, every node seeing every other) in %.1fs", time.Since(start).Seconds()))
	var nodes []string
	seen := map[int]bool{}
	for i := range cc.workers {
		if n := cc.node(i); !seen[n] {
			seen[n] = true
			nodes = append(nodes, c.nodes[n].Name())
		}
	}
	placement := fmt.Sprintf("%d goroutines on %d nodes", cc.workers, len(nodes))
	if len(nodes) == 1 {
		placement = fmt.Sprintf("%d goroutines on 1 node (%s)", cc.workers, nodes[0])
	}
	holds, err := workload.Contend(ctx, cc.workers, o.duration, o.hold, o.maxHolds(), "bench/handover",
		func(i int) (workload.Locker, error) { return meshLocker{c.nodes[cc.node(i)]}, nil },
		func(i int) string { return fmt.Sprintf("%s/%d", c.nodes[cc.node(i)].Name(), i) })
	row.Handover = workload.Handovers(holds, cc.workers, placement)
	if cc.fair {
		row.Handover.Fairness = workload.FairnessOf(holds, nodes, workload.NodeOf)
	}
	if err != nil {
		row.Error = fmt.Sprintf("hand-over: %v", err)
	}
	return row
}
