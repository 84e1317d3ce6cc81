// Package quorumtest holds what tests of lockmesh share: a sequential model
// of one lock register for the porcupine linearizability checker, and a
// recorder of operation histories. Only tests import it.
package quorumtest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// State is one key's register as the model sees it: who holds it (a node
// incarnation, written "node/inc") and its epoch. Lease expiry is a matter
// of time, which a linearizability model cannot see; exclusion in time is
// checked separately.
type State struct {
	Held   bool
	Holder string
	Epoch  uint64
	// Wild: held by Holder at some epoch above Epoch that nobody learned
	// (an acquire whose node died before it could report).
	Wild bool
}

// matches reports whether the register may be held by holder at epoch.
func (s State) matches(holder string, epoch uint64) bool {
	if !s.Held || s.Holder != holder {
		return false
	}
	if s.Wild {
		return epoch > s.Epoch
	}
	return s.Epoch == epoch
}

func (s State) String() string {
	if s.Wild {
		return fmt.Sprintf("%s@>%d", s.Holder, s.Epoch)
	}
	if !s.Held {
		return fmt.Sprintf("free@%d", s.Epoch)
	}
	return fmt.Sprintf("%s@%d", s.Holder, s.Epoch)
}

// Kinds of operation.
const (
	Acquire = "acquire"
	Release = "release"
	Read    = "read"
	// Cleanup is a node freeing a grant to itself that no lease of it
	// stands for (background work of the proposer).
	Cleanup = "cleanup"
)

// Outcomes.
const (
	Granted   = "granted"
	Locked    = "locked"
	NoQuorum  = "no quorum"
	Released  = "released"
	NotHeld   = "not held"
	ReadDone  = "read"
	Cancelled = "cancelled"
)

// Input is an operation's call.
type Input struct {
	Kind   string
	Holder string // the calling node incarnation
	Epoch  uint64 // release: the lease's epoch
}

// Output is an operation's result.
type Output struct {
	Outcome string
	// Unknown: the operation may or may not have taken effect.
	Unknown bool
	// Epoch: granted, locked (the holder's), read, released (cleanup).
	Epoch  uint64
	Holder string // locked, read
	Held   bool   // read
	// Attempted: the epochs an acquire with an Unknown outcome proposed.
	// AnyEpoch: the attempts are not known either.
	Attempted []uint64
	AnyEpoch  bool
}

// Model is the sequential specification of one key, nondeterministic where
// an outcome is unknown: its state is the set of registers the history so
// far allows. Histories are partitioned by key before checking.
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return stateSet{{}} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			in, out := input.(Input), output.(Output)
			var next stateSet
			for _, s := range state.(stateSet) {
				next = step(next, s, in, out)
			}
			if len(next) == 0 {
				return false, nil
			}
			return true, next.normal()
		},
		Equal: func(a, b interface{}) bool { return slices.Equal(a.(stateSet), b.(stateSet)) },
		Hash: func(state interface{}) uint64 {
			h := uint64(14695981039346656037)
			for _, s := range state.(stateSet) {
				h = (h ^ s.Epoch) * 1099511628211
				for i := 0; i < len(s.Holder); i++ {
					h = (h ^ uint64(s.Holder[i])) * 1099511628211
				}
				if s.Held {
					h = (h ^ 1) * 1099511628211
				}
				if s.Wild {
					h = (h ^ 2) * 1099511628211
				}
			}
			return h
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(Input), output.(Output)
			return fmt.Sprintf("%s(%s %d) -> %s", in.Kind, in.Holder, in.Epoch, describe(out))
		},
		DescribeState: func(state interface{}) string { return fmt.Sprint(state.(stateSet)) },
	}
}

// stateSet is a set of possible registers, sorted and without duplicates.
type stateSet []State

func (ss stateSet) normal() stateSet {
	if len(ss) < 2 {
		return ss
	}
	slices.SortFunc(ss, func(a, b State) int {
		switch {
		case a.Epoch != b.Epoch:
			if a.Epoch < b.Epoch {
				return -1
			}
			return 1
		case a.Holder != b.Holder:
			return strings.Compare(a.Holder, b.Holder)
		case a.Held != b.Held:
			if !a.Held {
				return -1
			}
			return 1
		case a.Wild != b.Wild:
			if !a.Wild {
				return -1
			}
			return 1
		}
		return 0
	})
	return slices.Compact(ss)
}

