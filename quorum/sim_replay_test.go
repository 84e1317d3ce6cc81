package quorum

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// failureReport's replay line names TestSimulationReplay only for the runs
// it can replay: TestSimulation's (soakConfig) and TestSimulationObserve's
// (observeConfig, with -sim.observe), with their bugs, as the run began
// (the aimed faults change the run's configuration as it goes). Any other
// run is its test's own.
func TestReplayLineNamesOnlyWhatReplays(t *testing.T) {
	if *simReads != 0 || *simForget || *simObs {
		t.Skip("the soak flags change what soakConfig makes")
	}
	const want = "go test ./quorum -run TestSimulationReplay -v -sim.seed=7 -sim.voters=3"
	if got := replayLine(soakConfig(7, 3)); got != want {
		t.Errorf("a soak run's replay: %q, want %q", got, want)
	}
	buggy := soakConfig(7, 3)
	buggy.Bug = "short-quarantine"
	if got := replayLine(buggy); got != want+" -sim.bug=short-quarantine" {
		t.Errorf("a soak run with a bug: %q", got)
	}
	if got := replayLine(observeConfig(7, 3)); got != want+" -sim.observe" {
		t.Errorf("an observer run's replay: %q, want %q", got, want+" -sim.observe")
	}
	observed := soakConfig(7, 3)
	observing(&observed)
	if !reflect.DeepEqual(observed, observeConfig(7, 3)) {
		t.Errorf("-sim.observe's configuration is not TestSimulationObserve's")
	}
	tweaked := soakConfig(7, 3)
	tweaked.Keys++
	scripted := faultFree(7, 3, 2, 1, 1)
	scripted.Script = func(*sim) {}
	for name, cfg := range map[string]simConfig{"tweaked": tweaked, "scripted": scripted} {
		if got := replayLine(cfg); strings.HasPrefix(got, "go test") {
			t.Errorf("a %s run is said to replay by a seed: %q", name, got)
		}
	}
	// Seed 7 is aimed: its run sets its own Delay.
	s := newSim(soakConfig(7, 3))
	if !s.cfg.Aimed {
		t.Fatalf("seed 7 is not aimed")
	}
	s.run()
	if s.cfg.Delay == nil || s.orig.Delay != nil {
		t.Fatalf("the aimed run's Delay: set %v, at the start %v", s.cfg.Delay != nil, s.orig.Delay != nil)
	}
	if got := replayLine(s.orig); got != want {
		t.Errorf("the aimed run's replay: %q, want %q", got, want)
	}
}

// TestSimulationReplayFaultFree replays the fault-free run of -sim.seed that
// TestHandOverNeverWaitsOutAnUnchosenGrant makes (8 clients on one key) and
// writes its trace to /tmp/trace.txt: a run to read when a hand-over is
// slow.
func TestSimulationReplayFaultFree(t *testing.T) {
	if *simSeed == 0 {
		t.Skip("no -sim.seed")
	}
	cfg := faultFree(*simSeed, 3, 1, 2, 1)
	cfg.Trace = true
	s := newSim(cfg)
	s.run()
	os.WriteFile("/tmp/trace.txt", []byte(strings.Join(s.trace, "\n")), 0o644)
}
