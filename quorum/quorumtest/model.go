package quorumtest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// State is one key's register as the model sees it: who holds it and under
// which epoch (see the package documentation for what is left out).
type State struct {
	Held   bool
	Holder string
	Epoch  uint64
	// Wild: held by Holder at some epoch above Epoch that nobody learned
	// (a write of unknown outcome whose epochs are not known either).
	Wild bool
	// Floor: the highest epoch before every node lost its state. The
	// register then reads as never granted (epoch 0), but every grant must
	// be above Floor. Zero once Epoch is above it.
	Floor uint64
	// Any: a majority of voters lost its state (MajorityLost); the
	// register holds some value the survivors accepted, which the next
	// operation that observes it tells.
	Any bool
}

// bound is the epoch every new grant must exceed.
func (s State) bound() uint64 { return max(s.Epoch, s.Floor) }

// normal drops a Floor that Epoch has passed: it constrains nothing more.
func (s State) normal() State {
	if s.Floor <= s.Epoch {
		s.Floor = 0
	}
	return s
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
	var b strings.Builder
	switch {
	case s.Any:
		b.WriteString("any (a majority lost its state)")
	case s.Wild:
		fmt.Fprintf(&b, "%s@>%d", s.Holder, s.Epoch)
	case !s.Held:
		fmt.Fprintf(&b, "free@%d", s.Epoch)
	default:
		fmt.Fprintf(&b, "%s@%d", s.Holder, s.Epoch)
	}
	if s.Floor != 0 {
		fmt.Fprintf(&b, "(floor %d)", s.Floor)
	}
	return b.String()
}

// Kinds of operation.
const (
	Acquire = "acquire"
	Release = "release"
	Read    = "read"
	// Cleanup is a node freeing a grant to itself that no lease of it
	// stands for (background work of the proposer).
	Cleanup = "cleanup"
	// Amnesia is every node losing its state at once (a full restart).
	// History.Amnesia records it; it has no Holder and an empty Output.
	Amnesia = "amnesia"
	// MajorityLost is a majority of voters losing its state while others
	// run on (History.MajorityLoss).
	MajorityLost = "majority lost"
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
	// AtLeast (read): the register was free, at an epoch that Epoch is at
	// least: a majority had dropped it (or never had it) and reported the
	// highest epoch they knew of (their floors, or a rival's grant one of
	// them held), at or above every grant the key had.
	AtLeast bool
	// Live (read): the read came through the public API (mesh.Holder),
	// where Held says the lease is live, not that the register is held: an
	// expired lease reads as not held and still names its holder, a free
	// register names nobody. Such a history cannot see frees done in the
	// background either (see the package documentation).
	Live bool
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
			mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
			for _, s := range state.(stateSet) {
				mix(s.Epoch)
				mix(s.Floor)
				for i := 0; i < len(s.Holder); i++ {
					mix(uint64(s.Holder[i]))
				}
				if s.Held {
					mix(1)
				}
				if s.Wild {
					mix(2)
				}
				if s.Any {
					mix(3)
				}
			}
			return h
		},
		DescribeOperation: func(input, output interface{}) string {
			return describeOp(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string { return fmt.Sprint(state.(stateSet)) },
		DescribeOperationMetadata: func(info interface{}) string {
			if m, ok := info.(meta); ok {
				return m.String()
			}
			return ""
		},
	}
}

// stateSet is a set of possible registers, sorted and without duplicates.
type stateSet []State

func (ss stateSet) normal() stateSet {
	for i := range ss {
		ss[i] = ss[i].normal()
	}
	if len(ss) < 2 {
		return ss
	}
	slices.SortFunc(ss, func(a, b State) int {
		switch {
		case a.Epoch != b.Epoch:
			return cmpUint(a.Epoch, b.Epoch)
		case a.Floor != b.Floor:
			return cmpUint(a.Floor, b.Floor)
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
		case a.Any != b.Any:
			if !a.Any {
				return -1
			}
			return 1
		}
		return 0
	})
	return slices.Compact(ss)
}

func cmpUint(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

func describeOp(in Input, out Output) string {
	switch in.Kind {
	case Amnesia:
		return "amnesia: every node lost its state"
	case MajorityLost:
		return "a majority of voters lost its state"
	case Release:
		return fmt.Sprintf("release(%s@%d) -> %s", in.Holder, in.Epoch, describe(out))
	}
	return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Holder, describe(out))
}

