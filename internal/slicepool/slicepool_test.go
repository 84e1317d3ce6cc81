package slicepool

import "testing"

type op struct {
	id  uint64
	key string
}

// A slice put back is cleared, to its capacity: whatever Get hands out
// next, reused or new, holds only zero values of the length asked for.
func TestPutSlicesComeBackZero(t *testing.T) {
	var p Pool[op]
	for round := range 50 {
		s := p.Get(3)
		if len(s) != 3 {
			t.Fatalf("Get(3) gave %d elements", len(s))
		}
		for i := range s {
			if s[i] != (op{}) {
				t.Fatalf("round %d: element %d not zero: %+v", round, i, s[i])
			}
			s[i] = op{id: uint64(i + 1), key: "k"}
		}
		// Put back shorter than it was filled: still cleared in full.
		p.Put(s[:1])
	}
}

// Each slice handed out can take a batch of the size its class serves, so
// a merged batch is not handed a lone caller's small slice.
func TestSlicesFitTheirBatch(t *testing.T) {
	var p Pool[op]
	for _, n := range []int{0, 1, 8, 9, 33, 500, 4096, 5000} {
		p.Put(make([]op, 0, 8)) // a small slice is on offer
		s := p.Get(n)
		if len(s) != n || cap(s) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(s), cap(s))
		}
		p.Put(s)
	}
}

// Emptied keeps a slice's array for its owner, cleared, unless it is
// too large to be worth keeping.
func TestEmptied(t *testing.T) {
	s := []op{{id: 1, key: "a"}, {id: 2, key: "b"}}
	e := Emptied(s)
	if len(e) != 0 || cap(e) != 2 || s[0] != (op{}) || s[1] != (op{}) {
		t.Fatalf("Emptied: len %d cap %d, array %+v", len(e), cap(e), s)
	}
	if Emptied(make([]op, 1, MaxLen+1)) != nil || Emptied[op](nil) != nil {
		t.Fatal("Emptied kept a slice not worth keeping")
	}
}

// In the steady state a Put and a Get allocate nothing: not the slice, and
// not the box the pool keeps it in.
func TestPutAndGetDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	var p Pool[op]
	p.Put(p.Get(5)) // the slice and its box
	allocs := testing.AllocsPerRun(1000, func() { p.Put(p.Get(5)) })
	// A collection may empty the pool during a run (sync.Pool); at most
	// one slice and one box then.
	if allocs > 0.01 {
		t.Fatalf("%.2f allocations per Get and Put, want 0", allocs)
	}
}
