//go:build linux

package faulttest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// The linearizability check is quorumtest's, over what a client of the
// mesh can observe (see "Where the recorders differ" in its documentation):
//
//   - A grant: the register held by the node at its token. The acquire's
//     earlier rounds, if it had any, may have been granted too and expired
//     unseen: a write of unknown outcome at an epoch nobody learned, which
//     its own grant ends.
//   - An acquire that was not granted (refused, timed out, no quorum, or its
//     process died) may still have written in a round whose end it never
//     heard: such a write may take effect until its process's next grant of
//     the key (quorumtest.Ghosts), or forever if there is none. A refusal
//     also names the holder it found (Locked).
//   - A read is mesh.Holder's: held means a live lease; an expired one still
//     names its holder; free names nobody, and may be the first sign of a
//     free the node did in the background.
//   - A release answers nil both when it freed the key and when the lease
//     had been lost, and nodes free grants in the background too, so
//     releases are not recorded.
//   - When every node was down at once (a full restart), all lock state was
//     gone: an amnesia, after which the key reads as never granted but every
//     grant must still be above the tokens granted before.

// lin is a scenario's history as quorumtest checks it.
type lin struct {
	hist *qt.History
	// checked counts client operations in it; ghosts the writes of unknown
	// outcome, bounded those a later grant of their process ended.
	checked, ghosts, bounded int
	took                     time.Duration // porcupine's time, every key
}

// linearizable turns h's client operations into a quorumtest history,
// named name.
func linearizable(name string, h *history) lin {
	l := lin{hist: qt.NewHistory()}
	l.hist.SetName(name)
	var ghosts qt.Ghosts
	unknown := qt.Output{Outcome: qt.NoQuorum, Unknown: true, AnyEpoch: true}
	for _, o := range h.opsOf("") {
		writer := cmp.Or(o.Proc, o.Node) // one process: its ballots only grow
		switch o.Kind {
		case kindAcquire, kindTry:
			if o.Code == control.ErrBusy || o.Code == control.ErrInvalid {
				continue // refused by the node itself: never reached the mesh
			}
			in := qt.Input{Kind: qt.Acquire, Holder: o.Node}
			switch {
			case o.Code == "":
				l.hist.Add(o.Key, o.Client, in, qt.Output{Outcome: qt.Granted, Epoch: o.Token}, o.Call, o.Return)
				l.hist.Add(o.Key, o.Client, in, unknown, o.Call, o.Return)
				ghosts.Chosen(o.Key, writer, o.Call, o.Return)
				l.ghosts++
				l.bounded++
				l.checked++
				continue
			case o.Holder != "":
				l.hist.Add(o.Key, o.Client, in, qt.Output{Outcome: qt.Locked, Holder: o.Holder, Epoch: o.Token}, o.Call, o.Return)
				l.checked++
			}
			ghosts.Add(o.Key, writer, o.Client, in, unknown, o.Call, o.Return)
			l.ghosts++
		case kindRead:
			if o.Code != "" {
				continue
			}
			l.hist.Add(o.Key, o.Client, qt.Input{Kind: qt.Read, Holder: o.Node},
				qt.Output{Outcome: qt.ReadDone, Live: true, Held: o.Held, Holder: o.Holder, Epoch: o.Token}, o.Call, o.Return)
			l.checked++
		}
	}
	l.bounded += ghosts.AddTo(l.hist)
	for _, at := range h.amnesiaTimes() {
		l.hist.Amnesia(at)
	}
	return l
}

// checkLinearizable runs quorumtest's check over each key's operations. It
// returns how many client operations it checked, and what it found: each
// failed check (not linearizable, or timed out) with the path of
// porcupine's visualisation of it.
func checkLinearizable(name string, h *history, timeout time.Duration) (lin, []string) {
	l := linearizable(name, h)
	var problems []string
	for _, v := range l.hist.CheckKeys(timeout) {
		l.took += v.Took
		if v.Failed() {
			problems = append(problems, l.hist.Explain(v.Key, 25))
		}
	}
	return l, problems
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
	ops, modelOps, ghosts, bounded, grants, writes, refused int
	linTook                                                 time.Duration
}

func (s summary) String() string {
	return fmt.Sprintf("%d client operations (%d checked for linearizability in %v, with %d writes of unknown outcome, %d of them ended by a grant of their process), "+
		"%d grants checked for exclusion and token order, %d fenced writes (%d refused)",
		s.ops, s.modelOps, s.linTook.Round(time.Microsecond), s.ghosts, s.bounded, s.grants, s.writes, s.refused)
}

// verify runs every check over h and fails t for each problem found.
func verify(t *testing.T, h *history) summary {
	t.Helper()
	var s summary
	var problems []string
	var l lin
	l, problems = checkLinearizable(t.Name(), h, time.Minute)
	s.modelOps, s.ghosts, s.bounded, s.linTook = l.checked, l.ghosts, l.bounded, l.took
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
