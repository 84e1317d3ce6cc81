package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/mesh"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// The scale case: a mesh of many nodes, few of them voters, every node
// taking locks at once. All nodes live in this process: 64 processes would
// be 64 Go runtimes (garbage collectors, schedulers) on 2 cores, measuring
// the machine more than the mesh.

const (
	scaleVoters = 5
	scaleNodes  = 64
	// scaleKeysPerWorker: each goroutine cycles over keys of its own, so
	// that the load spreads over the key space as many users' would.
	scaleKeysPerWorker = 16
)

// Figures of the scale row (Row.Figures).
const (
	figStart         = "start_s"                   // first mesh.New to the last one returning
	figReady         = "ready_s"                   // first mesh.New to every node ready (WaitReady)
	figConverge      = "converge_s"                // ... to every node seeing every node and every voter live
	figVoterCPU      = "voter_cpu_us_per_op"       // CPU of the voters' goroutines per pair
	figNonVoterCPU   = "nonvoter_cpu_us_per_op"    // CPU of the non-voters' goroutines per pair
	figOtherCPU      = "unlabelled_cpu_us_per_op"  // GC workers, scheduler: nobody's
	figNodeOpsMin    = "node_pairs_min"            // pairs done by the slowest node
	figNodeOpsMax    = "node_pairs_max"            // and by the fastest
	figVoterShare    = "voter_pairs_share_percent" // share of the pairs taken by voters' own goroutines
	figIdleCPU       = "idle_cpu_percent"          // the process's CPU with no lock taken, % of a core
	figRoundsPerOp   = "rounds_per_pair"           // ballot rounds started per pair, all nodes
	figTimeouts      = "round_timeouts"            // rounds that timed out during the run
	figStalled       = "stalled_seconds"           // whole seconds of the run in which no pair finished
	figSlowestSecond = "slowest_second_pairs"      // pairs finished in the run's slowest whole second
	figDiverged      = "nodes_diverged_after"      // nodes that no longer saw every node and voter live after the run
	figPairs         = "pairs"                     // curve: pairs finished in each second of the run
	figCounter       = "counter:"                  // prefix: a trouble counter's increase over the run, all nodes
)

// scaleIdleWindow is how long the idle mesh's CPU is measured.
const scaleIdleWindow = 3 * time.Second

// roleLabel is the pprof label that tells voters' goroutines from others'.
const roleLabel = "role"

// roleOf is the role of node i: the first scaleVoters are the voters.
func roleOf(i int) string {
	if i < scaleVoters {
		return "voter"
	}
	return "nonvoter"
}

// scale starts 5 voters and 59 non-voters, every node joining through
// gossip alone (seeds: the voters), times how long the mesh takes to
// converge, then runs o.scalePerNode goroutines on every node, each doing
// Acquire+Release on keys of its own for o.scaleDuration. With disk, each
// voter keeps its state in a data directory of its own (a brand-new mesh
// then votes without waiting out a quarantine).
func scale(ctx context.Context, o options, name string, disk bool) workload.Row {
	state := "state in memory"
	if disk {
		state = "voters' state in data dirs (Config.DataDir on " + os.TempDir() + ", fsync on)"
	}
	goroutines := "1 goroutine"
	if o.scalePerNode > 1 {
		goroutines = fmt.Sprintf("%d goroutines", o.scalePerNode)
	}
	row := workload.Row{Case: name, LoadedLatency: true, Figures: map[string]float64{},
		Setup: fmt.Sprintf("lockmesh, %d nodes in 1 process (%d voters, %d non-voters), loopback TCP, %s, memberlist gossip (DefaultLocalConfig), "+
			"DefaultConfig timing (TTL 10 s, round timeout 250 ms), %s on every node, each on %d keys of its own; latency under that load",
			scaleNodes, scaleVoters, scaleNodes-scaleVoters, state, goroutines, scaleKeysPerWorker)}
	dir := ""
	if disk {
		var err error
		if dir, err = os.MkdirTemp("", "lockmesh-bench"); err != nil {
			row.Error = err.Error()
			return row
		}
		defer os.RemoveAll(dir)
	}
	start := time.Now()
	nodes, err := startScaleMesh(ctx, dir)
	defer shutdownAll(nodes) // before the data dirs go
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Figures[figStart] = time.Since(start).Seconds()
	ready, converged, err := waitConverged(ctx, nodes, start)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Figures[figReady], row.Figures[figConverge] = ready.Seconds(), converged.Seconds()
	if err := measureScale(ctx, o, nodes, &row); err != nil {
		row.Error = err.Error()
	}
	row.Notes = append(row.Notes,
		"one process: 64 node processes would be 64 Go runtimes on 2 cores",
		"non-voters have Config.Voters set to the 5 voters (not among them); every node's only seeds are the voters: the rest of the membership comes by gossip",
		"p50/p99: every pair of the throughput run, all goroutines at once (not one goroutine alone, hence no ×floor)",
		"voters' CPU: CPU profile samples of goroutines labelled with their node's role (pprof labels, inherited by every goroutine a node starts), over all pairs; unlabelled: the garbage collector's workers and the runtime",
		"converge: first mesh.New to every node seeing all 64 members alive with a ballot address and all 5 voters live (Status); ready: to every node's WaitReady (a majority of voters live)")
	if !disk {
		row.Notes = append(row.Notes, "no data dir: the voters wait out a quarantine of a full TTL (10 s) before they vote, as nobody can know the mesh is new")
	}
	return row
}

