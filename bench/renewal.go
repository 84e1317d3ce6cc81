package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/nodecmd"
	"github.com/lockmesh/lockmesh/bench/internal/workload"
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
	// Nodes are the three voters, v1 (the holder) first.
	Nodes []nodeCost `json:"nodes"`
	Lost  int        `json:"lost"` // leases lost by the end of the window
	Error string     `json:"error,omitempty"`
}

// nodeCost is what one node process spent during the window, per second,
// and its memory.
type nodeCost struct {
	Node string `json:"node"`
	// CPUPercent is the process's CPU time over the window (100 is one
	// core), from /proc/PID/stat: 10 ms resolution.
	CPUPercent float64 `json:"cpu_percent"`
	// MessagesSec counts the ballot requests and notifies the node sent
	// (lockmesh.messages.sent); ReceivedSec the requests and notifies it
	// received (lockmesh.messages.received). Replies are not counted.
	MessagesSec float64 `json:"messages_sent_per_sec"`
	ReceivedSec float64 `json:"messages_received_per_sec"`
	// WrittenSec is every byte the process wrote with write(2), from
	// /proc/PID/io wchar: ballot requests, replies and notifies, and
	// memberlist's TCP traffic (its UDP probes go through sendto and are
	// not counted).
	WrittenSec float64 `json:"bytes_written_per_sec"`
	// RenewedSec counts leases renewed (lockmesh.leases.renewed).
	RenewedSec float64 `json:"renewed_per_sec"`
	// HeapBytesPerLease is the node's live heap (after a GC) above its
	// level with no lease, over the leases held: on v1 the holder's state
	// and its voter's copy, on v2 and v3 a voter's copy alone.
	HeapBytesPerLease float64 `json:"heap_bytes_per_lease"`
}

func (o options) renewalTimeout() time.Duration {
	return 5*time.Minute + time.Duration(len(o.leaseCounts)+1)*(o.renewSettle+o.renewWindow+2*time.Minute)
}

// renewal holds increasing numbers of leases on v1 of a 3-voter mesh in 3
// node processes, lets the renewals settle for o.renewSettle, then measures
// for o.renewWindow at each count what each process spends: CPU, messages,
// bytes written, heap per lease. The nodes
// use mesh.DefaultConfig's timing (TTL 10s, renewed every TTL/3, round
// timeout 250ms): the production default.
func renewal(ctx context.Context, o options, bin *nodeBinary, log io.Writer) *renewalResult {
	res := &renewalResult{Setup: "lockmesh, 3 voters in 3 OS processes, loopback TCP, mesh.DefaultConfig timing (TTL 10s, renewed every 3.3s, round timeout 250ms), in-memory metrics sink; every lease held by v1"}
	path, err := bin.get(ctx, o, log)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	args := []string{"-metrics", "-lan-timing"}
	if o.nodeLog != "" {
		args = append(args, "-log", o.nodeLog)
	}
	nodes, err := startProcCluster(ctx, path, 3, args, log)
	defer stopAll(nodes)
	if err != nil {
		res.Error = fmt.Sprintf("start: %v", err)
		return res
	}
	holder := nodes[0]
	var baseHeap []uint64
	for _, n := range append([]int{0}, o.leaseCounts...) {
		lv := renewalLevel{Leases: n}
		if n > 0 {
			r, err := holder.call(ctx, fmt.Sprintf("hold %d bench/renew", n))
			lv.AcquireSeconds = r.Seconds
			if err != nil {
				lv.Error = fmt.Sprintf("taking %d leases: %v", n, err)
				res.Levels = append(res.Levels, lv)
				break
			}
			fmt.Fprintf(log, "bench: renewal: %d leases held (taken in %.1fs); settling %v, then measuring %v\n", n, r.Seconds, o.renewSettle, o.renewWindow)
			// The window opens once renewals run at their steady rate:
			// right after the taking, the first renewals of the leases
			// taken last still overlap it, and the collector works off
			// the taking's garbage (windows that opened at once counted
			// 35,000-39,600 renewals a second at 100,000 leases, where
			// the steady rate is 30,000).
			select {
			case <-ctx.Done():
				lv.Error = ctx.Err().Error()
				res.Levels = append(res.Levels, lv)
				return res
			case <-time.After(o.renewSettle): // a set time, as the window is: not a wait for an event
			}
		}
		profile := ""
		if n > 0 && n == o.leaseCounts[len(o.leaseCounts)-1] {
			profile = o.nodeProfile
		}
		heaps, err := measureRenewal(ctx, nodes, o.renewWindow, &lv, profile)
		if n == 0 {
			baseHeap = heaps
		}
		for i := range lv.Nodes {
			if n > 0 && i < len(heaps) && i < len(baseHeap) {
				lv.Nodes[i].HeapBytesPerLease = (float64(heaps[i]) - float64(baseHeap[i])) / float64(n)
			}
		}
		if err != nil {
			lv.Error = err.Error()
		}
		res.Levels = append(res.Levels, lv)
		if lv.Lost > 0 || lv.Error != "" {
			break // the next level would measure a mesh in trouble
		}
	}
	res.Notes = append(res.Notes,
		"messages/s: ballot requests and notifies sent (lockmesh.messages.sent; replies not counted); one request carries at most MaxOpsPerMessage (16384) operations",
		"bytes/s: all a node process wrote with write(2) (/proc/PID/io wchar): ballot requests, replies and notifies, and memberlist's TCP push/pull",
		"CPU µs per renewal: each node's CPU over the window over the leases renewed in it (all by v1): v1's includes its own voter's share",
		"heap per lease: live heap after GC above the level with no lease; v1 holds every lease and is also a voter",
		"leases are taken 256 at a time; a level where leases were lost ends the case (the next would measure a mesh in trouble)")
	return res
}

