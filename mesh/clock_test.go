package mesh

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Clock shared by every node moves them together, as a mesh whose every
// process paused: a lease held across the pause is lost, and lost at once
// (no timer had to run in real time), and another node is granted the key
// without waiting out a TTL in real time, since the voters' timers passed
// too. (It may wait a round trip: a renewal in flight across the pause
// can reach the voters after it, and the holder's node then lets that
// grant go.)
func TestSharedClockPausesTheMesh(t *testing.T) {
	var clk Clock
	c := newCluster(t, clusterOpts{voters: 3, tweak: func(cfg *Config) { cfg.Clock = &clk }})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	clk.Advance(2 * l.TTL())
	if got := clk.Ahead(); got != 2*l.TTL() {
		t.Errorf("Ahead %v after Advance(%v)", got, 2*l.TTL())
	}
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Err right after the pause: %v, want ErrLeaseLost", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("Done taken before the pause still open 5 s after it")
	}
	start := time.Now()
	next, err := c.nodes[1].Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("another node's acquire after the pause: %v", err)
	}
	if next.Token() <= l.Token() {
		t.Errorf("token %d after %d", next.Token(), l.Token())
	}
	if took := time.Since(start); took > l.TTL()/2 {
		t.Errorf("the acquire took %v: it waited for the voters' timers in real time", took)
	}
}

// Advance of zero or less does not move the clock; a node started on a
// Clock already moved starts from where it is.
func TestClockAdvanceNeverBack(t *testing.T) {
	var clk Clock
	clk.Advance(time.Second)
	nc := newClock(&clk)
	before := nc.Now()
	clk.Advance(-time.Hour)
	clk.Advance(0)
	if clk.Ahead() != time.Second {
		t.Errorf("Ahead %v, want 1s", clk.Ahead())
	}
	if now := nc.Now(); now < before || now > before+time.Second/2 {
		t.Errorf("a node started on a moved clock reads %v, then %v", before, now)
	}
}

// A node acts on its Clock's Advance at once, not at its next timer: a
// quiet node (one voter, nothing to probe) whose clock moves past a
// lease's notice time tells the holder within milliseconds, while its
// renewal timer would run a third of the TTL after the grant.
func TestClockAdvanceWakesTheNode(t *testing.T) {
	var clk Clock
	c := newCluster(t, clusterOpts{voters: 1, tweak: func(cfg *Config) { cfg.Clock = &clk }})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	margin := c.nodes[0].cfg.Timing.NoticeMargin
	m := c.nodes[0]
	waitFor(t, 5*time.Second, "the timer armed for the renewal", func() bool {
		m.nodeMu.Lock()
		defer m.nodeMu.Unlock()
		return m.armed-m.clock.Now() < l.TTL()
	})
	start := time.Now()
	clk.Advance(time.Until(l.Deadline()) - margin/2) // past the notice, before the deadline
	select {
	case <-done:
	case <-time.After(l.TTL() / 10):
		t.Fatalf("the node did not act on the clock within %v", l.TTL()/10)
	}
	t.Logf("lost %v after Advance", time.Since(start))
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Err %v, want ErrLeaseLost", err)
	}
}