// startScaleMesh starts the voters v1..v5, then the non-voters n01..n59,
// each seeded with the voters started before it. With dir set, each voter
// keeps its state in dir/<name>. It returns the nodes started, even on
// error (to be shut down).
func startScaleMesh(ctx context.Context, dir string) ([]*mesh.Mesh, error) {
	var voters, seeds []string
	for i := range scaleVoters {
		voters = append(voters, fmt.Sprintf("v%d", i+1))
	}
	var nodes []*mesh.Mesh
	for i := range scaleNodes {
		cfg := mesh.DefaultLocalConfig()
		lanTiming(cfg)
		cfg.Voters = voters
		cfg.Seed = int64(i + 1)
		cfg.Seeds = slices.Clone(seeds)
		cfg.Name = fmt.Sprintf("n%02d", i-scaleVoters+1)
		if i < scaleVoters {
			cfg.Name = voters[i]
			if dir != "" {
				cfg.DataDir = filepath.Join(dir, cfg.Name)
			}
		}
		var (
			m   *mesh.Mesh
			err error
		)
		// The node's goroutines inherit the label: its CPU can be told
		// apart in a profile (cpulabels.go).
		labelled(ctx, roleLabel, roleOf(i), func() { m, err = mesh.New(cfg) })
		if err != nil {
			return nodes, fmt.Errorf("starting %s: %w", cfg.Name, err)
		}
		nodes = append(nodes, m)
		if i < scaleVoters {
			seeds = append(seeds, m.Addr())
		}
	}
	return nodes, nil
}

// measureScale measures the converged mesh: its CPU while idle, then every
// node taking locks, and fills row.
func measureScale(ctx context.Context, o options, nodes []*mesh.Mesh, row *workload.Row) error {
	workers := len(nodes) * o.scalePerNode
	lockers := make([]meshLocker, workers)
	keys := make([][]string, workers)
	for w := range workers {
		n := nodes[w%len(nodes)]
		lockers[w] = meshLocker{n}
		for k := range scaleKeysPerWorker {
			keys[w] = append(keys[w], fmt.Sprintf("scale/%s/%d/%d", n.Name(), w/len(nodes), k))
		}
	}
	// One untimed pair per goroutine first: connections to the voters
	// are dialled on first use.
	if err := warmUp(ctx, lockers, keys); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	idle, err := idleCPU(ctx, scaleIdleWindow)
	if err != nil {
		return fmt.Errorf("idle CPU: %w", err)
	}
	row.Figures[figIdleCPU] = idle

	var (
		perWorker []int
		runErr    error
		done      atomic.Int64 // pairs finished, for the rate second by second
	)
	run := func() {
		row.Throughput, row.Latency, perWorker, runErr = workload.TimedThroughput(ctx, workers, o.scaleDuration, func(w int) (workload.Op, error) {
			lctx := pprof.WithLabels(ctx, pprof.Labels(roleLabel, roleOf(w%len(nodes))))
			i := 0
			return func(ctx context.Context) error {
				pprof.SetGoroutineLabels(lctx) // what this goroutine starts is its node's
				i++
				err := workload.AcquireRelease(lockers[w], keys[w][i%scaleKeysPerWorker])(ctx)
				if err == nil {
					done.Add(1)
				}
				return err
			}, nil
		}, []workload.CPUSource{workload.Self(fmt.Sprintf("bench (%d nodes and their goroutines)", len(nodes)))})
	}
	counters, err := watchCounters(nodes)
	if err != nil {
		return err
	}
	perSecond := watchRate(ctx, &done)
	before := proposerTotals(nodes)
	var byRole map[string]time.Duration
	if o.cpuProfile == "" {
		byRole, err = cpuByLabel(roleLabel, run)
	} else {
		run() // one CPU profile at a time: -cpuprofile has it
		err = fmt.Errorf("-cpuprofile is on")
	}
	rateFigures(row, perSecond())
	counters(row)
	tp := row.Throughput
	if tp == nil || tp.Ops == 0 {
		return fmt.Errorf("throughput: no pair done (%v)", runErr)
	}
	after := proposerTotals(nodes)
	row.Figures[figRoundsPerOp] = float64(after.Rounds-before.Rounds) / float64(tp.Ops)
	row.Figures[figTimeouts] = float64(after.Timeouts - before.Timeouts)
	nodeFigures(row, nodes, perWorker)
	perOp := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(tp.Ops) }
	if err != nil {
		row.Notes = append(row.Notes, fmt.Sprintf("no CPU split by node role (%v): CPU µs/op is the whole process's", err))
	} else {
		row.Figures[figVoterCPU] = perOp(byRole["voter"])
		row.Figures[figNonVoterCPU] = perOp(byRole["nonvoter"])
		row.Figures[figOtherCPU] = perOp(byRole[""])
	}
	if runErr != nil {
		return fmt.Errorf("throughput: %w", runErr)
	}
	return nil
}

