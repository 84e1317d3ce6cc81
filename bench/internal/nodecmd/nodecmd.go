// Package nodecmd is the line protocol between the bench program and the
// lockmesh node processes it starts for the "separate OS processes" row
// (bench/internal/benchnode). The workloads run inside the node process,
// timed there, so that the figures include no pipe round trip: the caller
// sits on a voter, as in the in-process row.
//
// The bench writes one command a line on the node's stdin, "ID VERB ARGS";
// the node runs each command in its own goroutine and answers with one JSON
// object (a Reply) a line on stdout, carrying the same ID. Before any
// command it prints {"event":"started",...} with its addresses.
//
//	1 ready 30s                      wait until this node votes and sees every voter
//	2 join ADDR,ADDR                 join gossip through these addresses
//	3 latency N WARMUP KEY           Acquire+Release KEY N times
//	4 throughput WORKERS DURATION    WORKERS goroutines, each on its own key
//	5 contend WORKERS DURATION HOLD MAXHOLDS KEY   WORKERS goroutines on KEY
//	6 hold N PREFIX                  take leases PREFIX/0.. until N are held, and keep them
//	7 stats                          counters, live heap, leases held and lost
//	8 cpuprofile FILE DURATION       write a CPU profile of the next DURATION to FILE
//	9 heapprofile FILE               write a heap profile (after a collection) to FILE
//	10 quit                          stop at once
package nodecmd

import (
	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// Reply is one line a node prints.
type Reply struct {
	ID    int    `json:"id,omitempty"`
	Event string `json:"event,omitempty"` // "started" (no ID)
	Error string `json:"error,omitempty"`

	Addr string `json:"addr,omitempty"` // started: gossip address
	RPC  string `json:"rpc,omitempty"`  // started: ballot address

	Latency    *workload.Summary          `json:"latency,omitempty"`
	Throughput *workload.ThroughputResult `json:"throughput,omitempty"`
	Holds      []workload.Hold            `json:"holds,omitempty"`

	// hold: how long taking the new leases took.
	Seconds float64 `json:"seconds,omitempty"`
	// hold and stats: leases this node took with hold, and how many of
	// them it has lost (Done closed).
	Held int `json:"held,omitempty"`
	Lost int `json:"lost,omitempty"`
	// stats: the mesh's counters as running totals (for example
	// "messages.sent"; empty unless the node runs with -metrics), and the
	// live heap after a collection.
	Counters  map[string]float64 `json:"counters,omitempty"`
	HeapBytes uint64             `json:"heap_bytes,omitempty"`
}