func describe(o Output) string {
	if o.Unknown {
		switch {
		case o.AnyEpoch:
			return "unknown: held at some epoch nobody learned, or nothing"
		case len(o.Attempted) > 0:
			return fmt.Sprintf("unknown: held at one of %v, or nothing", o.Attempted)
		case o.Epoch != 0:
			return fmt.Sprintf("unknown: free@%d, or nothing", o.Epoch)
		}
		return "unknown: done, or nothing"
	}
	switch o.Outcome {
	case Granted:
		return fmt.Sprintf("granted %d", o.Epoch)
	case Locked:
		if o.Holder == "" {
			return "locked (being taken)"
		}
		return fmt.Sprintf("locked by %s@%d", o.Holder, o.Epoch)
	case Released:
		if o.Epoch != 0 {
			return fmt.Sprintf("released %d", o.Epoch)
		}
	case ReadDone:
		if o.Live {
			return fmt.Sprintf("read live=%v holder=%q epoch %d", o.Held, o.Holder, o.Epoch)
		}
		return "read " + State{Held: o.Held, Holder: o.Holder, Epoch: o.Epoch}.String()
	}
	return o.Outcome
}

// step appends to next the registers that may follow s after the operation.
// A step the operation's output rules out appends nothing.
func step(next stateSet, s State, in Input, out Output) stateSet {
	if s.Any && in.Kind != Amnesia && in.Kind != MajorityLost {
		return stepAny(next, in, out)
	}
	switch in.Kind {
	case Acquire:
		return stepAcquire(next, s, in, out)
	case Release:
		return stepRelease(next, s, in, out)
	case Cleanup:
		return stepCleanup(next, s, in, out)
	case Read:
		return stepRead(next, s, out)
	case Amnesia:
		// Every register is gone; what any of them held is the floor.
		return append(next, State{Floor: s.bound()})
	case MajorityLost:
		return append(next, State{Any: true})
	}
	return next
}

// stepAny is the step from a register whose value is not known (after a
// majority lost its state): what the operation observed is what it held.
func stepAny(next stateSet, in Input, out Output) stateSet {
	switch {
	case in.Kind == Acquire && out.Outcome == Granted:
		return append(next, State{Held: true, Holder: in.Holder, Epoch: out.Epoch})
	case (in.Kind == Release || in.Kind == Cleanup) && out.Outcome == Released:
		return append(next, State{Epoch: max(in.Epoch, out.Epoch)})
	case in.Kind == Read && out.Outcome == ReadDone && !out.Live && !out.AtLeast:
		return append(next, State{Held: out.Held, Holder: out.Holder, Epoch: out.Epoch})
	}
	// (A read that found the register dropped at a majority, AtLeast,
	// observed no value: a survivor's may still be adopted by the next
	// prepare that reaches it, as stepRead keeps the register it had.)
	return append(next, State{Any: true})
}

func stepAcquire(next stateSet, s State, in Input, out Output) stateSet {
	switch {
	case out.Outcome == Granted:
		if out.Epoch > s.bound() {
			next = append(next, State{Held: true, Holder: in.Holder, Epoch: out.Epoch})
		}
	case out.Outcome == Locked && !out.Unknown:
		// The holder named is the register's, or a value of a higher
		// epoch that some acceptor accepted and no majority chose (yet);
		// none named: contended, no constraint.
		if out.Holder == "" || s.matches(out.Holder, out.Epoch) || out.Epoch > s.bound() {
			next = append(next, s)
		}
	case out.Unknown:
		next = append(next, s)
		if out.AnyEpoch {
			next = append(next, State{Held: true, Holder: in.Holder, Epoch: s.bound(), Wild: true})
		}
		for _, e := range out.Attempted {
			if e > s.bound() {
				next = append(next, State{Held: true, Holder: in.Holder, Epoch: e})
			}
		}
	default: // no quorum, cancelled: nothing happened
		next = append(next, s)
	}
	return next
}

func stepRelease(next stateSet, s State, in Input, out Output) stateSet {
	mine := s.matches(in.Holder, in.Epoch)
	freed := State{Epoch: max(s.Epoch, in.Epoch)}
	switch {
	case out.Outcome == Released:
		if mine {
			next = append(next, freed)
		}
	case out.Outcome == NotHeld:
		// A wild register's unknown epoch may be another than this one.
		if !mine || s.Wild {
			next = append(next, s)
		}
	case out.Unknown && mine:
		next = append(next, s, freed)
	default:
		next = append(next, s)
	}
	return next
}

func stepCleanup(next stateSet, s State, in Input, out Output) stateSet {
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
	return next
}

func stepRead(next stateSet, s State, out Output) stateSet {
	switch {
	case out.Outcome != ReadDone:
		next = append(next, s)
	case out.Live && !out.Held && out.Holder == "":
		// Free at that epoch, or held at it by a grant whose free the
		// history could not see (background work of the node).
		if (s.Wild && out.Epoch > s.Epoch) || (!s.Wild && s.Epoch == out.Epoch) {
			next = append(next, State{Epoch: out.Epoch, Floor: s.Floor})
		}
	case !out.Held && !out.Live:
		if !s.Held && (s.Epoch == out.Epoch || (out.AtLeast && out.Epoch >= s.Epoch)) {
			next = append(next, s)
		}
	case s.matches(out.Holder, out.Epoch):
		// Held; or, through the API, an expired lease still naming its
		// holder: the register is held all the same.
		next = append(next, State{Held: true, Holder: out.Holder, Epoch: out.Epoch})
	}
	return next
}
