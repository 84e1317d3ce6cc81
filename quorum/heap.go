package quorum

// minHeap is a binary min-heap ordered by its elements' before method:
// the proposer's timers and the acceptor's watch expiries. It is typed, so
// that a push does not box its element in an interface as container/heap
// does (two allocations per element), and its push and pop are
// container/heap's, step for step, so elements that tie leave in the same
// order.
type minHeap[T any, P interface {
	*T
	before(*T) bool
}] []T

func (h *minHeap[T, P]) push(x T) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !P(&s[i]).before(&s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

// pop removes and returns the least element; h must not be empty.
func (h *minHeap[T, P]) pop() T {
	s := *h
	n := len(s) - 1
	x := s[0]
	s[0] = s[n]
	var zero T
	s[n] = zero // let what it points to go
	s = s[:n]
	*h = s
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && P(&s[r]).before(&s[l]) {
			j = r
		}
		if !P(&s[j]).before(&s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
	return x
}
