//go:build race

package faulttest

// raceEnabled: the tests run with -race, and so do the node processes.
const raceEnabled = true
