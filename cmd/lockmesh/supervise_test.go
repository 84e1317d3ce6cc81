package main

import (
	"testing"
	"time"
)

// TestTiming: when lock stops and kills CMD, relative to its bound of the
// lease's deadline.
func TestTiming(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	tm := newTiming(t0.Add(1000*ms), 2*time.Second, 200*ms) // a 2 s lease, 1 s left
	if tm.notice != 200*ms || tm.killMargin != 50*ms {
		t.Fatalf("notice %v, kill margin %v; want 200ms, 50ms", tm.notice, tm.killMargin)
	}
	if got := tm.stopAt(); !got.Equal(t0.Add(800 * ms)) {
		t.Errorf("stopAt %v, want the bound less the notice", got.Sub(t0))
	}
	for _, tc := range []struct {
		name       string
		now, grace time.Duration // since t0
		want       time.Duration // kill, since t0
	}{
		{"grace fits", 100 * ms, 300 * ms, 400 * ms},
		{"grace cut to the kill margin", 800 * ms, 2 * time.Second, 950 * ms},
		{"past the kill margin: at once", 960 * ms, time.Second, 960 * ms},
		{"past the bound: at once", 2 * time.Second, time.Second, 2 * time.Second},
	} {
		if got := tm.killAt(t0.Add(tc.now), tc.grace).Sub(t0); got != tc.want {
			t.Errorf("%s: kill at %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := tm.moved(t0.Add(500 * ms)).bound; !got.Equal(tm.bound) {
		t.Errorf("an older bound moved it back to %v", got.Sub(t0))
	}
	if got := tm.moved(t0.Add(1500 * ms)).bound; !got.Equal(t0.Add(1500 * ms)) {
		t.Errorf("a newer bound did not move it: %v", got.Sub(t0))
	}
	// A notice the agent did not give, or one out of range: TTL/10.
	if got := newTiming(t0, 10*time.Second, 0).notice; got != time.Second {
		t.Errorf("default notice %v, want 1s", got)
	}
	for ttl, want := range map[time.Duration]time.Duration{
		100 * ms: 20 * ms, 2 * time.Second: 200 * ms, time.Minute: time.Second,
	} {
		if got := pingEvery(ttl); got != want {
			t.Errorf("pingEvery(%v) = %v, want %v", ttl, got, want)
		}
	}
}