// rateFigures notes the pairs finished in each second of the run, and the
// seconds in which none did.
func rateFigures(row *workload.Row, rates []float64) {
	if len(rates) == 0 {
		return
	}
	stalled := 0
	for i, r := range rates {
		if r == 0 {
			stalled++
		}
		row.Curve = append(row.Curve, workload.Point{At: float64(i + 1), Figures: map[string]float64{figPairs: r}})
	}
	row.Figures[figStalled] = float64(stalled)
	row.Figures[figSlowestSecond] = slices.Min(rates)
}

// nodeFigures notes how the pairs spread over the nodes, and how many
// nodes lost sight of some member or voter by the end of the run.
func nodeFigures(row *workload.Row, nodes []*mesh.Mesh, perWorker []int) {
	perNode := make([]float64, len(nodes))
	for w, n := range perWorker {
		perNode[w%len(nodes)] += float64(n)
	}
	voterOps, total := 0.0, 0.0
	for i, n := range perNode {
		if i < scaleVoters {
			voterOps += n
		}
		total += n
	}
	row.Figures[figNodeOpsMin], row.Figures[figNodeOpsMax] = slices.Min(perNode), slices.Max(perNode)
	row.Figures[figVoterShare] = 100 * voterOps / max(total, 1)
	diverged := 0
	for _, m := range nodes {
		if ok, _ := sees(m.Status(), len(nodes)); !ok {
			diverged++
		}
	}
	row.Figures[figDiverged] = float64(diverged)
}

// waitConverged waits until every node is ready, and until every node
// sees every other alive and every voter live; it returns both times since
// start. It polls Status only on the nodes not yet converged.
func waitConverged(ctx context.Context, nodes []*mesh.Mesh, start time.Time) (ready, converged time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var (
		mu      sync.Mutex
		readyAt time.Duration
		wg      sync.WaitGroup
		errs    []error
	)
	for _, m := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.WaitReady(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.Name(), err))
			}
			readyAt = max(readyAt, time.Since(start))
		}()
	}
	pending := slices.Clone(nodes)
	err = waitEvery(ctx, 100*time.Millisecond, "every node to see every member and every voter", func() (bool, string) {
		pending = slices.DeleteFunc(pending, func(m *mesh.Mesh) bool {
			ok, _ := sees(m.Status(), len(nodes))
			return ok
		})
		if len(pending) == 0 {
			converged = time.Since(start)
			return true, ""
		}
		_, why := sees(pending[0].Status(), len(nodes))
		return false, fmt.Sprintf("%d nodes not there yet; %s", len(pending), why)
	})
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = fmt.Errorf("waiting for every node to be ready: %w", errs[0])
	}
	return readyAt, converged, err
}

