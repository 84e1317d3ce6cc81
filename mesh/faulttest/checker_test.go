//go:build linux

package faulttest

import (
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// The checks must catch what they are named for. A small clean history
// passes them all; each broken variant fails exactly the check that guards
// against its fault. (This test starts no process, so it runs without
// LOCKMESH_FAULTS.)
func TestChecksCatchBrokenHistories(t *testing.T) {
	t.Setenv("LOCKMESH_ARTIFACTS", t.TempDir()) // the broken histories' drawings
	const ms = int64(time.Millisecond)
	// a holds "k" with token 10 over [0, 100ms], then b with token 20 over
	// [150ms, 300ms]; each writes under its token; c reads b's grant.
	clean := func() *history {
		h := &history{}
		h.ops = []op{
			{Key: "k", Client: 0, Node: "a", Kind: kindAcquire, Call: 0, Return: 1 * ms, Token: 10},
			{Key: "k", Client: 1, Node: "b", Kind: kindAcquire, Call: 50 * ms, Return: 150 * ms, Token: 20},
			{Key: "k", Client: 2, Node: "c", Kind: kindRead, Call: 200 * ms, Return: 210 * ms, Token: 20, Holder: "b", Held: true},
			{Key: "k", Client: 2, Node: "c", Kind: kindTry, Call: 220 * ms, Return: 230 * ms, Code: control.ErrLocked, Token: 20, Holder: "b"},
		}
		h.grants = []*grant{
			{Key: "k", Node: "a", Token: 10, Start: 1 * ms, End: 100 * ms, How: control.EndReleased},
			{Key: "k", Node: "b", Token: 20, Start: 150 * ms, End: 300 * ms, How: control.EndReleased},
		}
		for _, w := range []struct {
			node  string
			token uint64
		}{{"a", 10}, {"b", 20}} {
			if err := h.wrote(w.node, "k", w.token, 0, false); err != nil {
				t.Fatalf("setting up: %v", err)
			}
		}
		return h
	}
	type checks struct{ lin, excl, tokens, fence []string }
	run := func(h *history) checks {
		_, lin := checkLinearizable(t.Name(), h, 10*time.Second)
		return checks{lin, checkExclusion(h), checkTokens(h), checkFence(h)}
	}
	if got := run(clean()); len(got.lin)+len(got.excl)+len(got.tokens)+len(got.fence) > 0 {
		t.Fatalf("the clean history fails: %+v", got)
	}

	for _, tc := range []struct {
		name   string
		damage func(h *history)
		want   func(c checks) []string // the check that must complain
		words  string                  // and what it must say
	}{
		{
			name: "overlapping holders",
			// b is granted while a may still act.
			damage: func(h *history) { h.grants[1].Start = 90 * ms },
			want:   func(c checks) []string { return c.excl },
			words:  "held twice at once",
		},
		{
			name: "decreasing token",
			// b's grant comes after a's with a lower token.
			damage: func(h *history) { h.grants[1].Token = 5 },
			want:   func(c checks) []string { return c.tokens },
			words:  "token 5 granted to b",
		},
		{
			name:   "a token granted twice",
			damage: func(h *history) { h.grants[1].Token = 10 },
			want:   func(c checks) []string { return c.tokens },
			words:  "token 10 granted to b",
		},
		{
			name: "fence accepting a lower token",
			// A broken fence let a's stale write in after b's.
			damage: func(h *history) {
				h.writes = append(h.writes, write{Key: "k", Node: "a", Token: 10, Stale: true, Accepted: true, Highest: 20})
			},
			want:  func(c checks) []string { return c.fence },
			words: "admitted a's write to \"k\" with token 10 after token 20",
		},
		{
			name: "fence accepting a token never granted",
			damage: func(h *history) {
				h.writes = append(h.writes, write{Key: "k", Node: "x", Token: 30, Accepted: true, Highest: 20})
			},
			want:  func(c checks) []string { return c.fence },
			words: "which nobody was granted",
		},
		{
			name: "stale read",
			// c reads a's grant after b's acquire returned.
			damage: func(h *history) { h.ops[2].Token, h.ops[2].Holder = 10, "a" },
			want:   func(c checks) []string { return c.lin },
			words:  "not linearizable",
		},
		{
			name: "token not above one granted before",
			// b's acquire begins after a's returned, with a lower token.
			damage: func(h *history) { h.ops[1].Token = 5 },
			want:   func(c checks) []string { return c.lin },
			words:  "not linearizable",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.damage(h)
			got := run(h)
			found := tc.want(got)
			if len(found) == 0 {
				t.Fatalf("no check caught it: %+v", got)
			}
			if !strings.Contains(strings.Join(found, "\n"), tc.words) {
				t.Errorf("caught, but not saying %q:\n%s", tc.words, strings.Join(found, "\n"))
			}
			t.Logf("caught: %s", found[0])
		})
	}
}

