//go:build race

package quorum

// raceEnabled: the tests run under the race detector, which makes the
// simulator about five times slower; TestSimulation then runs fewer seeds
// by default (.ci/run runs the full count without it).
const raceEnabled = true