// sees reports whether st shows n members alive with a ballot address and
// every voter live, and if not, what is missing.
func sees(st mesh.Status, n int) (bool, string) {
	alive := 0
	for _, mb := range st.Members {
		if mb.State == "alive" && mb.RPCAddr != "" {
			alive++
		}
	}
	if alive < n || len(st.Voters) == 0 || len(st.LiveVoters) < len(st.Voters) {
		return false, fmt.Sprintf("%s: %d of %d members alive, voters %d live of %d", st.Name, alive, n, len(st.LiveVoters), len(st.Voters))
	}
	return true, ""
}

// warmUp runs one Acquire+Release on every locker at once.
func warmUp(ctx context.Context, lockers []meshLocker, keys [][]string) error {
	errs := make([]error, len(lockers))
	var wg sync.WaitGroup
	for i := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = workload.AcquireRelease(lockers[i], keys[i][0])(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// shutdownAll stops the nodes, all at once: one by one, each would wait
// for gossip to the others.
func shutdownAll(nodes []*mesh.Mesh) {
	var wg sync.WaitGroup
	for _, m := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Shutdown()
		}()
	}
	wg.Wait()
}

// scaleMarkdown is the scale row's paragraph: convergence, and the CPU
// per pair by node role.
func scaleMarkdown(b *strings.Builder, row workload.Row, s rowSpread) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	sec := func(v float64) string { return fmt.Sprintf("%.1f s", v) }
	micros := func(v float64) string { return fmt.Sprintf("%.0f µs", v) }
	w("**lockmesh: %d nodes** (%s)", scaleNodes, row.Setup)
	if row.Error != "" {
		w(" — failed: %s", oneLine(row.Error))
	}
	w("\n\n")
	w("- converged (every node sees all %d alive and all %d voters live) %s after the first mesh.New; every node ready %s; the %d mesh.New calls took %s\n",
		scaleNodes, scaleVoters, figure(row, s, figConverge, sec), figure(row, s, figReady, sec), scaleNodes, figure(row, s, figStart, sec))
	if t, l := row.Throughput, row.Latency; t != nil && l != nil && l.N > 0 {
		w("- %s pairs/s over the mesh with %d goroutines; Acquire+Release under that load p50 %s, p99 %s\n",
			withRange(t.OpsPerSec, s.OpsPerSec, count), t.Workers, withRange(l.P50, s.P50, us), withRange(l.P99, s.P99, us))
		w("- CPU per pair: voters %s, non-voters %s, unlabelled (GC workers, runtime) %s; the whole process %s\n",
			figure(row, s, figVoterCPU, micros), figure(row, s, figNonVoterCPU, micros), figure(row, s, figOtherCPU, micros),
			withRange(t.CPUMicrosPerOp, s.CPUPerOp, micros))
		w("- pairs per node over the run: %s to %s; the voters' own goroutines did %s%% of them; %s ballot rounds per pair, %s rounds timed out\n",
			figure(row, s, figNodeOpsMin, count), figure(row, s, figNodeOpsMax, count),
			figure(row, s, figVoterShare, func(v float64) string { return fmt.Sprintf("%.1f", v) }),
			figure(row, s, figRoundsPerOp, func(v float64) string { return fmt.Sprintf("%.2f", v) }),
			figure(row, s, figTimeouts, count))
	}
	w("- idle (converged, no lock taken, %v): the process used %s of a core\n", scaleIdleWindow,
		figure(row, s, figIdleCPU, func(v float64) string { return fmt.Sprintf("%.0f%%", v) }))
	w("- stalls: %s whole seconds of the run with no pair finished (the slowest second: %s pairs); %s nodes no longer saw every node and voter live after the run\n",
		figure(row, s, figStalled, count), figure(row, s, figSlowestSecond, count), figure(row, s, figDiverged, count))
	var trouble []string
	for _, name := range slices.Sorted(maps.Keys(row.Figures)) {
		c, ok := strings.CutPrefix(name, figCounter)
		if ok && slices.Max(append([]float64{row.Figures[name]}, s.Figures[name]...)) > 0 {
			trouble = append(trouble, c+" "+figure(row, s, name, count))
		}
	}
	if len(trouble) > 0 {
		w("- other counters that moved during the run (all nodes): %s\n", strings.Join(trouble, ", "))
	}
	if s.Figures == nil && len(row.Curve) > 0 {
		var rates []string
		for _, p := range row.Curve {
			rates = append(rates, count(p.Figures[figPairs]))
		}
		w("- pairs finished in each second of the run: %s\n", strings.Join(rates, ", "))
	}
	w("\n")
}
