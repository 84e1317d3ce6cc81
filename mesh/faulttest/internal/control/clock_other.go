//go:build !linux

package control

import "time"

// Now is the wall clock in nanoseconds where CLOCK_MONOTONIC cannot be read
// directly (the fault suite itself runs on Linux only).
func Now() int64 { return time.Now().UnixNano() }
