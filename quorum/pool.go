package quorum

import "sync"

// Under load a node builds and drops a batch of operations per voter, and a
// slice of results, many thousand times a second; most of the garbage the
// collector then chases is these slices. A driver that knows when a batch
// is dead (encoded for the wire, or handled by its own acceptor) may give
// it back for reuse. Giving back is optional: slices not given back are
// collected as usual.

// maxPooled is the largest slice kept for reuse (a renewal batch of tens of
// thousands of operations is not worth keeping).
const maxPooled = 4096

// poolClasses are the capacities slices are made with. Class i keeps the
// slices given back whose capacity is at least poolClasses[i] (and below
// the next class), so that any slice it hands out can take a batch of that
// size: one pool for all sizes would hand the small slices of a lone caller
// to a merged batch of fifty, which must then allocate anyway.
var poolClasses = [...]int{8, 32, 128, 512, maxPooled}

// slicePool keeps slices of T by class of capacity. The zero value is ready.
type slicePool[T any] struct {
	classes [len(poolClasses)]sync.Pool // *[]T, every element zero
}

// get returns a slice of n zero elements, with capacity to spare.
func (sp *slicePool[T]) get(n int) []T {
	for i, size := range poolClasses {
		if n <= size {
			if p, ok := sp.classes[i].Get().(*[]T); ok {
				return (*p)[:n]
			}
			return make([]T, n, size)
		}
	}
	return make([]T, n)
}

// put keeps s for a later get. Nothing may use s afterwards.
func (sp *slicePool[T]) put(s []T) {
	c := cap(s)
	if c < poolClasses[0] || c > maxPooled {
		return
	}
	i := len(poolClasses) - 1
	for poolClasses[i] > c {
		i--
	}
	s = s[:c]
	clear(s) // let keys and values go; get promises zero elements
	s = s[:0]
	sp.classes[i].Put(&s)
}

var (
	opsPool     slicePool[Op]
	resultsPool slicePool[Result]
)

// newOps is an empty slice for a request's operations, from the pool.
func newOps() []Op { return opsPool.get(0) }

// MakeOps returns n zero operations, in a slice of their size class given
// back earlier when there is one: for a decoder of requests whose caller
// will RecycleOps them once handled.
func MakeOps(n int) []Op { return opsPool.get(n) }

// RecycleOps gives back the operations of a request that nothing refers to
// any more: it was encoded, or its acceptor has handled it. The caller must
// not use ops afterwards.
func RecycleOps(ops []Op) { opsPool.put(ops) }

func newResults(n int) []Result { return resultsPool.get(n) }

// MakeResults returns n zero results, in a slice of their size class given
// back earlier when there is one: for a decoder of responses whose caller
// will RecycleResults them once stepped.
func MakeResults(n int) []Result { return resultsPool.get(n) }

// RecycleResults gives back the results of a response that nothing refers
// to any more: it was encoded, or its proposer has stepped it. The caller
// must not use results afterwards.
func RecycleResults(results []Result) { resultsPool.put(results) }

// emptied is s cleared and emptied, to be filled again by its owner, or
// nil when it is not worth keeping (none, or larger than maxPooled).
func emptied[T any](s []T) []T {
	if cap(s) == 0 || cap(s) > maxPooled {
		return nil
	}
	clear(s)
	return s[:0]
}