// What a client of the mesh sees, as the suite records it for quorumtest's
// model: each history is accepted or rejected as the mesh allows. One key,
// "k"; node names; times in ms.
func TestModelOfWhatClientsSee(t *testing.T) {
	t.Setenv("LOCKMESH_ARTIFACTS", t.TempDir()) // the rejected histories' drawings
	const ms = int64(time.Millisecond)
	acq := func(node string, call, ret int64, token uint64) op {
		return op{Key: "k", Node: node, Proc: node + "#1", Kind: kindAcquire, Call: call * ms, Return: ret * ms, Token: token}
	}
	refused := func(node string, call, ret int64, code, holder string, token uint64) op {
		return op{Key: "k", Node: node, Proc: node + "#1", Kind: kindTry, Call: call * ms, Return: ret * ms, Code: code, Holder: holder, Token: token}
	}
	read := func(node string, call, ret int64, held bool, holder string, token uint64) op {
		return op{Key: "k", Node: node, Proc: node + "#1", Kind: kindRead, Call: call * ms, Return: ret * ms, Held: held, Holder: holder, Token: token}
	}
	for _, tc := range []struct {
		name     string
		ops      []op
		amnesias []int64 // ms
		legal    bool
	}{
		{"a full restart, tokens increasing", []op{
			acq("a", 0, 10, 20), read("b", 200, 210, false, "", 0), acq("b", 220, 230, 30),
		}, []int64{100}, true},
		{"a token below one granted before the full restart", []op{
			acq("a", 0, 10, 20), read("b", 200, 210, false, "", 0), acq("b", 220, 230, 15),
		}, []int64{100}, false},
		{"never granted, without a full restart", []op{
			acq("a", 0, 10, 20), read("b", 200, 210, false, "", 0),
		}, nil, false},
		{"an acquire cut by the full restart takes effect after it", []op{
			acq("a", 0, 10, 20),
			{Key: "k", Node: "c", Proc: "c#1", Kind: kindAcquire, Call: 50 * ms, Return: infinity, Code: "unknown"},
			read("b", 200, 210, true, "c", 40),
		}, []int64{100}, false},
		{"the same without the restart: its write may surface", []op{
			acq("a", 0, 10, 20),
			{Key: "k", Node: "c", Proc: "c#1", Kind: kindAcquire, Call: 50 * ms, Return: infinity, Code: "unknown"},
			read("b", 200, 210, true, "c", 40),
		}, nil, true},
		{"a refused try's earlier round surfaces after a read that missed it", []op{
			acq("a", 0, 10, 20), refused("c", 20, 30, control.ErrLocked, "a", 20),
			read("b", 40, 50, false, "a", 20), read("b", 60, 70, true, "c", 25),
		}, nil, true},
		{"... but not after its process's next grant", []op{
			acq("a", 0, 10, 20), refused("c", 20, 30, control.ErrLocked, "a", 20),
			acq("c", 40, 50, 30), read("b", 60, 70, true, "c", 25),
		}, nil, false},
		{"a refusal naming a holder of another token", []op{
			acq("a", 0, 10, 20), refused("c", 20, 30, control.ErrLocked, "b", 20),
		}, nil, false},
		{"an expired lease still names its holder", []op{
			acq("a", 0, 10, 20), read("b", 2000, 2010, false, "a", 20),
		}, nil, true},
		{"an expired lease named with another holder", []op{
			acq("a", 0, 10, 20), read("b", 2000, 2010, false, "c", 20),
		}, nil, false},
		{"free after a release nobody recorded, then free still", []op{
			acq("a", 0, 10, 20), read("b", 20, 30, false, "", 20), read("c", 40, 50, false, "", 20),
		}, nil, true},
		{"held again after it read as free", []op{
			acq("a", 0, 10, 20), read("b", 20, 30, false, "", 20), read("c", 40, 50, false, "a", 20),
		}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &history{ops: tc.ops}
			for _, at := range tc.amnesias {
				h.amnesias = append(h.amnesias, at*ms)
			}
			_, problems := checkLinearizable(t.Name(), h, 10*time.Second)
			switch {
			case tc.legal && len(problems) > 0:
				t.Errorf("a legal history fails the check:\n%s", strings.Join(problems, "\n"))
			case !tc.legal && len(problems) == 0:
				t.Errorf("an illegal history passes the check")
			case !tc.legal:
				t.Logf("caught: %s", problems[0])
			}
		})
	}
}
