package workload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// CPUSource reads the CPU time (user + system) a process has used so far.
type CPUSource struct {
	Name string
	Read func() (time.Duration, error)
}

// ThroughputResult is what Throughput measured.
type ThroughputResult struct {
	Workers   int     `json:"workers"`
	Seconds   float64 `json:"seconds"` // from the start until the last worker stopped
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// CPUMicrosPerOp is the CPU time of every process listed in CPU, added
	// up, divided by Ops.
	CPUMicrosPerOp float64      `json:"cpu_us_per_op"`
	CPU            []ProcessCPU `json:"cpu"`
	Errors         int64        `json:"errors"`
	FirstError     string       `json:"first_error,omitempty"`
}

// ProcessCPU is the CPU time one process used during a run.
type ProcessCPU struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"cpu_seconds"`
}

// Throughput runs workers goroutines, each repeating its own op (made by
// newOp, for example Acquire+Release of its own key) until d has passed.
// Workers are told to stop between operations rather than cancelled in the
// middle of one, so every counted operation finished; the elapsed time runs
// until the last one did. A worker whose op fails stops; the errors are
// counted and the first is kept. cpu lists the processes whose CPU time the
// service uses (this one, and servers in other processes).
func Throughput(ctx context.Context, workers int, d time.Duration, newOp func(worker int) (Op, error), cpu []CPUSource) (*ThroughputResult, error) {
	ops := make([]Op, workers)
	for i := range ops {
		op, err := newOp(i)
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		ops[i] = op
	}
	before, err := readCPU(cpu)
	if err != nil {
		return nil, err
	}
	var (
		stop     atomic.Bool
		count    atomic.Int64
		errCount atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				if err := op(ctx); err != nil {
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := readCPU(cpu)
	if err != nil {
		return nil, err
	}
	res := &ThroughputResult{
		Workers: workers,
		Seconds: elapsed.Seconds(),
		Ops:     count.Load(),
		Errors:  errCount.Load(),
	}
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	var total time.Duration
	for i, src := range cpu {
		used := after[i] - before[i]
		total += used
		res.CPU = append(res.CPU, ProcessCPU{Name: src.Name, Seconds: used.Seconds()})
	}
	if res.Ops > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
		res.CPUMicrosPerOp = float64(total) / float64(time.Microsecond) / float64(res.Ops)
	}
	if res.Ops == 0 && firstErr != nil {
		return res, fmt.Errorf("no operation succeeded: %w", firstErr)
	}
	return res, ctx.Err()
}

func readCPU(cpu []CPUSource) ([]time.Duration, error) {
	out := make([]time.Duration, len(cpu))
	for i, src := range cpu {
		v, err := src.Read()
		if err != nil {
			return nil, fmt.Errorf("reading the CPU time of %s: %w", src.Name, err)
		}
		out[i] = v
	}
	return out, nil
}

// TimedThroughput is Throughput that also times every operation that
// succeeded: the latency of the service under the whole load, and how many
// operations each worker finished (a worker that got none stands out).
func TimedThroughput(ctx context.Context, workers int, d time.Duration, newOp func(worker int) (Op, error), cpu []CPUSource) (*ThroughputResult, *Summary, []int, error) {
	// Each worker appends to its own slice: no lock on the timed path.
	times := make([][]time.Duration, workers)
	timed := func(worker int) (Op, error) {
		op, err := newOp(worker)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			start := time.Now()
			if err := op(ctx); err != nil {
				return err
			}
			times[worker] = append(times[worker], time.Since(start))
			return nil
		}, nil
	}
	res, err := Throughput(ctx, workers, d, timed, cpu)
	var all []time.Duration
	perWorker := make([]int, workers)
	for i, t := range times {
		perWorker[i] = len(t)
		all = append(all, t...)
	}
	return res, Summarize(all), perWorker, err
}
