package workload

import (
	"context"
	"fmt"
	"time"
)

// Params are the sizes of the workloads: the same for every row of a run.
type Params struct {
	N             int           // latency: timed operations
	Warmup        int           // latency: untimed operations first
	LatencyBudget time.Duration // latency: stop after this long
	Duration      time.Duration // throughput and hand-over: run time
	Workers       int           // throughput: goroutines, each on its own key
	Contenders    int           // hand-over: goroutines on one key
	Hold          time.Duration // hand-over: how long a holder keeps the key
	MaxHolds      int           // hand-over: stop after this many grants
}

// Service is a lock service set up for the three workloads.
type Service struct {
	// Caller takes the uncontended key of the latency workload.
	Caller Locker
	// Worker(i) is the throughput workload's goroutine i.
	Worker func(i int) (Locker, error)
	// Contender(i) is the hand-over workload's goroutine i, and
	// ContenderName(i) a name unique to it that says where it runs.
	Contender     func(i int) (Locker, error)
	ContenderName func(i int) string
	// Placement says where the contenders run, for the table's notes.
	Placement string
	// CPU lists every process the service runs in.
	CPU []CPUSource
}

// MeasureLocks runs the three workloads on s and fills row: latency of
// Acquire+Release of one key; throughput of p.Workers goroutines, each on
// its own key; hand-over among p.Contenders goroutines on one key. It stops
// at the first workload that fails.
func MeasureLocks(ctx context.Context, p Params, s Service, row *Row) error {
	lat, err := Latency(ctx, p.N, p.Warmup, p.LatencyBudget, AcquireRelease(s.Caller, "bench/latency"))
	row.Latency = lat
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	tp, err := Throughput(ctx, p.Workers, p.Duration, func(i int) (Op, error) {
		l, err := s.Worker(i)
		if err != nil {
			return nil, err
		}
		return AcquireRelease(l, fmt.Sprintf("bench/tput/%d", i)), nil
	}, s.CPU)
	row.Throughput = tp
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	holds, err := Contend(ctx, p.Contenders, p.Duration, p.Hold, p.MaxHolds, "bench/handover", s.Contender, s.ContenderName)
	row.Handover = Handovers(holds, p.Contenders, s.Placement)
	if err != nil {
		return fmt.Errorf("hand-over: %w", err)
	}
	return nil
}
