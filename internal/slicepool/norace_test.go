//go:build !race

package slicepool

const raceEnabled = false
