package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// The churn case: many distinct keys, each locked once, as per-entity
// locking (invoice/<id>) does. A voter keeps a register per key it saw
// until it is told to forget it (quorum/acceptor_registers.go): by the node
// that released the key, when it drops the key from its MaxIdleKeys (4096)
// most recent ones, or by a sweep once a voter keeps more than
// MaxRegisters (65536) or a key idles longer than RegisterIdle (10 ×
// MaxTTL, 100 s here). The heap should level off, not grow with every key
// ever locked.

// Figures of the churn row (Row.Figures and its Curve's points).
const (
	figKeys         = "keys"
	figLockSeconds  = "lock_s"               // time spent locking (the GCs between steps left out)
	figBaseHeap     = "base_heap_mb"         // live heap after GC, mesh up, no key locked yet
	figFinalHeap    = "final_heap_mb"        // the same after the last key
	figPerKey       = "heap_bytes_per_key"   // (final − base) / keys
	figDropped      = "dropped_per_voter"    // registers each voter dropped, on average
	figForgetRate   = "forgotten_per_s"      // registers dropped per voter per second of locking
	figHeapAlloc    = "heap_alloc_mb"        // curve: live heap after GC (HeapAlloc)
	figHeapInuse    = "heap_inuse_mb"        // curve: heap spans in use after GC (HeapInuse)
	figRegisters    = "registers_per_voter"  // curve: keys seen − dropped, mean over the voters
	figForgetAsks   = "forget_asks_per_node" // curve: keys a node dropped and told the voters to forget, mean
	figPointSeconds = "elapsed_s"            // curve: locking time so far
)

// churn locks o.churnKeys distinct keys (k0, k1, ...) once each on a
// 3-voter mesh in this process, o.workers goroutines spread over the
// voters, and reads the live heap after a forced GC at every tenth.
func churn(ctx context.Context, o options) workload.Row {
	const voters = 3
	row := workload.Row{Case: "churn", Figures: map[string]float64{},
		Setup: fmt.Sprintf("lockmesh, %d voters in 1 process, loopback TCP, DefaultConfig timing (TTL 10 s, round timeout 250 ms): %s distinct keys locked once each (Acquire+Release), %d goroutines spread over the voters",
			voters, count(float64(o.churnKeys)), o.workers)}
	c, err := startClusterWith(ctx, voters, lanTiming)
	if err != nil {
		row.Error = fmt.Sprintf("start: %v", err)
		return row
	}
	defer c.close()

	point := func(keys int, elapsed time.Duration) workload.Point {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		var dropped, asks float64
		for _, m := range c.nodes {
			st := m.Status()
			dropped += float64(st.Acceptor.Dropped)
			asks += float64(st.Proposer.Forgets)
		}
		dropped /= voters
		asks /= float64(len(c.nodes))
		return workload.Point{At: float64(keys), Figures: map[string]float64{
			figHeapAlloc:    float64(ms.HeapAlloc) / (1 << 20),
			figHeapInuse:    float64(ms.HeapInuse) / (1 << 20),
			figDropped:      dropped,
			figRegisters:    float64(keys) - dropped,
			figForgetAsks:   asks,
			figPointSeconds: elapsed.Seconds(),
		}}
	}
	row.Curve = append(row.Curve, point(0, 0))
	step := o.churnKeys / 10
	var (
		locked  int
		elapsed time.Duration
		cpu     time.Duration
	)
	for locked < o.churnKeys {
		hi := min(locked+step, o.churnKeys)
		if o.churnKeys-hi < step {
			hi = o.churnKeys // no short last step
		}
		cpu0, _ := workload.SelfCPU()
		t0 := time.Now()
		n, err := lockEach(ctx, c, o.workers, locked, hi)
		elapsed += time.Since(t0)
		cpu1, _ := workload.SelfCPU()
		cpu += cpu1 - cpu0
		locked += n
		if err != nil {
			row.Error = fmt.Sprintf("after %d keys: %v", locked, err)
			break
		}
		row.Curve = append(row.Curve, point(locked, elapsed))
	}
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			row.Notes = append(row.Notes, fmt.Sprintf("heap profile: %v", err))
		}
	}
	if locked == 0 {
		return row
	}
	row.Throughput = &workload.ThroughputResult{
		Workers: o.workers, Seconds: elapsed.Seconds(), Ops: int64(locked),
		OpsPerSec:      float64(locked) / elapsed.Seconds(),
		CPUMicrosPerOp: float64(cpu) / float64(time.Microsecond) / float64(locked),
		CPU:            []workload.ProcessCPU{{Name: "bench (3 voters, the callers)", Seconds: cpu.Seconds()}},
	}
	first, last := row.Curve[0].Figures, row.Curve[len(row.Curve)-1].Figures
	row.Figures[figKeys] = float64(locked)
	row.Figures[figLockSeconds] = elapsed.Seconds()
	row.Figures[figBaseHeap] = first[figHeapAlloc]
	row.Figures[figFinalHeap] = last[figHeapAlloc]
	row.Figures[figPerKey] = (last[figHeapAlloc] - first[figHeapAlloc]) * (1 << 20) / float64(locked)
	row.Figures[figDropped] = last[figDropped]
	row.Figures[figForgetRate] = last[figDropped] / elapsed.Seconds()
	row.Notes = append(row.Notes,
		"heap: HeapAlloc after runtime.GC() of the whole process (3 voters and the callers), every tenth of the keys; ops/s and CPU µs/op: the locking only, the GCs between steps left out",
		"registers per voter: keys locked less Status().Acceptor.Dropped (the mesh does not report the count itself); a node that drops a key it released (past MaxIdleKeys, 4096) tells the voters to forget it; sweeps forget the rest past MaxRegisters (65536) or after RegisterIdle")
	return row
}

