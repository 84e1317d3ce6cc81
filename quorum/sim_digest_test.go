package quorum

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var simDigest = flag.String("sim.digest", "", "write a digest of every TestSimulation run of -sim.first and -sim.seeds to this file, to compare two builds' runs")

// TestSimulationDigest pins what the simulator does, so that a change meant
// to make it faster can be shown to change nothing: for each seed and voter
// count it runs the seed twice, with and without a trace, and writes one
// line of digests of the trace, the statistics, the failures, the checker's
// findings, the histories porcupine checks, the events run and the next
// random draw. Two builds that write the same file ran the same runs.
//
//	go test ./quorum -run TestSimulationDigest -sim.digest=/tmp/a.txt -sim.seeds=60
func TestSimulationDigest(t *testing.T) {
	if *simDigest == "" {
		t.Skip("no -sim.digest given")
	}
	seeds := *simSeeds
	if seeds == 0 {
		seeds = 60
	}
	sizes := voterSizes(t)
	type job struct {
		i   int
		cfg simConfig
	}
	jobs := make(chan job)
	lines := make([]string, seeds*len(sizes))
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				lines[j.i] = simDigestLine(j.cfg)
			}
		}()
	}
	for i := 0; i < seeds; i++ {
		for v, voters := range sizes {
			seed := *simFirst + int64(i)*max(*simStride, 1)
			jobs <- job{i*len(sizes) + v, soakConfig(seed, voters)}
		}
	}
	close(jobs)
	wg.Wait()
	if err := os.WriteFile(*simDigest, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// simDigestLine runs cfg with and without a trace and digests both runs.
func simDigestLine(cfg simConfig) string {
	digest := func(s *sim) string {
		h := sha256.New()
		fmt.Fprintf(h, "%v\n%v\n%q\n%d %d %d\n", s.stats, s.check, s.fail, s.seq, s.now, s.rand.Int63())
		for era, hist := range s.check.hist {
			for _, key := range hist.Keys() {
				fmt.Fprintf(h, "era %d %q %+v\n", era, key, hist.Ops(key))
			}
		}
		return fmt.Sprintf("%x", h.Sum(nil)[:8])
	}
	plain := newSim(cfg)
	plain.run()
	cfg.Trace = true
	traced := newSim(cfg)
	traced.run()
	trace := sha256.Sum256([]byte(strings.Join(traced.trace, "\n")))
	return fmt.Sprintf("seed %d voters %d: run %s traced %s trace %x (%d lines) fail %d",
		cfg.Seed, cfg.Voters, digest(plain), digest(traced), trace[:8], len(traced.trace), len(plain.fail))
}
