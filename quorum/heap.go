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

// timerQueue holds the proposer's timers: a heap, and beside it a FIFO
// for round timers armed in order of their time. A round timer is armed a
// round timeout after its round began, so nearly all come in order: each
// costs an append and a pop from the front instead of two walks of a heap
// that, on a node holding 100,000 leases, holds their loss notices too
// (17 levels, each a likely cache miss; the heap was 7% of such a holder's
// CPU). Timers leave in the order one heap of them all would give: by time,
// then by arming order (timer.before).
type timerQueue struct {
	heap timerHeap
	fifo []timer // round timers, in order; fifo[head:] are pending
	head int
}

func (q *timerQueue) len() int { return len(q.heap) + len(q.fifo) - q.head }

func (q *timerQueue) push(t timer) {
	if t.kind == timerRound {
		if n := len(q.fifo); n == q.head || !t.before(&q.fifo[n-1]) {
			q.fifo = append(q.fifo, t)
			return
		}
	}
	q.heap.push(t)
}

// front returns the timer that leaves next; q must not be empty.
func (q *timerQueue) front() *timer {
	if q.head == len(q.fifo) || (len(q.heap) > 0 && q.heap[0].before(&q.fifo[q.head])) {
		return &q.heap[0]
	}
	return &q.fifo[q.head]
}

// pop removes and returns the timer that leaves next; q must not be empty.
func (q *timerQueue) pop() timer {
	if q.head == len(q.fifo) || (len(q.heap) > 0 && q.heap[0].before(&q.fifo[q.head])) {
		return q.heap.pop()
	}
	t := q.fifo[q.head]
	q.fifo[q.head] = timer{} // let its op go
	q.head++
	switch {
	case q.head == len(q.fifo):
		q.fifo, q.head = q.fifo[:0], 0
	case q.head >= 1024 && q.head*2 >= len(q.fifo):
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo, q.head = q.fifo[:n], 0
	}
	return t
}
