package quorumtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A ghost ends at the first write of its own writer on its key that began
// after the ghost's operation ended and was chosen; a write of another
// writer, on another key, or begun before, leaves it open.
func TestGhostEndsAtTheWritersNextChosenWrite(t *testing.T) {
	h := NewHistory()
	var g Ghosts
	in := Input{Kind: Acquire, Holder: "a/1"}
	out := Output{Outcome: NoQuorum, Unknown: true, AnyEpoch: true}
	g.Add("k", "a/1", -1, in, out, 10, 20)
	g.Add("j", "a/1", -1, in, out, 10, 20)
	g.Chosen("k", "b/1", 25, 30) // another writer
	g.Chosen("k", "a/1", 15, 35) // began before the ghost's operation ended
	g.Chosen("k", "a/1", 40, 60) // the writer's next chosen write
	g.Chosen("k", "a/1", 50, 55) // a later one that reported sooner
	if n := g.AddTo(h); n != 1 {
		t.Fatalf("%d ghosts bounded, want 1", n)
	}
	if ops := h.Ops("k"); len(ops) != 1 || ops[0].Call != 10 || ops[0].Return != 55 {
		t.Fatalf("ghost on k: %+v, want call 10, return 55", ops)
	}
	if ops := h.Ops("j"); len(ops) != 1 || ops[0].Return != Infinity {
		t.Fatalf("ghost on j: %+v, want it open (return Infinity)", ops)
	}
	if g.Len() != 0 {
		t.Fatalf("%d ghosts left after AddTo", g.Len())
	}
}

// What the checker gets: no-ops left out, operations begun before an amnesia
// ended before it, the amnesia itself, and rows (ClientId) that never hold
// two overlapping operations, one client's before the next's.
func TestCheckedOps(t *testing.T) {
	h := NewHistory()
	acq := Input{Kind: Acquire, Holder: "a/1"}
	h.Add("k", 3, acq, Output{Outcome: Granted, Epoch: 1}, 0, 10)
	h.Add("k", 3, acq, Output{Outcome: NoQuorum}, 20, 30) // a no-op
	h.Add("k", 3, acq, Output{Outcome: NoQuorum, Unknown: true, AnyEpoch: true}, 5, Infinity)
	h.Add("k", 1, acq, Output{Outcome: Granted, Epoch: 2}, 40, 200) // cut by the amnesia
	h.Add("k", -1, acq, Output{Outcome: Granted, Epoch: 3}, 150, 160)
	h.Amnesia(100)
	ops := h.checkedOps("k")
	if len(ops) != 5 {
		t.Fatalf("%d operations checked, want 5 (4 and the amnesia): %+v", len(ops), ops)
	}
	want := map[int64]struct {
		ret  int64
		lane int
	}{
		40:  {99, 0},  // client 1, cut before the amnesia
		0:   {10, 1},  // client 3
		5:   {99, 2},  // client 3, overlapping its first: a row of its own
		150: {160, 3}, // no client
		100: {100, 4}, // the amnesia
	}
	for _, op := range ops {
		w, ok := want[op.Call]
		if !ok || op.Return != w.ret || op.ClientId != w.lane {
			t.Errorf("operation [%d, %d] on row %d (%v); want it to end at %d on row %d", op.Call, op.Return, op.ClientId, op.Metadata, w.ret, w.lane)
		}
	}
}

// A history that breaks the model leaves porcupine's drawing of it in
// $LOCKMESH_ARTIFACTS, named after the history and the key, and says where.
func TestFailedCheckWritesVisualization(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LOCKMESH_ARTIFACTS", dir)
	h := historyOf("TestFailed/seed 7", []scripted{
		granted("a/1", 20, 0, 0, 10), granted("b/1", 10, 1, 20, 30),
	})
	h.Add("ok", 0, Input{Kind: Acquire, Holder: "a/1"}, Output{Outcome: Granted, Epoch: 1}, 0, 10)
	vs := h.CheckKeys(10 * time.Second)
	if len(vs) != 2 || vs[0].Key != "k" || vs[0].Result != porcupine.Illegal || vs[1].Failed() {
		t.Fatalf("verdicts %v, want k illegal and ok linearizable", vs)
	}
	if vs[1].Visualization != "" {
		t.Errorf("a passed check left a file: %s", vs[1].Visualization)
	}
	path := filepath.Join(dir, "TestFailed_seed_7-k.html")
	if vs[0].Visualization != path || vs[0].VisualizationErr != nil {
		t.Fatalf("visualisation %q (%v), want %q", vs[0].Visualization, vs[0].VisualizationErr, path)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "granted 10") {
		t.Errorf("the drawing does not show the operation that broke the model")
	}
	if e := h.Explain("k", 10); !strings.Contains(e, path) || !strings.Contains(e, ">> [20, 30] client 1: acquire(b/1) -> granted 10") {
		t.Errorf("Explain does not name the file or the operation:\n%s", e)
	}
	// A second failure of the same history and key does not overwrite it.
	if v := h.CheckKeys(10 * time.Second)[0]; v.Visualization != filepath.Join(dir, "TestFailed_seed_7-k-2.html") {
		t.Errorf("second visualisation %q", v.Visualization)
	}
}

