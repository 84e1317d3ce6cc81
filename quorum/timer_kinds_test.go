package quorum

import "testing"

// TestTimerStaleByKind: a timer keeps what it is for in one field (an op,
// a key or an observation, by kind); each kind is stale exactly when its
// own generation moved on, and never for another kind's reasons.
func TestTimerStaleByKind(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p := c.node("p1").prop
	c.mustGrant("p1", "k")
	ks := p.keys["k"]
	x := &op{timerGen: 3, phase: phaseWaiting}
	done := &op{timerGen: 3, phase: phaseDone}
	ob := &observation{key: "o", gen: 5}
	other := &observation{key: "o", gen: 5}
	if p.observations == nil {
		p.observations = make(map[string]*observation)
	}
	p.observations["o"] = ob
	defer delete(p.observations, "o")
	for _, tc := range []struct {
		name  string
		tm    timer
		stale bool
	}{
		{"round, its gen", timer{kind: timerRound, on: x, gen: 3}, false},
		{"round, an old gen", timer{kind: timerRound, on: x, gen: 2}, true},
		{"retry, its gen", timer{kind: timerRetry, on: x, gen: 3}, false},
		{"wake, op done", timer{kind: timerWake, on: done, gen: 3}, true},
		{"notice, the lease's gen", timer{kind: timerNotice, on: ks, gen: ks.lease.gen}, false},
		{"notice, an old gen", timer{kind: timerNotice, on: ks, gen: ks.lease.gen - 1}, true},
		{"observe, its gen", timer{kind: timerObserve, on: ob, gen: 5}, false},
		{"observe, an old gen", timer{kind: timerObserve, on: ob, gen: 4}, true},
		{"observe, one replaced", timer{kind: timerObserve, on: other, gen: 5}, true},
		{"renew, the current gen", timer{kind: timerRenew, gen: p.renewGen}, false},
		{"renew, an old gen", timer{kind: timerRenew, gen: p.renewGen - 1}, true},
		{"change, none under way", timer{kind: timerChange, gen: 0}, true},
	} {
		if got := tc.tm.stale(p); got != tc.stale {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.stale)
		}
	}
	// The lease goes: its notice timer is stale, whatever its gen was.
	gen := ks.lease.gen
	c.mustRelease("p1", "k", ks.lease.epoch)
	if tm := (timer{kind: timerNotice, on: ks, gen: gen}); !tm.stale(p) {
		t.Error("a notice timer of a released lease is live")
	}
}
