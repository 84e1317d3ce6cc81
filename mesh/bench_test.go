package mesh

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures an uncontended Acquire and Release of one
// key by one goroutine on a voter of a 3-voter mesh, over real TCP on
// loopback. It reports the median and the 99th percentile.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 5000x ./mesh/
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name   string
		voters int
	}{{"3voters", 3}, {"5voters", 5}} {
		b.Run(tc.name, func(b *testing.B) {
			c := newCluster(b, clusterOpts{voters: tc.voters, tcp: true})
			c.waitVoting()
			m := c.nodes[0]
			ctx := context.Background()
			// Warm up: connections, the fast path.
			for i := 0; i < 50; i++ {
				l, err := m.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				l.Release(ctx)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				l, err := m.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkAcquireReleaseParallel measures throughput: 64 goroutines on a
// voter of a 3-voter TCP mesh, each doing Acquire and Release of its own
// key, so that requests of many callers share messages.
//
//	go test -run '^$' -bench AcquireReleaseParallel -benchtime 5s ./mesh/
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c := newCluster(b, clusterOpts{voters: 3, tcp: true})
	c.waitVoting()
	m := c.nodes[0]
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench-%d", next.Add(1))
		for pb.Next() {
			l, err := m.Acquire(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
