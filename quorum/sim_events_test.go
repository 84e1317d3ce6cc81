package quorum

import "time"

// The simulator's queue of events. Most events are messages and ticks, a
// few million a minute: they are structs, not closures, and the queue
// reuses their room, so that running one allocates nothing.

// event is one thing the simulator does at a moment of virtual time: a
// message to deliver (deliver.to set), a node's tick (tick set), or fn.
type event struct {
	fn      func()
	deliver delivery
	// tick is the node to tick, when its tick generation is still gen
	// (a later scheduleTick moved the tick).
	tick *simNode
	gen  uint64
}

// delivery is one copy of a message on its way. It reaches only the
// incarnations it was sent between, as over a TCP connection.
type delivery struct {
	from, to       *simNode
	fromInc, toInc uint64
	msg            Message
}

// eventQueue holds the events to come, earliest first, ties in the order
// they were scheduled. Its heap orders small keys that hold no pointers
// (the collector neither scans them nor slows their moves); each key names
// the slot of its event, and slots are reused once their event ran.
type eventQueue struct {
	heap  []eventKey
	slots []event
	free  []int32
	// end, once ending, is when the run ends: an event after it would
	// never run, and is not kept (messages an aimed cut delays by an hour
	// made the heap of some runs thousands of events deep).
	end    time.Duration
	ending bool
}

type eventKey struct {
	at   time.Duration
	seq  uint64
	slot int32
}

func (a eventKey) before(b eventKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *eventQueue) len() int { return len(q.heap) }

// next is the time of the earliest event (the queue must not be empty).
func (q *eventQueue) next() time.Duration { return q.heap[0].at }

// endAt says that the run ends at end: no event after it will run.
func (q *eventQueue) endAt(end time.Duration) { q.end, q.ending = end, true }

// keeps reports whether an event at at would be kept (it may run).
func (q *eventQueue) keeps(at time.Duration) bool { return !q.ending || at <= q.end }

// push schedules an event at at, seq ordering events of one moment, and
// returns it, zero, for the caller to fill in; nil when it would come after
// the end. (Filled in place: an event is over a hundred bytes, and copying
// it in and out of the queue was a tenth of the simulator's own time.) The
// pointer is good until the next push.
func (q *eventQueue) push(at time.Duration, seq uint64) *event {
	if !q.keeps(at) {
		return nil
	}
	var slot int32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		slot = int32(len(q.slots))
		q.slots = append(q.slots, event{})
	}
	h := append(q.heap, eventKey{at: at, seq: seq, slot: slot})
	k := h[len(h)-1]
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !k.before(h[parent]) {
			break
		}
		h[i] = h[parent]
		i = parent
	}
	h[i] = k
	q.heap = h
	return &q.slots[slot]
}

// pop takes the earliest event out of the queue: its time and its slot.
// The event stays in its slot (event(slot)) until done(slot).
func (q *eventQueue) pop() (time.Duration, int32) {
	h := q.heap
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	if n := len(h); n > 0 {
		i := 0
		for {
			least := 2*i + 1
			if least >= n {
				break
			}
			if r := least + 1; r < n && h[r].before(h[least]) {
				least = r
			}
			if !h[least].before(last) {
				break
			}
			h[i] = h[least]
			i = least
		}
		h[i] = last
	}
	q.heap = h
	return top.at, top.slot
}

// event is the event in slot, popped and not yet done. A push may move the
// slots: the pointer is good until then (the event itself stays as it is,
// in the old slots or the new, until done).
func (q *eventQueue) event(slot int32) *event { return &q.slots[slot] }

// done frees the slot of an event that ran.
func (q *eventQueue) done(slot int32) {
	q.slots[slot] = event{} // let the closure and the message go
	q.free = append(q.free, slot)
}
