package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// The peers (hashicorp/raft, etcd, Redlock) are measured by the separate Go
// module bench/peers, so that lockmesh's go.mod does not carry their
// dependencies. It is built once per run and started once per case, so
// that one peer's goroutines and heap never run beside another's.

// peerSetups describe the peer rows when the peers cannot run at all.
var peerSetups = map[string]string{
	"raft":         "hashicorp/raft, 3 nodes in 1 process, in-memory log and transport, caller on the leader",
	"raft-tcp":     "hashicorp/raft, 3 nodes in 1 process, in-memory log, TCP transport on loopback, caller on the leader",
	"etcd":         "etcd, 3 members embedded in 1 process, fsync on, concurrency.Mutex",
	"etcd-nofsync": "etcd, 3 members embedded in 1 process, UnsafeNoFsync, concurrency.Mutex",
	"redlock":      "Redlock (go-redsync) on 3 redis-server processes",
}

type peerBinary struct {
	dir, tmp, path string
	err            error
}

// buildPeers builds the bench/peers module. On a machine that cannot
// fetch its dependencies the error is kept, and every peer row shows it.
func buildPeers(ctx context.Context, o options, log io.Writer) *peerBinary {
	p := &peerBinary{dir: filepath.Join(o.root, "bench", "peers")}
	p.tmp, p.err = os.MkdirTemp("", "lockmesh-bench-peers-")
	if p.err != nil {
		return p
	}
	p.path = filepath.Join(p.tmp, "peers")
	fmt.Fprintf(log, "bench: building bench/peers (the first build downloads and compiles etcd: minutes) ...\n")
	start := time.Now()
	if p.err = goBuild(ctx, p.dir, p.path, "."); p.err == nil {
		fmt.Fprintf(log, "bench: bench/peers built in %.1fs\n", time.Since(start).Seconds())
	}
	return p
}

func (p *peerBinary) cleanup() {
	if p.tmp != "" {
		os.RemoveAll(p.tmp)
	}
}

// run runs one peer case and returns its row.
func (p *peerBinary) run(ctx context.Context, o options, name string, log io.Writer) workload.Row {
	if p.err != nil {
		return workload.Row{Case: name, Setup: peerSetups[name], Error: "bench/peers did not build: " + p.err.Error()}
	}
	cmd := exec.CommandContext(ctx, p.path,
		"-case", name,
		"-n", fmt.Sprint(o.n),
		"-warmup", fmt.Sprint(o.warmup()),
		"-duration", o.duration.String(),
		"-workers", fmt.Sprint(o.workers),
		"-handover-workers", fmt.Sprint(o.handoverWorkers),
		"-max-holds", fmt.Sprint(o.maxHolds()),
		"-hold", o.hold.String(),
		"-latency-budget", o.latencyBudget.String(),
	)
	cmd.Dir = p.dir
	// Its own process group, so that a timeout also ends the redis-server
	// processes it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = prefixWriter{log, "bench: " + name + ": "}
	err := cmd.Run()
	var row workload.Row
	if jerr := json.Unmarshal(stdout.Bytes(), &row); jerr != nil {
		row = workload.Row{Case: name, Setup: peerSetups[name]}
		if err == nil {
			err = fmt.Errorf("unreadable output: %w", jerr)
		}
	}
	if err != nil && row.Error == "" {
		row.Error = fmt.Sprintf("peers -case %s: %v", name, err)
	}
	return row
}
