package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/quorum"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// What the scale case reads off a running mesh besides the workload's own
// figures: the process's CPU while idle, pairs finished second by second,
// the nodes' counters and proposer statistics.

// watchCounters reads every node's counters now (through its Prometheus
// collector); the function it returns notes in row how much each counter
// that is not the work itself grew since, added up over the nodes.
func watchCounters(nodes []*mesh.Mesh) (func(row *workload.Row), error) {
	reg := prometheus.NewRegistry()
	for _, m := range nodes {
		if err := reg.Register(m.Collector()); err != nil {
			return nil, err
		}
	}
	before, err := counterTotals(reg)
	if err != nil {
		return nil, err
	}
	return func(row *workload.Row) {
		after, err := counterTotals(reg)
		if err != nil {
			row.Notes = append(row.Notes, fmt.Sprintf("counters not read: %v", err))
			return
		}
		for name, v := range after {
			if !busyCounter[name] {
				// Zeros too: -merge takes medians, and a missing run is not a zero.
				row.Figures[figCounter+name] = v - before[name]
			}
		}
	}, nil
}

// proposerTotals adds up the nodes' proposer counters.
func proposerTotals(nodes []*mesh.Mesh) quorum.ProposerStats {
	var t quorum.ProposerStats
	for _, m := range nodes {
		p := m.Status().Proposer
		t.Rounds += p.Rounds
		t.Timeouts += p.Timeouts
	}
	return t
}

// idleCPU is the CPU this process uses over d while nothing takes locks,
// in percent of one core: gossip, readiness probes, timers.
func idleCPU(ctx context.Context, d time.Duration) (float64, error) {
	before, err := workload.SelfCPU()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d): // the measuring window itself, not a wait for an event
	}
	after, err := workload.SelfCPU()
	return 100 * float64(after-before) / float64(time.Since(t0)), err
}

// busyCounter are the counters that count the work itself, not trouble:
// the scale row lists the others that moved during the run.
var busyCounter = map[string]bool{
	"lockmesh_leases_granted_total": true, "lockmesh_messages_sent_total": true,
	"lockmesh_messages_received_total": true, "lockmesh_bytes_sent_total": true,
	"lockmesh_bytes_received_total": true, "lockmesh_send_queued_total": true,
}

// counterTotals adds up every counter family of reg over its series (the
// nodes).
func counterTotals(reg *prometheus.Registry) (map[string]float64, error) {
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil {
				out[f.GetName()] += c.GetValue()
			}
		}
	}
	return out, nil
}

// watchRate samples *done every second until the function it returns is
// called, which returns the increase in each whole second.
func watchRate(ctx context.Context, done *atomic.Int64) func() []float64 {
	stop := make(chan struct{})
	res := make(chan []float64, 1)
	go func() {
		var rates []float64
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := done.Load()
		for {
			select {
			case <-tick.C:
				n := done.Load()
				rates = append(rates, float64(n-last))
				last = n
			case <-stop:
				res <- rates
				return
			case <-ctx.Done():
				res <- rates
				return
			}
		}
	}()
	return func() []float64 {
		close(stop)
		return <-res
	}
}
