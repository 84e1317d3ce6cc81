package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/mesh"
)

// renewalResult is the cost of keeping leases: a node renews all of its
// leases in one message per voter per renew interval, so the message rate
// should not grow with the number of leases (until a message holds
// MaxOpsPerMessage of them), while bytes and CPU grow with it.
type renewalResult struct {
	Setup  string         `json:"setup"`
	Error  string         `json:"error,omitempty"`
	Levels []renewalLevel `json:"levels"`
	Notes  []string       `json:"notes,omitempty"`
}

type renewalLevel struct {
	Leases         int     `json:"leases"`
	AcquireSeconds float64 `json:"acquire_seconds"` // to take the leases added at this level
	WindowSeconds  float64 `json:"window_seconds"`
	// CPUPercent is the CPU time of the whole process (every node of the
	// mesh, and the idle caller) over the window; 100 is one core.
	CPUPercent float64       `json:"process_cpu_percent"`
	Nodes      []nodeTraffic `json:"nodes"`
	// HeapBytesPerLease is the live heap (after a GC) above the level with
	// no lease, divided by the leases held: every voter's copy of the
	// lease, the holder's state, and the caller's *mesh.Lease and key.
	HeapBytesPerLease float64 `json:"heap_bytes_per_lease"`
	Lost              int     `json:"lost"` // leases lost during the window
	Error             string  `json:"error,omitempty"`
}

// nodeTraffic is what one node sent during the window, per second, from
// the mesh's metrics (lockmesh.messages.sent, lockmesh.bytes.sent,
// lockmesh.leases.renewed, labelled node=<name>).
type nodeTraffic struct {
	Node        string  `json:"node"`
	MessagesSec float64 `json:"messages_per_sec"`
	BytesSec    float64 `json:"bytes_per_sec"`
	RenewedSec  float64 `json:"renewed_per_sec"`
}

func (o options) renewalTimeout() time.Duration {
	return 5*time.Minute + time.Duration(len(o.leaseCounts)+1)*(o.renewWindow+30*time.Second)
}

// renewal holds increasing numbers of leases on one voter of a 3-voter
// mesh in this process, and measures for o.renewWindow at each: the
// process's CPU, each node's messages and bytes, and the heap per lease.
func renewal(ctx context.Context, o options, log io.Writer) *renewalResult {
	res := &renewalResult{Setup: "lockmesh, 3 voters in 1 process, loopback TCP, TTL 1s (renewed every TTL/3), leases held on v1"}
	c, err := startCluster(ctx, 3)
	if err != nil {
		res.Error = fmt.Sprintf("start: %v", err)
		return res
	}
	defer c.close()
	holder := c.nodes[0]
	var (
		leases   []*mesh.Lease
		baseHeap uint64
	)
	for _, n := range append([]int{0}, o.leaseCounts...) {
		if n < len(leases) {
			continue
		}
		lv := renewalLevel{Leases: n}
		start := time.Now()
		more, err := acquireMany(ctx, holder, len(leases), n-len(leases))
		leases = append(leases, more...)
		lv.AcquireSeconds = time.Since(start).Seconds()
		if err != nil {
			lv.Error = fmt.Sprintf("acquiring %d leases: %v", n, err)
			res.Levels = append(res.Levels, lv)
			break
		}
		heap := liveHeap()
		if n == 0 {
			baseHeap = heap
		} else {
			lv.HeapBytesPerLease = (float64(heap) - float64(baseHeap)) / float64(n)
		}
		fmt.Fprintf(log, "bench: renewal: %d leases held (taken in %.1fs); measuring %v\n", n, lv.AcquireSeconds, o.renewWindow)
		measureWindow(ctx, c, o.renewWindow, &lv)
		for _, l := range leases {
			select {
			case <-l.Done():
				lv.Lost++
			default:
			}
		}
		res.Levels = append(res.Levels, lv)
		if lv.Lost > 0 || lv.Error != "" {
			break // the next level would measure a mesh in trouble
		}
	}
	res.Notes = append(res.Notes,
		"bytes/s counts the request bodies a node sends as proposer (lockmesh.bytes.sent): not replies, notifies or gossip",
		"messages/s counts requests and notifies (lockmesh.messages.sent); one request carries at most MaxOpsPerMessage (16384) operations")
	return res
}

