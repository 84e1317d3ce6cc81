package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	s := Summarize(d)
	if s.N != 1000 || s.P50 != 500 || s.P99 != 990 || s.P999 != 999 || s.Min != 1 || s.Max != 1000 {
		t.Fatalf("%+v", s)
	}
	if s := Summarize(nil); s.N != 0 {
		t.Fatalf("empty: %+v", s)
	}
}

// Handovers measures release-to-next-grant gaps between different
// holders, and tells apart grants back to the releaser and overlaps.
func TestHandovers(t *testing.T) {
	us := int64(time.Microsecond)
	holds := []Hold{
		{Worker: "b", Acquired: 150 * us, Released: 160 * us},
		{Worker: "a", Acquired: 0, Released: 100 * us},
		{Worker: "b", Acquired: 170 * us, Released: 180 * us}, // back to b
		{Worker: "c", Acquired: 175 * us, Released: 190 * us}, // before b let go
		{Worker: "a", Acquired: 200 * us, Released: 210 * us},
	}
	r := Handovers(holds, 3, "test")
	if r.Holds != 5 || r.SameWorker != 1 || r.Overlaps != 1 {
		t.Fatalf("%+v", r)
	}
	if h := r.Handover; h.N != 2 || h.Min != 10 || h.Max != 50 {
		t.Fatalf("gaps %+v, want 50 µs and 10 µs", h)
	}
}

// A failed release ends a hand-over run at once, even for goroutines
// blocked in Lock on a key that the failed holder keeps for good.
func TestContendStopsOnFailure(t *testing.T) {
	var mu sync.Mutex
	held := false
	locker := LockerFunc(func(ctx context.Context, key string) (func(context.Context) error, error) {
		mu.Lock()
		if !held {
			held = true
			mu.Unlock()
			return func(context.Context) error { return errors.New("release lost") }, nil
		}
		mu.Unlock()
		<-ctx.Done() // the key is never given back
		return nil, ctx.Err()
	})
	start := time.Now()
	_, err := Contend(context.Background(), 4, time.Minute, 0, 100, "k",
		func(int) (Locker, error) { return locker, nil },
		func(i int) string { return fmt.Sprint(i) })
	if err == nil || !strings.Contains(err.Error(), "release lost") {
		t.Fatalf("error %v, want the failed release", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Contend returned after %v: the blocked goroutines were not stopped", d)
	}
}

// TimedThroughput times every operation that succeeded and counts them per
// worker; a failing worker stops and its failure is not timed.
func TestTimedThroughput(t *testing.T) {
	newOp := func(worker int) (Op, error) {
		n := 0
		return func(ctx context.Context) error {
			if n++; worker == 1 && n > 3 {
				return errors.New("worker 1 gives up")
			}
			return nil
		}, nil
	}
	res, lat, per, err := TimedThroughput(context.Background(), 2, 20*time.Millisecond, newOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if per[1] != 3 || per[0] == 0 || res.Errors != 1 {
		t.Fatalf("per worker %v, %d errors, want 3 for worker 1 and 1 error", per, res.Errors)
	}
	if int64(lat.N) != res.Ops || lat.N != per[0]+per[1] {
		t.Fatalf("%d timed, %d counted, per worker %v", lat.N, res.Ops, per)
	}
}

// FairnessOf counts grants per node, with Jain's index and the max/min
// ratio.
func TestFairnessOf(t *testing.T) {
	var holds []Hold
	for i := 0; i < 3; i++ {
		holds = append(holds, Hold{Worker: "v1/0"})
	}
	holds = append(holds, Hold{Worker: "v2/1"}, Hold{Worker: "v2/4"}, Hold{Worker: "v2/7"}, Hold{Worker: "v3/2"})
	f := FairnessOf(holds, []string{"v1", "v2", "v3"}, NodeOf)
	if f.Grants["v1"] != 3 || f.Grants["v2"] != 3 || f.Grants["v3"] != 1 {
		t.Fatalf("grants %v", f.Grants)
	}
	// (3+3+1)² / (3·(9+9+1)) = 49/57
	if f.MaxOverMin != 3 || f.Jain < 49.0/57-1e-9 || f.Jain > 49.0/57+1e-9 {
		t.Fatalf("%+v", f)
	}
	if f := FairnessOf(holds, []string{"v1", "v2", "v3", "v4"}, NodeOf); f.MaxOverMin != 0 || f.Grants["v4"] != 0 {
		t.Fatalf("a node without grants: %+v", f)
	}
}
