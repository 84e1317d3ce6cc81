//go:build linux

package faulttest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// The porcupine model is one key's register as a client of the mesh can see
// it: the epoch (token) of the latest grant and its holder. What a client
// cannot see is left open:
//
//   - Lease expiry is a matter of time, so the model does not track whether
//     the register is still held: a read that reports the key free must
//     only name the latest grant's token.
//   - An acquire that did not return a grant (refused, timed out, no quorum,
//     or its process died) may still have been granted by a majority — a
//     grant that raced with the give-up, which the node then frees in the
//     background — so it leaves the register as it was or held by its node
//     at some higher epoch nobody learned ("wild").
//   - One acquire may be granted more than once before it returns: a round
//     whose outcome it could not learn (accepts lost or late) and whose
//     lease then expired unseen, then a grant at a higher epoch. So every
//     acquire also has a shadow operation over the same interval that may
//     leave the register wild for its node.
//   - A release answers nil both when it freed the key and when the lease
//     had been lost, so releases constrain nothing and are not checked.
//
// So the model checks what a grant and a read say against real-time order:
// a grant's token is above every token granted or read before it began,
// and a read names the latest grant (or one in flight), never an older one.
//
// When every node was down at once (a full restart), all lock state is
// gone: the history then holds an amnesia operation at that moment, after
// which the register is empty (a read may say "never granted") but every
// grant must still be above the tokens granted before (Floor).
type register struct {
	Epoch  uint64
	Holder string
	// Wild: held by Holder at some epoch above Epoch that nobody learned.
	Wild bool
	// Floor: grants must exceed it (the highest token before an amnesia).
	Floor uint64
}

// Model-only kinds of operation: "every node lost its state", and "this
// acquire may have been granted an epoch it never reported".
const (
	kindAmnesia = "amnesia"
	kindShadow  = "shadow"
)

type modelIn struct {
	Kind string // kindAcquire (acquires and tries) or kindRead
	Node string
}

type modelOut struct {
	Granted bool // acquire
	Token   uint64
	Holder  string // read
	Held    bool   // read
}

func stepRegister(s register, in modelIn, out modelOut) []interface{} {
	switch in.Kind {
	case kindAmnesia:
		return []interface{}{register{Floor: max(s.Epoch, s.Floor)}}
	case kindShadow:
		return []interface{}{s, register{Epoch: s.Epoch, Holder: in.Node, Wild: true, Floor: s.Floor}}
	case kindAcquire:
		if out.Granted {
			if out.Token > s.Epoch && out.Token > s.Floor {
				return []interface{}{register{Epoch: out.Token, Holder: in.Node, Floor: s.Floor}}
			}
			return nil
		}
		return []interface{}{s, register{Epoch: s.Epoch, Holder: in.Node, Wild: true, Floor: s.Floor}}
	case kindRead:
		switch {
		case s.Wild:
			// The unknown grant is the one read (held, or freed since).
			if out.Token > s.Epoch && (!out.Held || out.Holder == s.Holder) {
				return []interface{}{register{Epoch: out.Token, Holder: s.Holder, Floor: s.Floor}}
			}
			return nil
		case out.Token != s.Epoch, out.Held && out.Holder != s.Holder:
			return nil
		}
		return []interface{}{s}
	}
	return nil
}

func lockModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{register{}} },
		Step: func(state, input, output interface{}) []interface{} {
			return stepRegister(state.(register), input.(modelIn), output.(modelOut))
		},
		Hash: func(state interface{}) uint64 {
			s := state.(register)
			h := (uint64(14695981039346656037) ^ s.Epoch) * 1099511628211
			h = (h ^ s.Floor) * 1099511628211
			for i := 0; i < len(s.Holder); i++ {
				h = (h ^ uint64(s.Holder[i])) * 1099511628211
			}
			if s.Wild {
				h = (h ^ 1) * 1099511628211
			}
			return h
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(modelIn), output.(modelOut)
			switch in.Kind {
			case kindAmnesia:
				return "every node lost its state"
			case kindShadow:
				return fmt.Sprintf("%s acquire (an unreported grant?)", in.Node)
			}
			if in.Kind == kindAcquire {
				if out.Granted {
					return fmt.Sprintf("%s acquire -> token %d", in.Node, out.Token)
				}
				return fmt.Sprintf("%s acquire -> not granted", in.Node)
			}
			return fmt.Sprintf("%s read -> holder %q held %v token %d", in.Node, out.Holder, out.Held, out.Token)
		},
		DescribeState: func(state interface{}) string {
			s := state.(register)
			floor := ""
			if s.Floor != 0 {
				floor = fmt.Sprintf(" (floor %d)", s.Floor)
			}
			if s.Wild {
				return fmt.Sprintf("%s@>%d%s", s.Holder, s.Epoch, floor)
			}
			return fmt.Sprintf("%s@%d%s", s.Holder, s.Epoch, floor)
		},
	}
	return nm.ToModel()
}

// modelOps turns a key's recorded operations into porcupine's, leaving out
// those that constrain nothing (see register), and adds an amnesia
// operation at each moment every node was down.
func modelOps(ops []op, amnesias []int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, at := range amnesias {
		out = append(out, porcupine.Operation{ClientId: amnesiaClient, Input: modelIn{Kind: kindAmnesia}, Output: modelOut{}, Call: at, Return: at})
	}
	for _, o := range ops {
		var in modelIn
		var res modelOut
		switch o.Kind {
		case kindAcquire, kindTry:
			if o.Code == control.ErrBusy || o.Code == control.ErrInvalid {
				continue // refused by the node itself: never reached the mesh
			}
			in = modelIn{Kind: kindAcquire, Node: o.Node}
			res = modelOut{Granted: o.Code == "", Token: o.Token}
			if res.Granted {
				out = append(out, porcupine.Operation{ClientId: o.Client, Input: modelIn{Kind: kindShadow, Node: o.Node},
					Output: modelOut{}, Call: o.Call, Return: o.Return})
			}
		case kindRead:
			if o.Code != "" {
				continue
			}
			in = modelIn{Kind: kindRead, Node: o.Node}
			res = modelOut{Token: o.Token, Holder: o.Holder, Held: o.Held}
		default:
			continue
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Output: res, Call: o.Call, Return: o.Return})
	}
	return out
}

// amnesiaClient is the client id of amnesia operations.
const amnesiaClient = 1 << 20

// checkLinearizable runs porcupine over each key's operations. It returns
// how many operations it checked, and what it found.
func checkLinearizable(h *history, timeout time.Duration) (int, []string) {
	var problems []string
	checked := 0
	m := lockModel()
	for _, key := range h.keys() {
		ops := modelOps(h.opsOf(key), h.amnesiaTimes())
		for _, o := range ops {
			if k := o.Input.(modelIn).Kind; k == kindAcquire || k == kindRead {
				checked++ // not the model's own shadow and amnesia operations
			}
		}
		switch porcupine.CheckOperationsTimeout(m, ops, timeout) {
		case porcupine.Illegal:
			problems = append(problems, fmt.Sprintf("the history of %q is not linearizable:\n%s", key, explain(m, ops, 25)))
		case porcupine.Unknown:
			problems = append(problems, fmt.Sprintf("the linearizability check of %q (%d operations) did not finish in %v", key, len(ops), timeout))
		}
	}
	return checked, problems
}

// explain shows the last operations of the shortest prefix (by call time)
// that is not linearizable.
func explain(m porcupine.Model, ops []porcupine.Operation, last int) string {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
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
	fmt.Fprintf(&b, "the first %d of %d operations (by call time) are not linearizable; the last is marked >>\n", lo, len(ops))
	for i := max(0, lo-last); i < lo; i++ {
		o := ops[i]
		if i == lo-1 {
			b.WriteString(">> ")
		}
		ret := fmt.Sprint(o.Return)
		if o.Return >= infinity {
			ret = "∞"
		}
		fmt.Fprintf(&b, "[%d, %s] c%d %s\n", o.Call, ret, o.ClientId, m.DescribeOperation(o.Input, o.Output))
	}
	return b.String()
}

