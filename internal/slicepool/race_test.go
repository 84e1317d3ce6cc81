//go:build race

package slicepool

// raceEnabled: under the race detector sync.Pool drops a quarter of what
// it is given, on purpose, so a Get may allocate.
const raceEnabled = true
