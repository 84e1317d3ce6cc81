package quorum

import "time"

// Clock is the only way the core learns the time. The mesh passes a real
// clock; the simulator passes virtual clocks that drift.
type Clock interface {
	// Now is monotonic time since an arbitrary origin. It never goes back.
	// Every duration the protocol measures (lease deadlines, exclusion
	// timers, quarantine) is measured with it, on one node.
	Now() time.Duration
	// WallMicros is wall-clock time in microseconds since 1970 UTC. It is
	// read only for the epoch floor that keeps tokens increasing across a
	// restart of every node (see package documentation).
	WallMicros() int64
}