func describe(o Output) string {
	var b strings.Builder
	b.WriteString(o.Outcome)
	if o.Unknown {
		fmt.Fprintf(&b, "? tried %v", o.Attempted)
	}
	switch o.Outcome {
	case Granted, Locked, Released:
		fmt.Fprintf(&b, " %s@%d", o.Holder, o.Epoch)
	case ReadDone:
		fmt.Fprintf(&b, " %v", State{Held: o.Held, Holder: o.Holder, Epoch: o.Epoch})
	}
	return b.String()
}

// step appends to next the registers that may follow s after the operation.
// A step the operation's output rules out appends nothing.
func step(next stateSet, s State, in Input, out Output) stateSet {
	switch in.Kind {
	case Acquire:
		switch {
		case out.Outcome == Granted:
			if out.Epoch > s.Epoch {
				next = append(next, State{Held: true, Holder: in.Holder, Epoch: out.Epoch})
			}
		case out.Outcome == Locked && !out.Unknown:
			// The holder named is the register's, or a grant of a higher
			// epoch still in flight; none named: contended, no constraint.
			if out.Holder == "" || s.matches(out.Holder, out.Epoch) || out.Epoch > s.Epoch {
				next = append(next, s)
			}
		case out.Unknown:
			next = append(next, s)
			if out.AnyEpoch {
				next = append(next, State{Held: true, Holder: in.Holder, Epoch: s.Epoch, Wild: true})
			}
			for _, e := range out.Attempted {
				if e > s.Epoch {
					next = append(next, State{Held: true, Holder: in.Holder, Epoch: e})
				}
			}
		default: // no quorum, cancelled: nothing happened
			next = append(next, s)
		}
	case Release:
		mine := s.matches(in.Holder, in.Epoch)
		freed := State{Epoch: max(s.Epoch, in.Epoch)}
		switch {
		case out.Outcome == Released:
			if mine {
				next = append(next, freed)
			}
		case out.Outcome == NotHeld:
			if !mine || s.Wild {
				next = append(next, s)
			}
		case out.Unknown && mine:
			next = append(next, s, freed)
		default:
			next = append(next, s)
		}
	case Cleanup:
		switch {
		case out.Outcome == Released:
			if s.matches(in.Holder, out.Epoch) {
				next = append(next, State{Epoch: out.Epoch})
			}
		case out.Unknown && s.Held && s.Holder == in.Holder && (out.Epoch == 0 || s.matches(in.Holder, out.Epoch)):
			next = append(next, s)
			switch {
			case out.Epoch != 0:
				next = append(next, State{Epoch: out.Epoch})
			case !s.Wild:
				next = append(next, State{Epoch: s.Epoch})
			}
		default: // not held (declined) or no quorum
			next = append(next, s)
		}
	case Read:
		switch {
		case out.Outcome != ReadDone:
			next = append(next, s)
		case !out.Held:
			if !s.Held && s.Epoch == out.Epoch {
				next = append(next, s)
			}
		case s.matches(out.Holder, out.Epoch):
			next = append(next, State{Held: true, Holder: out.Holder, Epoch: out.Epoch})
		}
	}
	return next
}

// Infinity is the return time of an operation whose caller never learned
// its outcome (its node crashed, say).
const Infinity = int64(1) << 62

// History records operations on many keys, safely from many goroutines.
type History struct {
	mu   sync.Mutex
	ops  map[string][]porcupine.Operation
	open map[int]pending
	next int
}

type pending struct {
	key    string
	client int
	input  Input
	call   int64
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{ops: make(map[string][]porcupine.Operation), open: make(map[int]pending)}
}

// Call records the start of an operation and returns its handle.
func (h *History) Call(key string, client int, in Input, at int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.open[h.next] = pending{key: key, client: client, input: in, call: at}
	return h.next
}

