package quorum

import "testing"

// A slice given back is cleared, to its capacity: whatever MakeOps or
// MakeResults hands out next, reused or new, holds only zero values of the
// length asked for.
func TestRecycledSlicesComeBackZero(t *testing.T) {
	for round := range 50 {
		ops := MakeOps(3)
		if len(ops) != 3 {
			t.Fatalf("MakeOps(3) gave %d operations", len(ops))
		}
		for i := range ops {
			if ops[i] != (Op{}) {
				t.Fatalf("round %d: operation %d not zero: %+v", round, i, ops[i])
			}
			ops[i] = Op{ID: uint64(i + 1), Kind: OpAccept, Key: "k", Value: Value{Held: true, Epoch: 9}}
		}
		// Given back shorter than it was filled: still cleared in full.
		RecycleOps(ops[:1])

		results := MakeResults(2)
		if len(results) != 2 {
			t.Fatalf("MakeResults(2) gave %d results", len(results))
		}
		for i := range results {
			if results[i] != (Result{}) {
				t.Fatalf("round %d: result %d not zero: %+v", round, i, results[i])
			}
			results[i] = Result{ID: uint64(i + 1), OK: true, MaxEpoch: 9}
		}
		RecycleResults(results)
	}
}

// Each slice handed out can take a batch of the size its class serves, so
// a merged batch is not handed a lone caller's small slice.
func TestPooledSlicesFitTheirBatch(t *testing.T) {
	for _, n := range []int{0, 1, 8, 9, 33, 500, 4096, 5000} {
		RecycleOps(make([]Op, 0, 8)) // a small slice is on offer
		ops := MakeOps(n)
		if len(ops) != n || cap(ops) < n {
			t.Fatalf("MakeOps(%d): len %d cap %d", n, len(ops), cap(ops))
		}
		RecycleOps(ops)
	}
}