// A check that does not finish in time fails, like one that finds a
// violation, and leaves its drawing too.
func TestCheckTimeoutFails(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LOCKMESH_ARTIFACTS", dir)
	// 40 concurrent writes of unknown outcome and a read that none of them
	// explains: deciding that takes every subset of them, far beyond the
	// timeout. (A release answering "not held" after them, of a grant
	// made while they ran, keeps them all in the check: any of them may
	// explain it.)
	h := NewHistory()
	for i := range 40 {
		h.Add("k", i, Input{Kind: Acquire, Holder: "a/1"},
			Output{Outcome: NoQuorum, Unknown: true, Attempted: []uint64{uint64(i + 1)}}, 0, 100)
	}
	h.Add("k", 41, Input{Kind: Acquire, Holder: "q/1"}, Output{Outcome: Granted, Epoch: 500}, 50, 55)
	h.Add("k", 41, Input{Kind: Release, Holder: "q/1", Epoch: 500}, Output{Outcome: NotHeld}, 150, 160)
	h.Add("k", 40, Input{Kind: Read, Holder: "r/1"}, Output{Outcome: ReadDone, Held: true, Holder: "z/1", Epoch: 99}, 200, 210)
	bad, unknown := h.Check(50 * time.Millisecond)
	if len(bad) != 1 || len(unknown) != 1 {
		t.Fatalf("bad %v, unknown %v; want the timed-out key in both", bad, unknown)
	}
	e := h.Explain("k", 10)
	if !strings.Contains(e, "timed out") || !strings.Contains(e, filepath.Join(dir, "quorumtest-k.html")) {
		t.Errorf("Explain does not say the check timed out, or where its drawing is:\n%s", e)
	}
}

// Writes of unknown outcome that nothing can have observed are left out of
// the check (they can only have done nothing, as far as the history can
// tell), and those something may have observed are kept: the same 40 writes
// that time the check out above are decided at once once nothing names
// their epochs, and each way of observing one keeps it.
func TestUnobservedGhostsAreLeftOut(t *testing.T) {
	ghosts := func() *History {
		h := NewHistory()
		for i := range 40 {
			h.Add("k", i, Input{Kind: Acquire, Holder: "a/1"},
				Output{Outcome: NoQuorum, Unknown: true, Attempted: []uint64{uint64(i + 1)}}, 0, 100)
		}
		return h
	}
	// Nothing names them: the read of z@99 (which no write explains) is
	// found illegal, not timed out.
	h := ghosts()
	h.Add("k", 40, Input{Kind: Read, Holder: "r/1"}, Output{Outcome: ReadDone, Held: true, Holder: "z/1", Epoch: 99}, 200, 210)
	if n := len(h.checkedOps("k")); n != 1 {
		t.Errorf("%d operations checked, want the read alone", n)
	}
	if v := h.CheckKeys(10 * time.Second)[0]; v.Result != porcupine.Illegal {
		t.Errorf("check of the read no write explains: %v, want illegal", v)
	}
	// A write something observed stays, and explains it.
	grantQ := func(call int64) porcupine.Operation { // q/1 granted 500
		return porcupine.Operation{ClientId: 41, Input: Input{Kind: Acquire, Holder: "q/1"},
			Output: Output{Outcome: Granted, Epoch: 500}, Call: call, Return: call + 5}
	}
	lost := porcupine.Operation{ClientId: 41, // q/1 finds its lease gone
		Input: Input{Kind: Release, Holder: "q/1", Epoch: 500}, Output: Output{Outcome: NotHeld}, Call: 200, Return: 210}
	for _, tc := range []struct {
		what string
		ops  []porcupine.Operation
		kept int // ghosts kept
	}{
		{"a read of a/1 at epoch 7", []porcupine.Operation{{ClientId: 40,
			Input: Input{Kind: Read, Holder: "r/1"}, Output: Output{Outcome: ReadDone, Held: true, Holder: "a/1", Epoch: 7}, Call: 200, Return: 210}}, 1},
		{"a release of epoch 7", []porcupine.Operation{{ClientId: 40,
			Input: Input{Kind: Release, Holder: "a/1", Epoch: 7}, Output: Output{Outcome: Released}, Call: 200, Return: 210}}, 1},
		// The writes may have taken the register from q/1's grant.
		{"a release that found its lease gone, granted while the writes ran", []porcupine.Operation{grantQ(50), lost}, 40},
		{"a release that found its lease gone, which a wild write may have held", []porcupine.Operation{{ClientId: 41,
			Input: Input{Kind: Acquire, Holder: "q/1"}, Output: Output{Outcome: NoQuorum, Unknown: true, AnyEpoch: true}, Call: 60, Return: 300}, lost}, 40},
		// They cannot: every write came before q/1 could hold the key.
		{"a release that found its lease gone, granted after the writes", []porcupine.Operation{grantQ(150), lost}, 0},
		{"a release that found a lease gone that nobody was granted", []porcupine.Operation{lost}, 0},
		{"a cleanup of a/1 of unknown outcome", []porcupine.Operation{{ClientId: 40,
			Input: Input{Kind: Cleanup, Holder: "a/1"}, Output: Output{Outcome: NoQuorum, Unknown: true}, Call: 200, Return: 210}}, 40},
	} {
		h := ghosts()
		for _, op := range tc.ops {
			h.Add("k", op.ClientId, op.Input.(Input), op.Output.(Output), op.Call, op.Return)
		}
		if n := len(h.checkedOps("k")) - len(tc.ops); n != tc.kept {
			t.Errorf("with %s: %d writes of unknown outcome checked, want %d", tc.what, n, tc.kept)
		}
	}
	// A release that ended before the writes began cannot follow them.
	h = ghosts()
	h.Add("k", 40, Input{Kind: Release, Holder: "q/1", Epoch: 500}, Output{Outcome: NotHeld}, -20, -10)
	if n := len(h.checkedOps("k")); n != 1 {
		t.Errorf("%d operations checked after a release that ended before the writes, want the release alone", n)
	}
}