// Retime moves the call of an open operation later, to the start of the
// part of it that could take effect (its last round): a tighter interval is
// still a correct one, and it spares the checker much work.
func (h *History) Retime(handle int, call int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.open[handle]; ok && call > p.call {
		p.call = call
		h.open[handle] = p
	}
}

// Return records the end of the operation with the given handle.
func (h *History) Return(handle int, out Output, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.open[handle]
	if !ok {
		return
	}
	delete(h.open, handle)
	h.ops[p.key] = append(h.ops[p.key], porcupine.Operation{
		ClientId: p.client, Input: p.input, Output: out, Call: p.call, Return: at,
	})
}

// Add records a whole operation at once.
func (h *History) Add(key string, client int, in Input, out Output, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[key] = append(h.ops[key], porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// Abandon closes every open operation as one whose outcome nobody learned.
func (h *History) Abandon(filter func(client int) bool) {
	h.mu.Lock()
	handles := make([]int, 0, len(h.open))
	for id, p := range h.open {
		if filter == nil || filter(p.client) {
			handles = append(handles, id)
		}
	}
	h.mu.Unlock()
	slices.Sort(handles)
	for _, id := range handles {
		h.mu.Lock()
		p := h.open[id]
		h.mu.Unlock()
		out := Output{Outcome: NoQuorum, Unknown: true}
		if p.input.Kind == Acquire {
			out.AnyEpoch = true
		}
		h.Return(id, out, Infinity)
	}
}

// Len is the number of recorded operations.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ops := range h.ops {
		n += len(ops)
	}
	return n
}

// Keys lists the keys with recorded operations, sorted.
func (h *History) Keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.ops))
	for k := range h.ops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Ops returns the operations recorded for key.
func (h *History) Ops(key string) []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops[key])
}

// informative reports whether an operation constrains the history: one
// that certainly changed nothing and reported nothing (no quorum, cancelled,
// a cleanup that declined) is a no-op the model accepts in every state, and
// leaving it out spares the checker the work of placing it (an abandoned
// one overlaps everything after it).
func informative(op porcupine.Operation) bool {
	out := op.Output.(Output)
	if out.Unknown {
		return true
	}
	switch out.Outcome {
	case NoQuorum, Cancelled:
		return false
	case NotHeld:
		return op.Input.(Input).Kind != Cleanup
	}
	return true
}

// Ops returns the operations recorded for key that constrain its history.
func (h *History) checkedOps(key string) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Ops(key) {
		if informative(op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// Check runs porcupine over each key's history. It returns the keys whose
// history is not linearizable and those whose check timed out.
func (h *History) Check(timeout time.Duration) (bad, unknown []string) {
	for _, key := range h.Keys() {
		switch porcupine.CheckOperationsTimeout(Model(), h.checkedOps(key), timeout) {
		case porcupine.Illegal:
			bad = append(bad, key)
		case porcupine.Unknown:
			unknown = append(unknown, key)
		}
	}
	return bad, unknown
}

// Explain renders the history of key around the first operation that makes
// it non-linearizable, for a failure message: the operations that return
// before the shortest failing prefix of calls, the last max of them.
func (h *History) Explain(key string, max int) string {
	ops := h.checkedOps(key)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int {
		switch {
		case a.Call < b.Call:
			return -1
		case a.Call > b.Call:
			return 1
		}
		return 0
	})
	m := Model()
	// Binary search for the shortest prefix (by call time) that fails.
	lo, hi := 1, len(ops)
	for lo < hi {
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(m, ops[:mid], 10*time.Second) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations; the first %d by call time are not linearizable; the last is marked >>\n", len(ops), lo)
	ops = ops[:lo]
	start := 0
	if max > 0 && len(ops) > max {
		start = len(ops) - max
	}
	for i := start; i < len(ops); i++ {
		op := ops[i]
		if i == len(ops)-1 {
			b.WriteString(">> ")
		}
		ret := fmt.Sprint(op.Return)
		if op.Return >= Infinity {
			ret = "∞"
		}
		fmt.Fprintf(&b, "[%d, %s] c%d %s\n", op.Call, ret, op.ClientId, m.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