// acquireMany takes n more keys on m, from index from on, 256 at a time.
func acquireMany(ctx context.Context, m *mesh.Mesh, from, n int) ([]*mesh.Lease, error) {
	out := make([]*mesh.Lease, n)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(256, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := m.Acquire(actx, fmt.Sprintf("bench/renew/%d", from+i))
				cancel()
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				out[i] = l
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, ctx.Err()
}

// liveHeap is the heap in use after two full collections.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measureWindow reads CPU and counters before and after d.
func measureWindow(ctx context.Context, c *cluster, d time.Duration, lv *renewalLevel) {
	type snap struct{ msgs, bytes, renewed float64 }
	read := func() []snap {
		var s []snap
		for _, m := range c.nodes {
			s = append(s, snap{
				c.counter("messages.sent", m.Name()),
				c.counter("bytes.sent", m.Name()),
				c.counter("leases.renewed", m.Name()),
			})
		}
		return s
	}
	cpu0, err := workload.SelfCPU()
	if err != nil {
		lv.Error = err.Error()
		return
	}
	before, t0 := read(), time.Now()
	select {
	case <-ctx.Done():
		lv.Error = ctx.Err().Error()
		return
	case <-time.After(d): // the measuring window itself, not a wait for an event
	}
	after, elapsed := read(), time.Since(t0)
	cpu1, _ := workload.SelfCPU()
	lv.WindowSeconds = elapsed.Seconds()
	lv.CPUPercent = 100 * float64(cpu1-cpu0) / float64(elapsed)
	for i, m := range c.nodes {
		sec := elapsed.Seconds()
		lv.Nodes = append(lv.Nodes, nodeTraffic{
			Node:        m.Name(),
			MessagesSec: (after[i].msgs - before[i].msgs) / sec,
			BytesSec:    (after[i].bytes - before[i].bytes) / sec,
			RenewedSec:  (after[i].renewed - before[i].renewed) / sec,
		})
	}
}

func (r *renewalResult) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("**lockmesh: renewal cost** (%s)\n\n", r.Setup)
	if r.Error != "" {
		w("failed: %s\n\n", oneLine(r.Error))
	}
	w("| leases held | process CPU %% (all 3 nodes) | messages/s per node | bytes/s per node | renewals/s | bytes per lease in memory |\n")
	w("|---:|---:|---|---|---:|---:|\n")
	for _, lv := range r.Levels {
		var msgs, bytes []string
		renewed := 0.0
		for _, n := range lv.Nodes {
			msgs = append(msgs, fmt.Sprintf("%s %s", n.Node, count(n.MessagesSec)))
			bytes = append(bytes, fmt.Sprintf("%s %s", n.Node, count(n.BytesSec)))
			renewed += n.RenewedSec
		}
		mem := "—"
		if lv.Leases > 0 {
			mem = count(lv.HeapBytesPerLease)
		}
		cpu := fmt.Sprintf("%.1f", lv.CPUPercent)
		if lv.Error != "" {
			cpu += " (" + oneLine(lv.Error) + ")"
		}
		if lv.Lost > 0 {
			cpu += fmt.Sprintf(" (%d leases lost)", lv.Lost)
		}
		w("| %s | %s | %s | %s | %s | %s |\n", count(float64(lv.Leases)), cpu,
			strings.Join(msgs, ", "), strings.Join(bytes, ", "), count(renewed), mem)
	}
	w("\n")
	for _, n := range r.Notes {
		w("- %s\n", n)
	}
	w("\n")
}
