package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

// Benchmarks of the HTTP API against the Go API on the same mesh: three
// voters in this process over loopback TCP, production timing, the caller
// on the first voter. They report the median latency of an
// acquire+release pair (p50-ms) and pairs a second, one caller at a time:
//
//	go test -run '^$' -bench AcquireRelease -benchtime 2000x -count 3 ./cmd/lockmesh/
//	go test -run '^$' -bench SessionExpiry -benchtime 10x -count 3 ./cmd/lockmesh/

var threeVoters struct {
	once  sync.Once
	nodes []*mesh.Mesh
	cfg   *mesh.Config
	err   error
}

func benchMesh(b *testing.B) (*mesh.Mesh, *mesh.Config) {
	b.Helper()
	threeVoters.once.Do(func() {
		names := []string{"b1", "b2", "b3"}
		for i, name := range names {
			cfg := mesh.DefaultLocalConfig()
			cfg.Name, cfg.Voters = name, names
			cfg.Timing = lease.DefaultTiming()
			cfg.RoundTimeout = 250 * time.Millisecond
			if i > 0 {
				cfg.Seeds = []string{threeVoters.nodes[0].Addr()}
			}
			m, err := mesh.New(cfg)
			if err != nil {
				threeVoters.err = err
				return
			}
			threeVoters.nodes = append(threeVoters.nodes, m)
			if i == 0 {
				threeVoters.cfg = cfg
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, m := range threeVoters.nodes {
			if err := m.WaitReady(ctx); err != nil {
				threeVoters.err = err
				return
			}
		}
	})
	if threeVoters.err != nil {
		b.Fatal(threeVoters.err)
	}
	return threeVoters.nodes[0], threeVoters.cfg
}

// pairs runs one acquire+release b.N times and reports the median and
// the rate.
func pairs(b *testing.B, pair func(i int)) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		pair(i)
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
}

func BenchmarkAcquireReleaseGo(b *testing.B) {
	m, _ := benchMesh(b)
	ctx := context.Background()
	pairs(b, func(i int) {
		l, err := m.Acquire(ctx, fmt.Sprintf("bench/go/%d", i%64))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkAcquireReleaseHTTP(b *testing.B) {
	m, cfg := benchMesh(b)
	at := newAPITest(b, m, cfg, apiOpts{anonymous: true})
	s := at.session(b, "5m", "")
	pairs(b, func(i int) {
		key := fmt.Sprintf("/v1/locks/bench/http/%d", i%64)
		at.must(b, 201, "PUT", key, map[string]any{"session": s, "wait": "10s"}, "")
		at.must(b, 200, "DELETE", key+"?session="+s, nil, "")
	})
}

// BenchmarkSessionExpiryToGrant: a session of 1 s holds a lock and is not
// refreshed; a waiter on the same agent asks for the lock. It reports how
// long after the session's expiry (its last refresh's send time plus its
// TTL: an upper bound of the expiry) the waiter was granted the lock.
func BenchmarkSessionExpiryToGrant(b *testing.B) {
	m, cfg := benchMesh(b)
	at := newAPITest(b, m, cfg, apiOpts{anonymous: true})
	waiter := at.session(b, "5m", "")
	var after []time.Duration
	for i := range b.N {
		key := fmt.Sprintf("/v1/locks/bench/expiry/%d", i)
		s := at.session(b, "1s", "")
		at.must(b, 201, "PUT", key, map[string]any{"session": s}, "")
		sent := time.Now()
		at.must(b, 200, "POST", "/v1/sessions/"+s+"/refresh", nil, "")
		at.must(b, 201, "PUT", key, map[string]any{"session": waiter, "wait": "30s"}, "")
		after = append(after, time.Since(sent)-time.Second)
		at.must(b, 200, "DELETE", key+"?session="+waiter, nil, "")
	}
	slices.Sort(after)
	b.ReportMetric(float64(after[len(after)/2])/float64(time.Millisecond), "expiry-to-grant-p50-ms")
	b.ReportMetric(float64(after[len(after)-1])/float64(time.Millisecond), "expiry-to-grant-max-ms")
}