// nodeSnap is what one node process has used so far.
type nodeSnap struct {
	cpu     time.Duration
	written float64
	stats   nodecmd.Reply
}

func snapNodes(ctx context.Context, nodes []*nodeProc) ([]nodeSnap, error) {
	out := make([]nodeSnap, len(nodes))
	for i, n := range nodes {
		cpu, err := workload.ProcCPU(n.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		written, err := procWritten(n.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		st, err := n.call(ctx, "stats")
		if err != nil {
			return nil, err
		}
		out[i] = nodeSnap{cpu: cpu, written: written, stats: st}
	}
	return out, nil
}

// measureRenewal reads every node before and after d, fills lv, and
// returns each node's live heap (read before the window: the collection
// it forces must not fall in the window). With profileDir set, each node
// also writes a CPU profile of the window and a heap profile after it
// there.
func measureRenewal(ctx context.Context, nodes []*nodeProc, d time.Duration, lv *renewalLevel, profileDir string) ([]uint64, error) {
	before, err := snapNodes(ctx, nodes)
	if err != nil {
		return nil, err
	}
	var heaps []uint64
	for _, s := range before {
		heaps = append(heaps, s.stats.HeapBytes)
	}
	t0 := time.Now()
	profiled := make(chan error, len(nodes))
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return heaps, err
		}
		for _, n := range nodes {
			go func() {
				_, err := n.call(ctx, fmt.Sprintf("cpuprofile %s %v", filepath.Join(profileDir, n.name+".cpu"), d))
				profiled <- err
			}()
		}
	}
	select {
	case <-ctx.Done():
		return heaps, ctx.Err()
	case <-time.After(d): // the measuring window itself, not a wait for an event
	}
	elapsed := time.Since(t0)
	if profileDir != "" {
		for range nodes {
			if err := <-profiled; err != nil {
				return heaps, err
			}
		}
		defer func() {
			for _, n := range nodes {
				n.call(ctx, "heapprofile "+filepath.Join(profileDir, n.name+".heap"))
			}
		}()
	}
	// The stats calls force two collections in each node: read the CPU
	// first, node by node, so that those collections are not counted.
	after := make([]nodeSnap, len(nodes))
	for i, n := range nodes {
		if after[i].cpu, err = workload.ProcCPU(n.cmd.Process.Pid); err != nil {
			return heaps, err
		}
		if after[i].written, err = procWritten(n.cmd.Process.Pid); err != nil {
			return heaps, err
		}
	}
	for i, n := range nodes {
		if after[i].stats, err = n.call(ctx, "stats"); err != nil {
			return heaps, err
		}
	}
	sec := elapsed.Seconds()
	lv.WindowSeconds = sec
	rate := func(i int, name string) float64 {
		return (after[i].stats.Counters[name] - before[i].stats.Counters[name]) / sec
	}
	for i, n := range nodes {
		lv.Nodes = append(lv.Nodes, nodeCost{
			Node:        n.name,
			CPUPercent:  100 * float64(after[i].cpu-before[i].cpu) / float64(elapsed),
			MessagesSec: rate(i, "messages.sent"),
			ReceivedSec: rate(i, "messages.received"),
			WrittenSec:  (after[i].written - before[i].written) / sec,
			RenewedSec:  rate(i, "leases.renewed"),
		})
	}
	lv.Lost = after[0].stats.Lost
	return heaps, nil
}

// procWritten is the wchar line of /proc/PID/io: bytes the process has
// passed to write(2) and its kin, sockets included.
func procWritten(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io: no wchar", pid)
}

func (r *renewalResult) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("**lockmesh: renewal cost** (%s)\n\n", r.Setup)
	if r.Error != "" {
		w("failed: %s\n\n", oneLine(r.Error))
	}
	w("| leases held | CPU %% of a core (v1, v2, v3) | CPU µs per renewal (v1, v2, v3) | messages sent/s (v1, v2, v3) | bytes written/s (v1, v2, v3) | renewals/s | heap bytes per lease (v1, v2) |\n")
	w("|---:|---|---|---|---|---:|---|\n")
	for _, lv := range r.Levels {
		var cpu, msgs, bytes, heap, per []string
		renewed := 0.0
		for _, n := range lv.Nodes {
			renewed += n.RenewedSec
		}
		for i, n := range lv.Nodes {
			cpu = append(cpu, fmt.Sprintf("%.1f", n.CPUPercent))
			if renewed > 0 {
				per = append(per, fmt.Sprintf("%.1f", n.CPUPercent/100*1e6/renewed))
			}
			msgs = append(msgs, fmt.Sprintf("%.1f", n.MessagesSec))
			bytes = append(bytes, count(n.WrittenSec))
			if i < 2 && lv.Leases > 0 {
				heap = append(heap, count(n.HeapBytesPerLease))
			}
		}
		c := strings.Join(cpu, ", ")
		if lv.Error != "" {
			c += " (" + oneLine(lv.Error) + ")"
		}
		if lv.Lost > 0 && !strings.Contains(lv.Error, "leases lost") {
			c += fmt.Sprintf(" (%d leases lost)", lv.Lost)
		}
		mem, cost := "—", "—"
		if len(heap) > 0 {
			mem = strings.Join(heap, ", ")
		}
		if len(per) > 0 {
			cost = strings.Join(per, ", ")
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", count(float64(lv.Leases)), c, cost,
			strings.Join(msgs, ", "), strings.Join(bytes, ", "), count(renewed), mem)
	}
	w("\n")
	for _, n := range r.Notes {
		w("- %s\n", n)
	}
	w("\n")
}