// checkExclusion reports holders of a key whose intervals overlap.
func checkExclusion(h *history) []string {
	var problems []string
	for _, key := range h.keys() {
		gs := h.grantsOf(key)
		slices.SortFunc(gs, func(a, b grant) int { return cmp.Compare(a.Start, b.Start) })
		var prev *grant
		for i := range gs {
			g := &gs[i]
			if prev != nil && g.Start < end(*prev) {
				problems = append(problems, fmt.Sprintf("%q held twice at once: %v overlaps %v by %v",
					key, prev, g, time.Duration(end(*prev)-g.Start)))
			}
			if prev == nil || end(*g) > end(*prev) {
				prev = g
			}
		}
	}
	return problems
}

func end(g grant) int64 {
	if g.End == 0 {
		return infinity
	}
	return g.End
}

// checkTokens reports tokens that do not increase strictly, in the order of
// the grants, and tokens granted twice.
func checkTokens(h *history) []string {
	var problems []string
	for _, key := range h.keys() {
		gs := h.grantsOf(key)
		slices.SortFunc(gs, func(a, b grant) int { return cmp.Compare(a.Start, b.Start) })
		for i := 1; i < len(gs); i++ {
			if gs[i].Token <= gs[i-1].Token {
				problems = append(problems, fmt.Sprintf("%q: token %d granted to %s at %d, after token %d to %s at %d",
					key, gs[i].Token, gs[i].Node, gs[i].Start, gs[i-1].Token, gs[i-1].Node, gs[i-1].Start))
			}
		}
	}
	return problems
}

// checkFence reports a fenced resource that admitted a token below one it
// had admitted before, or a token nobody was granted.
func checkFence(h *history) []string {
	var problems []string
	granted := make(map[string]map[uint64]bool)
	for _, g := range h.grantsOf("") {
		if granted[g.Key] == nil {
			granted[g.Key] = make(map[uint64]bool)
		}
		granted[g.Key][g.Token] = true
	}
	highest := make(map[string]uint64)
	for _, w := range h.writesOf("") {
		if !w.Accepted {
			continue
		}
		if w.Token < highest[w.Key] {
			problems = append(problems, fmt.Sprintf("the fence admitted %s's write to %q with token %d after token %d",
				w.Node, w.Key, w.Token, highest[w.Key]))
		}
		if !granted[w.Key][w.Token] {
			problems = append(problems, fmt.Sprintf("the fence admitted %s's write to %q with token %d, which nobody was granted",
				w.Node, w.Key, w.Token))
		}
		highest[w.Key] = max(highest[w.Key], w.Token)
	}
	return problems
}

// summary is what a scenario's checks covered.
type summary struct {
	ops, modelOps, grants, writes, refused int
}

func (s summary) String() string {
	return fmt.Sprintf("%d client operations (%d checked for linearizability), %d grants checked for exclusion and token order, %d fenced writes (%d refused)",
		s.ops, s.modelOps, s.grants, s.writes, s.refused)
}

// verify runs every check over h and fails t for each problem found.
func verify(t *testing.T, h *history) summary {
	t.Helper()
	var s summary
	var problems []string
	s.modelOps, problems = checkLinearizable(h, time.Minute)
	problems = append(problems, checkExclusion(h)...)
	problems = append(problems, checkTokens(h)...)
	problems = append(problems, checkFence(h)...)
	for _, p := range problems {
		t.Error(p)
	}
	s.ops = len(h.opsOf(""))
	s.grants = len(h.grantsOf(""))
	for _, g := range h.grantsOf("") {
		// Neither is a violation of the checks above (the interval ends
		// at the release, or at the deadline if earlier), but both are
		// worth seeing.
		if strings.Contains(g.How, "after its deadline") {
			t.Logf("a lease ran out before its holder released it, with no loss reported: %v", &g)
		}
		if strings.Contains(g.How, "Deadline() says") {
			t.Logf("Lease.Deadline after Release is not the moment of the release: %v", &g)
		}
	}
	for _, w := range h.writesOf("") {
		s.writes++
		if !w.Accepted {
			s.refused++
		}
	}
	t.Logf("checked: %v", s)
	return s
}
