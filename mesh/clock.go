package mesh

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a clock that a test moves ahead at once (Config.Clock). A node
// that reads it sees, after Advance(d), what it would see as its process
// resumed from a pause of d, every goroutine at the same moment, and acts
// on it at once: a lease whose deadline has passed is lost, renewals and
// retries that fell due run, a quarantine that ran out ends. Timers that
// had not fallen due keep running in real time from the new reading.
//
// Several nodes may share a Clock: they then move together, as a mesh
// whose every process paused for the same time, which keeps every
// lease's bounds (see package lease). Moving one node's clock alone is a
// pause of that node only; package meshtest does it to make a lease be
// lost now. It moves only the monotonic clock that leases, rounds and
// timers read, never the wall clock (Config.WallClock).
//
// The zero Clock reads the process's monotonic clock; it never moves back.
type Clock struct {
	ahead atomic.Int64 // nanoseconds Advance moved it, in all
	mu    sync.Mutex
	nodes map[*Mesh]struct{} // nodes that read it, woken by Advance
}

// Advance moves the clock ahead by d (zero or negative: not at all) and
// has every node that reads it act on the new time now.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.ahead.Add(int64(d))
	c.mu.Lock()
	nodes := make([]*Mesh, 0, len(c.nodes))
	for m := range c.nodes {
		nodes = append(nodes, m)
	}
	c.mu.Unlock()
	for _, m := range nodes {
		m.kickTimer()
		m.kickReady()
	}
}

// Ahead is how far Advance moved the clock, in all.
func (c *Clock) Ahead() time.Duration { return time.Duration(c.ahead.Load()) }

func (c *Clock) attach(m *Mesh) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = make(map[*Mesh]struct{})
	}
	c.nodes[m] = struct{}{}
}

func (c *Clock) detach(m *Mesh) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, m)
}

// nodeClock is the mesh's quorum.Clock: monotonic time since the mesh
// started (Go's time.Since reads the monotonic clock) plus how far its
// Clock moved since, and the wall clock only for the epoch floor.
type nodeClock struct {
	start time.Time
	wall  func() time.Time // Config.WallClock; nil: time.Now
	lead  *Clock           // Config.Clock, or the node's own
	base  time.Duration    // lead.Ahead() when the node started
}

func newClock(lead *Clock) *nodeClock {
	if lead == nil {
		lead = &Clock{}
	}
	return &nodeClock{start: time.Now(), lead: lead, base: lead.Ahead()}
}

func (c *nodeClock) Now() time.Duration { return time.Since(c.start) + c.skippedBy() }

func (c *nodeClock) WallMicros() int64 {
	if c.wall != nil {
		return c.wall().UnixMicro()
	}
	return time.Now().UnixMicro()
}

// at converts a time on the mesh clock to a time.Time.
func (c *nodeClock) at(d time.Duration) time.Time { return c.start.Add(d - c.skippedBy()) }

// since converts a time.Time to the mesh clock.
func (c *nodeClock) since(t time.Time) time.Duration { return t.Sub(c.start) + c.skippedBy() }

// skippedBy is how far the clock moved ahead of the process's since the
// node started.
func (c *nodeClock) skippedBy() time.Duration { return c.lead.Ahead() - c.base }
