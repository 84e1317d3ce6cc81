package workload

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Op is one timed operation: for a lock service, Acquire then Release of a
// key; for the network floor, one round trip or one quorum round.
type Op func(ctx context.Context) error

// Summary describes a set of durations, in microseconds.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Mean float64 `json:"mean_us"`
	Min  float64 `json:"min_us"`
	Max  float64 `json:"max_us"`
}

// Summarize sorts d in place and returns its percentiles (nearest rank).
// With fewer than 1000 samples p99.9 is simply the maximum: the summary
// keeps N so that a reader can tell.
func Summarize(d []time.Duration) *Summary {
	if len(d) == 0 {
		return &Summary{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	us := func(v time.Duration) float64 { return float64(v) / float64(time.Microsecond) }
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return &Summary{
		N:    len(d),
		P50:  us(rank(0.50)),
		P99:  us(rank(0.99)),
		P999: us(rank(0.999)),
		Mean: us(sum / time.Duration(len(d))),
		Min:  us(d[0]),
		Max:  us(d[len(d)-1]),
	}
}

// Latency runs op warmup times untimed (connections, caches, a lock
// service's fast path), then up to n times, timing each, one after the
// other on the calling goroutine. It stops early when budget has passed
// (slow peers such as etcd with fsync on a slow disk), and returns what it
// measured so far; the summary's N says how many. The first failing op
// ends the run with its error.
func Latency(ctx context.Context, n, warmup int, budget time.Duration, op Op) (*Summary, error) {
	for i := 0; i < warmup; i++ {
		if err := op(ctx); err != nil {
			return nil, fmt.Errorf("warm-up %d: %w", i, err)
		}
	}
	lat := make([]time.Duration, 0, n)
	end := time.Now().Add(budget)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := op(ctx); err != nil {
			return Summarize(lat), fmt.Errorf("operation %d: %w", i, err)
		}
		now := time.Now()
		lat = append(lat, now.Sub(start))
		if budget > 0 && now.After(end) {
			break
		}
	}
	return Summarize(lat), nil
}