// writeHeapProfile writes the heap profile of the live objects (after a GC)
// to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}

// lockEach takes and releases keys k<lo> to k<hi-1> once each, with
// workers goroutines, goroutine g on node g mod n. It returns how many it
// did and the first error.
func lockEach(ctx context.Context, c *cluster, workers, lo, hi int) (int, error) {
	var (
		next     atomic.Int64
		done     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	next.Store(int64(lo))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for g := range workers {
		l := meshLocker{c.nodes[g%len(c.nodes)]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(hi) {
					return
				}
				if err := workload.AcquireRelease(l, fmt.Sprintf("k%d", k))(ctx); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return int(done.Load()), firstErr
}

// churnMarkdown is the churn row's heap curve.
func churnMarkdown(b *strings.Builder, row workload.Row, s rowSpread) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	mb := func(v float64) string { return fmt.Sprintf("%.1f MB", v) }
	w("**lockmesh: churn** (%s)", row.Setup)
	if row.Error != "" {
		w(" — failed: %s", oneLine(row.Error))
	}
	w("\n\n")
	if len(row.Curve) > 0 {
		w("| keys locked | heap after GC (HeapAlloc) | HeapInuse | registers per voter (≈) | dropped per voter | locking time |\n")
		w("|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range row.Curve {
			f := p.Figures
			w("| %s | %s | %s | %s | %s | %.1f s |\n", count(p.At), mb(f[figHeapAlloc]), mb(f[figHeapInuse]),
				count(f[figRegisters]), count(f[figDropped]), f[figPointSeconds])
		}
		w("\n")
	}
	w("- final heap %s after %s keys, from %s with none: %s per key",
		figure(row, s, figFinalHeap, mb), figure(row, s, figKeys, count), figure(row, s, figBaseHeap, mb),
		figure(row, s, figPerKey, func(v float64) string { return fmt.Sprintf("%.0f B", v) }))
	if n := len(row.Curve); n > 2 {
		// From the first tenth on: what the first step adds besides
		// registers (connections, buffers, pools) is not per key.
		a, z := row.Curve[1], row.Curve[n-1]
		w(" (%.0f B per key from %s keys on)", (z.Figures[figHeapAlloc]-a.Figures[figHeapAlloc])*(1<<20)/(z.At-a.At), count(a.At))
	}
	w("; voters forgot %s registers each (%s a second)", figure(row, s, figDropped, count), figure(row, s, figForgetRate, count))
	if t := row.Throughput; t != nil && t.Ops > 0 {
		w("; %s pairs/s, %s CPU µs per pair", withRange(t.OpsPerSec, s.OpsPerSec, count),
			withRange(t.CPUMicrosPerOp, s.CPUPerOp, func(v float64) string { return fmt.Sprintf("%.0f", v) }))
	}
	w("\n")
	if s.Figures != nil {
		w("- the curve: medians of the runs at each point\n")
	}
	w("\n")
}
