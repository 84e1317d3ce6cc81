// Command bench measures lockmesh side by side with the network floor and
// with what users would otherwise run for a lock — hashicorp/raft, etcd and
// Redlock — in one run on one machine, and prints a markdown table (every
// figure also goes to a JSON file).
//
//	go run ./bench                       # everything, about 9 minutes
//	go run ./bench -quick                # a smoke run
//	go run ./bench -cases floor,lockmesh -n 5000 -duration 10s
//	go run ./bench -cases churn -churn-keys 200000
//
// The floor and the lockmesh rows run in this process (lockmesh-procs in
// separate node processes built from bench/internal/benchnode), and so do
// scale (64 nodes, every one taking locks) and churn (a million distinct
// keys: about 3 of the 9 minutes on 2 cores; -churn-keys takes fewer). The
// peers live in their own Go module, bench/peers, so that lockmesh's go.mod
// does not carry etcd: this program builds it and runs one process per
// peer case, reading a JSON row from its stdout. A case that fails or
// cannot run prints a row saying why, and the run goes on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// allCases are the cases in the order they run and print.
var allCases = []string{
	"floor", "floor-wide", "lockmesh", "lockmesh-disk", "lockmesh-procs", "lockmesh5", "lockmesh7",
	"scale", "scale-disk", "churn",
	"lockmesh-1node", "lockmesh-8nodes", "lockmesh-fair",
	"raft", "raft-tcp", "etcd", "etcd-nofsync", "redlock",
	"renewal", "crash", "start",
}

// peerCases run in the bench/peers module.
var peerCases = []string{"raft", "raft-tcp", "etcd", "etcd-nofsync", "redlock"}

type options struct {
	cases    []string
	n        int           // latency iterations
	duration time.Duration // throughput and hand-over run time
	out      string        // JSON file
	quick    bool

	workers         int           // throughput goroutines
	handoverWorkers int           // contenders for one key
	hold            time.Duration // how long a contender holds the key
	latencyBudget   time.Duration // a latency run stops after this long
	caseTimeout     time.Duration // bound on one case
	leaseCounts     []int         // renewal: leases held
	renewWindow     time.Duration // renewal: measuring time per count
	renewSettle     time.Duration // renewal: wait after taking the leases, before measuring
	crashTrials     int
	scalePerNode    int           // scale: goroutines locking on every node
	scaleDuration   time.Duration // scale: how long they run
	churnKeys       int           // churn: distinct keys locked

	root  string // the main module's directory
	merge string // -merge: result files to take medians of (runs nothing)

	cpuProfile   string // CPU profile of the whole run (this process only)
	mutexProfile string // mutex contention profile of the whole run
	memProfile   string // churn: heap profile after the last key
	nodeProfile  string // renewal: directory for the node processes' profiles
	nodeLog      string // renewal: the node processes' log level ("": silent)
}

// params are the workload sizes handed to package workload.
func (o options) params() workload.Params {
	return workload.Params{
		N: o.n, Warmup: o.warmup(), LatencyBudget: o.latencyBudget, Duration: o.duration,
		Workers: o.workers, Contenders: o.handoverWorkers, Hold: o.hold, MaxHolds: o.maxHolds(),
	}
}

// warmup is how many untimed operations precede a latency run.
func (o options) warmup() int { return max(o.n/20, 20) }

