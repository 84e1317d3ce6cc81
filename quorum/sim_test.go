package quorum

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	simSeed   = flag.Int64("sim.seed", 0, "replay one simulated run with this seed (with -sim.voters and -sim.bug)")
	simVoters = flag.Int("sim.voters", 3, "voters of the replayed run")
	simBug    = flag.String("sim.bug", "", "rule broken in the replayed run")
	simTrace  = flag.String("sim.trace", "", "write the replayed run's whole trace to this file")
	simSeeds  = flag.Int("sim.seeds", 0, "seeds in TestSimulation, each run with 3, 5 and 7 voters unless -sim.sizes says otherwise (default 1000; 34 under -race; 20 with -short)")
	simFirst  = flag.Int64("sim.first", 1, "first seed of TestSimulation: shards of a long soak start at different seeds")
	simCheck  = flag.Duration("sim.checktimeout", 0, "how long porcupine may take over one key's history before the run fails (default 20s; 60s in a soak)")
	simSizes  = flag.String("sim.sizes", "3,5,7", "voter counts TestSimulation runs each seed with")
	simStride = flag.Int64("sim.stride", 1, "step between TestSimulation's seeds: 2 from an even -sim.first runs only the seeds that change voters")
	simReads  = flag.Float64("sim.reads", 0, "share of the clients' operations that are reads (default 0.15)")
	simForget = flag.Bool("sim.forgetful", false, "every run's voters drop idle registers, and its proposers idle keys, all the time")
	simObs    = flag.Bool("sim.observe", false, "every run's nodes observe every key, as TestSimulationObserve's runs do (checks O1 to O4 too)")
)

// soakConfig is seed's run with the voters given, as TestSimulation and
// TestSimulationReplay run it: the defaults, aimed by -sim.reads and
// -sim.forgetful.
func soakConfig(seed int64, voters int) simConfig {
	cfg := defaultSimConfig(seed, voters)
	if *simReads > 0 {
		cfg.ReadShare = *simReads
	}
	if *simForget {
		smallRegisters(&cfg)
		smallIdle(&cfg)
	}
	if *simObs {
		observing(&cfg)
	}
	return cfg
}

// soakFlags are the flags a replay needs to run what soakConfig made.
func soakFlags() string {
	var b strings.Builder
	if *simReads > 0 {
		fmt.Fprintf(&b, " -sim.reads=%v", *simReads)
	}
	if *simForget {
		b.WriteString(" -sim.forgetful")
	}
	if *simObs {
		b.WriteString(" -sim.observe")
	}
	return b.String()
}

// replayLine is the command that replays a run of cfg, if TestSimulationReplay
// can: a run of soakConfig's, or of observeConfig's, with a bug or none.
// Any other run (scripted, or tweaked by its test) is replayed by its test.
func replayLine(cfg simConfig) string {
	cmd := fmt.Sprintf("go test ./quorum -run TestSimulationReplay -v -sim.seed=%d -sim.voters=%d%s", cfg.Seed, cfg.Voters, bugFlag(cfg.Bug))
	same := func(c simConfig) bool {
		c.Bug, c.Trace = cfg.Bug, cfg.Trace
		return cfg.Script == nil && cfg.Delay == nil && reflect.DeepEqual(c, cfg)
	}
	switch {
	case same(soakConfig(cfg.Seed, cfg.Voters)):
		return cmd + soakFlags()
	case *simReads == 0 && !*simForget && !*simObs && same(observeConfig(cfg.Seed, cfg.Voters)):
		return cmd + " -sim.observe"
	}
	return "none by seed: the test that made this run set its configuration; run that test again"
}

// voterSizes parses -sim.sizes.
func voterSizes(t *testing.T) []int {
	var sizes []int
	for _, f := range strings.Split(*simSizes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 9 {
			t.Fatalf("-sim.sizes=%q: want voter counts from 1 to 9, comma-separated", *simSizes)
		}
		sizes = append(sizes, v)
	}
	return sizes
}

// checkTimeout is how long the linearizability check of one key's history
// may take; a check that does not finish fails the run. A soak runs far
// more seeds, and meets the rare history of hundreds of operations with
// dozens of writes of unknown outcome that takes longer (soak seed 201685
// with 7 voters: 414 operations, 44 such writes, 39 s), so it waits longer.
func checkTimeout() time.Duration {
	switch {
	case *simCheck > 0:
		return *simCheck
	case os.Getenv("LOCKMESH_SOAK") != "":
		return 60 * time.Second
	}
	return 20 * time.Second
}

// defaultSeeds is how many seeds TestSimulation runs unless told: 1,000
// (3,000 runs, two to three minutes on two cores; issue 11 asks CI for at
// least 1,000 seeds), 34 under the race detector (the README's test
// command, where the detector has nothing to watch in the one-goroutine
// simulator and makes it five times slower; .ci/run runs the full count
// without it), and 20 with -short.
func defaultSeeds() int {
	switch {
	case testing.Short():
		return 20
	case raceEnabled:
		return 34
	}
	return 1000
}

