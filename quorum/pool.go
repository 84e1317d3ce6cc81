package quorum

import "github.com/lockmesh/lockmesh/internal/slicepool"

// The operations of the requests a node sends and the results of the
// responses it gives come from these pools, and go back to them when the
// node is done with them: at once for what the node sends itself, and at
// Advance for what a Ready carried. The driver never sees the pools (see
// Message for who owns what).
var (
	opsPool     slicepool.Pool[Op]
	resultsPool slicepool.Pool[Result]
)

// newOps is an empty slice for a request's operations.
func newOps() []Op { return opsPool.Get(0) }

// growOps makes room in ops for one more operation, taking the next size
// up from the pool: append would grow a slice past the pool's sizes (a
// renewal batch puts 4,096 operations in a request), and every batch would
// then make its slices anew.
func growOps(ops []Op) []Op {
	if len(ops) < cap(ops) || cap(ops) >= slicepool.MaxLen {
		return ops
	}
	bigger := opsPool.Get(cap(ops) + 1)[:len(ops)]
	copy(bigger, ops)
	opsPool.Put(ops)
	return bigger
}

// newResults is n zero results, for a response.
func newResults(n int) []Result { return resultsPool.Get(n) }