// maxHolds bounds a hand-over run by count as well as by time.
func (o options) maxHolds() int { return max(o.n, 200) }

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o options
	cases := fs.String("cases", strings.Join(allCases, ","), "comma list of cases to run, among: "+strings.Join(allCases, ","))
	fs.IntVar(&o.n, "n", 2000, "iterations of the uncontended latency workload (and bound on hand-overs)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "how long the throughput and hand-over workloads run")
	fs.StringVar(&o.out, "out", "", "JSON results file (default bench/results/<date>.json)")
	fs.BoolVar(&o.quick, "quick", false, "small numbers, for a smoke run (-n 200 -duration 1s, fewer leases, 2 crashes)")
	fs.DurationVar(&o.renewWindow, "renew-window", 30*time.Second, "renewal: how long each lease count is measured")
	fs.DurationVar(&o.renewSettle, "renew-settle", 10*time.Second, "renewal: how long to let renewals settle after taking the leases, before measuring (0: measure at once)")
	fs.IntVar(&o.crashTrials, "crashes", 5, "crash: how many holder crashes to time")
	fs.IntVar(&o.scalePerNode, "scale-per-node", 1, "scale: goroutines taking locks on each of the 64 nodes")
	fs.DurationVar(&o.scaleDuration, "scale-duration", 20*time.Second, "scale: how long every node takes locks")
	fs.IntVar(&o.churnKeys, "churn-keys", 1_000_000, "churn: distinct keys locked once each (heap read at every tenth)")
	leases := fs.String("leases", "1000,10000,100000", "renewal: comma list of lease counts to hold")
	fs.DurationVar(&o.caseTimeout, "case-timeout", 0, "bound on one case (default: scaled from -n and -duration)")
	fs.StringVar(&o.merge, "merge", "", "run nothing: print the medians of these comma-separated JSON result files")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (in-process cases: floor, lockmesh*, renewal, crash) to this file")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex contention profile of this process to this file")
	fs.StringVar(&o.memProfile, "memprofile", "", "churn: write a heap profile of this process after the last key (mesh still up) to this file")
	fs.StringVar(&o.nodeLog, "node-log", "", "renewal: the node processes log at this level (warn, info, debug) into this program's log; silent when empty")
	fs.StringVar(&o.nodeProfile, "node-profile", "", "renewal: write each node process's CPU profile of the last level's window and its heap profile after it to this directory (v1.cpu, v1.heap, ...)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["n"] {
			o.n = 200
		}
		if !set["duration"] {
			o.duration = time.Second
		}
		if !set["renew-window"] {
			o.renewWindow = 2 * time.Second
		}
		if !set["renew-settle"] {
			o.renewSettle = 0
		}
		if !set["crashes"] {
			o.crashTrials = 2
		}
		if !set["leases"] {
			*leases = "100,1000"
		}
		if !set["scale-duration"] {
			o.scaleDuration = 3 * time.Second
		}
		if !set["churn-keys"] {
			o.churnKeys = 100_000
		}
	}
	for _, c := range strings.Split(*cases, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(allCases, c) {
			return o, fmt.Errorf("-cases: unknown case %q (want some of %s)", c, strings.Join(allCases, ","))
		}
		o.cases = append(o.cases, c)
	}
	for _, s := range strings.Split(*leases, ",") {
		var v int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &v); err != nil || v <= 0 {
			return o, fmt.Errorf("-leases: bad count %q", s)
		}
		o.leaseCounts = append(o.leaseCounts, v)
	}
	if o.n <= 0 || o.duration <= 0 || o.renewWindow <= 0 || o.renewSettle < 0 || o.crashTrials <= 0 ||
		o.scalePerNode <= 0 || o.scaleDuration <= 0 || o.churnKeys < 10 {
		return o, fmt.Errorf("-n, -duration, -renew-window, -crashes, -scale-per-node and -scale-duration must be positive, -renew-settle not negative, -churn-keys at least 10")
	}
	o.workers, o.handoverWorkers, o.hold = 64, 8, time.Millisecond
	o.latencyBudget = 60 * time.Second
	if o.caseTimeout == 0 {
		// Setup, a latency run within its budget, two timed runs, and slack
		// for slow peers (etcd with fsync).
		o.caseTimeout = 2*time.Minute + o.latencyBudget + 4*o.duration
	}
	return o, nil
}

// scaleTimeout bounds the scale case: start and convergence (a quarantine
// of 10 s), the run, and slack for 64 nodes on 2 cores.
func (o options) scaleTimeout() time.Duration { return 3*time.Minute + o.scaleDuration }

// churnTimeout bounds the churn case: setup, then the keys at no fewer
// than 2,000 a second.
func (o options) churnTimeout() time.Duration {
	return 2*time.Minute + time.Duration(o.churnKeys/2000)*time.Second
}

func (o options) want(c string) bool { return slices.Contains(o.cases, c) }

// startProfiles starts the profiles asked for; the function it returns
// stops them and writes them out.
func startProfiles(o options) (func() error, error) {
	var cpu *os.File
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpu = f
	}
	if o.mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if o.mutexProfile != "" {
			f, err := os.Create(o.mutexProfile)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			errs = append(errs, pprof.Lookup("mutex").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.merge != "" {
		rep, err := mergeReports(strings.Split(o.merge, ","))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Print(rep.markdown())
		return
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	o.root = root
	stopProfiles, err := startProfiles(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	rep := run(context.Background(), o, os.Stderr)
	if err := stopProfiles(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing a profile:", err)
	}
	rep.Command = "go run ./bench " + strings.Join(os.Args[1:], " ")
	fmt.Print(rep.markdown())
	path, err := rep.write(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing the results:", err)
		os.Exit(1)
	}
	fmt.Printf("\nAll figures: %s\n", path)
	if rep.Panics > 0 {
		// A panic is a programming error (here or in the code measured):
		// the table is out, but the run must not look clean.
		os.Exit(3)
	}
}