// TestSimulation runs many seeded runs of 3, 5 and 7 voters plus two
// non-voting proposers through drops, duplicates, long delays, partitions,
// one-way cuts, crashes and full restarts, checking every invariant at every
// step, linearizability at the end, and liveness after the faults heal.
//
// LOCKMESH_SOAK=30m turns it into a soak: seeds run until the time is up.
// -sim.first and -sim.seeds shard a long soak over machines (each runs its
// own range over all its cores); -sim.sizes and -sim.stride aim one where
// bugs were found (-sim.sizes=3 -sim.stride=2 from an even seed: only runs
// of three voters that change voters), and -sim.reads and -sim.forgetful
// at reads of keys the voters keep forgetting.
func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		t.Skip("replaying one seed: see TestSimulationReplay")
	}
	// The runs allocate fast and keep little: collect less often (a
	// fifth of the time went to the collector at the default).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	seeds := defaultSeeds()
	sizes := voterSizes(t)
	stride := *simStride
	if stride < 1 {
		t.Fatalf("-sim.stride=%d: want 1 or more", stride)
	}
	if *simReads < 0 || *simReads > 1 {
		t.Fatalf("-sim.reads=%v: want a share from 0 to 1", *simReads)
	}
	if *simSeeds > 0 {
		seeds = *simSeeds
	}
	var soak time.Duration
	if v := os.Getenv("LOCKMESH_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LOCKMESH_SOAK=%q: %v", v, err)
		}
		soak = d
	}
	type job struct {
		seed   int64
		voters int
	}
	jobs := make(chan job)
	var (
		mu       sync.Mutex
		runs     int
		total    simStats
		failures []string
		maxWait  time.Duration
		maxCheck time.Duration
		handover []time.Duration
	)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				s := newSim(soakConfig(j.seed, j.voters))
				s.run()
				mu.Lock()
				runs++
				total = addStats(total, s.stats)
				maxWait = max(maxWait, s.check.maxWait)
				maxCheck = max(maxCheck, s.check.longestCheck)
				handover = append(handover, s.check.maxHandover)
				if len(s.fail) > 0 {
					failures = append(failures, failureReport(s))
					if soak > 0 {
						// A soak runs for hours: say what failed now, not at the end.
						t.Logf("soak: seed %d, %d voters: %s", j.seed, j.voters, s.fail[0])
					}
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := 0; ; i++ {
		if soak > 0 {
			if time.Since(start) > soak {
				break
			}
		} else if i >= seeds {
			break
		}
		for _, v := range sizes {
			jobs <- job{seed: *simFirst + int64(i)*stride, voters: v}
		}
		if soak > 0 && i%100 == 99 {
			mu.Lock()
			t.Logf("soak: %d runs, %d failures, %v", runs, len(failures), time.Since(start).Round(time.Second))
			mu.Unlock()
		}
		mu.Lock()
		stop := len(failures) >= 3
		mu.Unlock()
		if stop {
			break
		}
	}
	close(jobs)
	wg.Wait()
	slices.Sort(handover)
	t.Logf("%d simulated runs in %v; longest wait after heal %v; longest hand-over after heal per run: median %v, p90 %v, max %v; longest linearizability check of a key %v (the limit: %v)",
		runs, time.Since(start).Round(time.Millisecond), maxWait, pick(handover, 0.5), pick(handover, 0.9), pick(handover, 1),
		maxCheck.Round(time.Millisecond), checkTimeout())
	t.Logf("faults and work: %v", total)
	for _, f := range failures {
		t.Error(f)
	}
}

// TestSimulationReplay replays one seed with a full trace:
//
//	go test ./quorum -run TestSimulationReplay -sim.seed=N -sim.voters=V [-sim.bug=B]
func TestSimulationReplay(t *testing.T) {
	if *simSeed == 0 {
		t.Skip("no -sim.seed given")
	}
	cfg := soakConfig(*simSeed, *simVoters)
	cfg.Bug = *simBug
	cfg.Trace = true
	s := newSim(cfg)
	s.run()
	writeTrace(t, s)
	t.Logf("stats: %v; %v", s.stats, s.check)
	if len(s.fail) > 0 {
		t.Log(strings.Join(tail(s.trace, 200), "\n"))
		t.Fatal(strings.Join(s.fail, "\n"))
	}
}

// failureReport names the violation, replays the seed with tracing to show
// what led to it, and prints the command that replays it.
func failureReport(s *sim) string {
	cfg := s.orig // as the run began: the aimed faults change s.cfg
	cfg.Trace = true
	r := newSim(cfg)
	r.run()
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d voters%s: %s\n", cfg.Seed, cfg.Voters, bugNote(cfg.Bug), s.fail[0])
	fmt.Fprintf(&b, "replay: %s\n", replayLine(s.orig))
	fmt.Fprintf(&b, "trace before the violation:\n%s", strings.Join(tail(r.trace, 40), "\n"))
	return b.String()
}

func bugNote(b string) string {
	if b == "" {
		return ""
	}
	return ", bug " + strconv.Quote(b)
}

func bugFlag(b string) string {
	if b == "" {
		return ""
	}
	return " -sim.bug=" + b
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// addStats sums every counter of two runs' statistics.
func addStats(a, b simStats) simStats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		f := va.Field(i)
		f.SetInt(f.Int() + vb.Field(i).Int())
	}
	return a
}

// pick is the q-quantile of sorted durations (zero when there are none).
func pick(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// writeTrace writes a replayed run's whole trace to -sim.trace, if given.
func writeTrace(t *testing.T, s *sim) {
	t.Helper()
	if *simTrace == "" {
		return
	}
	if err := os.WriteFile(*simTrace, []byte(strings.Join(s.trace, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
