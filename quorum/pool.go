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

var (
	opsPool     sync.Pool // *[]Op, empty
	resultsPool sync.Pool // *[]Result, empty
)

func newOps() []Op {
	if p, ok := opsPool.Get().(*[]Op); ok {
		return *p
	}
	return nil
}

// MakeOps returns n zero operations, in a slice given back earlier when
// one is large enough: for a decoder of requests whose caller will
// RecycleOps them once handled.
func MakeOps(n int) []Op {
	if p, ok := opsPool.Get().(*[]Op); ok {
		if cap(*p) >= n {
			return (*p)[:n]
		}
		opsPool.Put(p)
	}
	return make([]Op, n)
}

// MakeResults returns n zero results, in a slice given back earlier when
// one is large enough: for a decoder of responses whose caller will
// RecycleResults them once stepped.
func MakeResults(n int) []Result { return newResults(n) }

// RecycleOps gives back the operations of a request that nothing refers to
// any more: it was encoded, or its acceptor has handled it. The caller must
// not use ops afterwards.
func RecycleOps(ops []Op) {
	if cap(ops) == 0 || cap(ops) > maxPooled {
		return
	}
	clear(ops) // let keys and values go
	ops = ops[:0]
	opsPool.Put(&ops)
}

func newResults(n int) []Result {
	if p, ok := resultsPool.Get().(*[]Result); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]Result, n)
}

// RecycleResults gives back the results of a response that nothing refers
// to any more: it was encoded, or its proposer has stepped it. The caller
// must not use results afterwards.
func RecycleResults(results []Result) {
	if cap(results) == 0 || cap(results) > maxPooled {
		return
	}
	clear(results)
	results = results[:0]
	resultsPool.Put(&results)
}
