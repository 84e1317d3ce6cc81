package quorum

import (
	"math/rand"
	"testing"
	"time"
)

// The timer queue lets timers leave in the order one heap of them all
// would: by time, then by arming order, whichever side holds them.
func TestTimerQueueLeavesInHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var q timerQueue
	var h timerHeap
	now, seq := time.Duration(0), uint64(0)
	kinds := []timerKind{timerRound, timerRound, timerRound, timerRetry, timerNotice, timerWake}
	popped, fromFIFO := 0, 0
	for step := 0; step < 100000; step++ {
		if rng.Intn(3) > 0 {
			seq++
			tm := timer{seq: seq, kind: kinds[rng.Intn(len(kinds))]}
			switch {
			case tm.kind == timerRound && rng.Intn(200) > 0:
				tm.at = now + 250*time.Millisecond // in order, mostly
			default:
				tm.at = now + time.Duration(rng.Intn(500))*time.Millisecond
			}
			q.push(tm)
			h.push(tm)
		} else {
			now += time.Duration(rng.Intn(3)) * time.Millisecond
		}
		for len(h) > 0 && h[0].at <= now {
			want := h.pop()
			if q.len() == 0 {
				t.Fatalf("step %d: the queue is empty, the heap has %+v", step, want)
			}
			if q.head < len(q.fifo) && q.front() == &q.fifo[q.head] {
				fromFIFO++
			}
			if f := q.front(); f.seq != want.seq {
				t.Fatalf("step %d: front %+v, want %+v", step, *f, want)
			}
			if got := q.pop(); got.seq != want.seq {
				t.Fatalf("step %d: popped %+v, want %+v", step, got, want)
			}
			popped++
		}
		if q.len() != len(h) {
			t.Fatalf("step %d: %d timers queued, the heap has %d", step, q.len(), len(h))
		}
	}
	if popped < 10000 || fromFIFO < popped/3 {
		t.Fatalf("%d timers left, %d from the FIFO: the test did not exercise both sides", popped, fromFIFO)
	}
}
