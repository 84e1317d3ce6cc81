package mesh

import (
	"sync/atomic"
	"time"
)

// clock is the mesh's quorum.Clock: monotonic time since the mesh started
// (Go's time.Since reads the monotonic clock), and the wall clock only for
// the epoch floor.
type clock struct {
	start time.Time
	wall  func() time.Time // Config.WallClock; nil: time.Now
	// skipped is how far tests moved the clock ahead at once (zero
	// otherwise): what the process sees after a pause of that long, every
	// goroutine at the same moment, before any of them has run.
	skipped atomic.Int64
}

func newClock() *clock { return &clock{start: time.Now()} }

func (c *clock) Now() time.Duration { return time.Since(c.start) + c.skippedBy() }

func (c *clock) WallMicros() int64 {
	if c.wall != nil {
		return c.wall().UnixMicro()
	}
	return time.Now().UnixMicro()
}

// at converts a time on the mesh clock to a time.Time.
func (c *clock) at(d time.Duration) time.Time { return c.start.Add(d - c.skippedBy()) }

// since converts a time.Time to the mesh clock.
func (c *clock) since(t time.Time) time.Duration { return t.Sub(c.start) + c.skippedBy() }

func (c *clock) skippedBy() time.Duration { return time.Duration(c.skipped.Load()) }
