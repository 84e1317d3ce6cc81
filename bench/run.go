package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// run runs the selected cases one after the other (never two at once: they
// would measure each other) and gathers the report. Progress goes to log.
func run(ctx context.Context, o options, log io.Writer) *report {
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Machine: describeMachine()}
	rep.Options = map[string]any{
		"cases": o.cases, "n": o.n, "duration": o.duration.String(), "quick": o.quick,
		"workers": o.workers, "handover_workers": o.handoverWorkers,
		"leases": o.leaseCounts, "renew_window": o.renewWindow.String(), "renew_settle": o.renewSettle.String(), "crashes": o.crashTrials,
		"scale_per_node": o.scalePerNode, "scale_duration": o.scaleDuration.String(), "churn_keys": o.churnKeys,
	}
	start := time.Now()
	var peers *peerBinary
	nodeBin := &nodeBinary{}
	defer nodeBin.cleanup()
	for _, c := range o.cases {
		fmt.Fprintf(log, "bench: %s ...\n", c)
		caseStart := time.Now()
		var rows []workload.Row
		switch c {
		case "floor":
			rows = guardRows(ctx, o.caseTimeout, c, rep, func(ctx context.Context) []workload.Row { return floor(ctx, o) })
		case "floor-wide":
			rows = guardRows(ctx, o.caseTimeout, c, rep, func(ctx context.Context) []workload.Row { return floorWide(ctx, o) })
		case "lockmesh", "lockmesh-disk", "lockmesh5", "lockmesh7":
			voters := map[string]int{"lockmesh": 3, "lockmesh-disk": 3, "lockmesh5": 5, "lockmesh7": 7}[c]
			rows = guardRows(ctx, o.caseTimeout, c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{lockmeshInProcess(ctx, o, c, voters, c == "lockmesh-disk")}
			})
		case "lockmesh-1node", "lockmesh-8nodes", "lockmesh-fair":
			rows = guardRows(ctx, o.caseTimeout, c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{lockmeshContention(ctx, o, c)}
			})
		case "lockmesh-procs":
			rows = guardRows(ctx, o.caseTimeout, c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{lockmeshProcesses(ctx, o, nodeBin, log)}
			})
		case "scale", "scale-disk":
			rows = guardRows(ctx, o.scaleTimeout(), c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{scale(ctx, o, c, c == "scale-disk")}
			})
		case "churn":
			rows = guardRows(ctx, o.churnTimeout(), c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{churn(ctx, o)}
			})
		case "raft", "raft-tcp", "etcd", "etcd-nofsync", "redlock":
			if peers == nil {
				peers = buildPeers(ctx, o, log)
			}
			rows = guardRows(ctx, o.caseTimeout+time.Minute, c, rep, func(ctx context.Context) []workload.Row {
				return []workload.Row{peers.run(ctx, o, c, log)}
			})
		case "renewal":
			rep.Renewal = guard(ctx, o.renewalTimeout(), rep, func(ctx context.Context) *renewalResult {
				return renewal(ctx, o, nodeBin, log)
			}, func(err error) *renewalResult { return &renewalResult{Error: err.Error()} })
		case "start":
			rep.Start = guard(ctx, 10*time.Minute, rep, func(ctx context.Context) *startResult {
				return startToGrant(ctx, o, log)
			}, func(err error) *startResult { return &startResult{Error: err.Error()} })
		case "crash":
			rep.Crash = guard(ctx, o.caseTimeout, rep, func(ctx context.Context) *crashResult {
				return crashToGrant(ctx, o, log)
			}, func(err error) *crashResult { return &crashResult{Error: err.Error()} })
		}
		for i := range rows {
			if rows[i].Seconds == 0 {
				rows[i].Seconds = time.Since(caseStart).Seconds()
			}
			if rows[i].Error != "" {
				fmt.Fprintf(log, "bench: %s: %s\n", rows[i].Case, rows[i].Error)
			}
		}
		rep.Rows = append(rep.Rows, rows...)
		fmt.Fprintf(log, "bench: %s done in %.1fs\n", c, time.Since(caseStart).Seconds())
		// Let the next case start without this one's garbage.
		runtime.GC()
	}
	if peers != nil {
		peers.cleanup()
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Machine.LoadEnd = loadAverage()
	return rep
}

// guardRows runs a case that yields table rows (see guard).
func guardRows(ctx context.Context, timeout time.Duration, name string, rep *report, fn func(context.Context) []workload.Row) []workload.Row {
	return guard(ctx, timeout, rep, fn, func(err error) []workload.Row {
		return []workload.Row{{Case: name, Setup: name, Error: err.Error()}}
	})
}

// guard runs one case under a timeout, and turns a panic, or a case that
// does not return, into fail's result, so that the run goes on.
func guard[T any](ctx context.Context, timeout time.Duration, rep *report, fn func(context.Context) T, fail func(error) T) T {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v     T
		panic error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panic: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
			}
		}()
		done <- result{v: fn(ctx)}
	}()
	select {
	case r := <-done:
		if r.panic != nil {
			rep.Panics++
			return fail(r.panic)
		}
		return r.v
	case <-time.After(timeout + 30*time.Second):
		// The case ignored its context: leave its goroutines behind.
		return fail(fmt.Errorf("did not finish within %v (its goroutines were left running)", timeout))
	}
}

// errorRow is a row that says why a case has no figures.
func errorRow(name, setup string, err error) workload.Row {
	return workload.Row{Case: name, Setup: setup, Error: err.Error()}
}

// moduleRoot is the main module's directory (where go.mod is), whatever
// directory the program runs in.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		return "", fmt.Errorf("not inside the lockmesh module: run from its directory (go run ./bench)")
	}
	return filepath.Dir(gomod), nil
}
