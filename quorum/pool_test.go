package quorum

import "testing"

// A slice given back is cleared: whatever MakeOps or MakeResults hands out
// next, reused or new, holds only zero values of the length asked for.
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
		RecycleOps(ops)

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
