package quorum

import (
	"math/rand"
	"testing"
)

// The round table answers as a map of the same entries would, for ids it
// gave out, and misses every id it removed, even once the slot is reused.
func TestRoundTableActsAsAMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	tab := newRoundTable(uint64(rng.Int63()))
	want := map[uint64]roundRef{}
	var live, gone []uint64
	ops := make([]op, 64)
	for step := 0; step < 200000; step++ {
		switch k := rng.Intn(10); {
		case k < 4 || len(live) == 0:
			ref := roundRef{x: &ops[rng.Intn(len(ops))]}
			id := tab.add(ref, uint64(step))
			if _, dup := want[id]; dup {
				t.Fatalf("step %d: id %#x given out twice", step, id)
			}
			want[id] = ref
			live = append(live, id)
		case k < 7:
			i := rng.Intn(len(live))
			id := live[i]
			tab.remove(id)
			delete(want, id)
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			gone = append(gone, id)
		default:
			id := live[rng.Intn(len(live))]
			ref := roundRef{late: &keyState{}}
			tab.set(id, ref)
			want[id] = ref
		}
		if step%97 == 0 && len(gone) > 0 {
			id := gone[rng.Intn(len(gone))]
			if r, ok := tab.get(id); ok {
				t.Fatalf("step %d: removed id %#x still found: %+v", step, id, r)
			}
		}
	}
	if tab.len() != len(want) {
		t.Fatalf("len %d, want %d", tab.len(), len(want))
	}
	for id, ref := range want {
		if got, ok := tab.get(id); !ok || got != ref {
			t.Fatalf("id %#x: got %+v %v, want %+v", id, got, ok, ref)
		}
	}
	seen := 0
	tab.each(func(id, _ uint64, ref roundRef) {
		seen++
		if want[id] != ref {
			t.Fatalf("each: id %#x: %+v, want %+v", id, ref, want[id])
		}
	})
	if seen != len(want) {
		t.Fatalf("each saw %d entries, want %d", seen, len(want))
	}
	// Ids of other requests (below 1<<63) and ids of slots never made miss.
	for _, id := range []uint64{0, 1, 1 << 62, idBit | uint64(len(tab.slots))} {
		if _, ok := tab.get(id); ok {
			t.Fatalf("id %#x found", id)
		}
	}
}

// A slot whose generation reached the last one is not used again: no id
// comes twice in one life.
func TestRoundTableRetiresASlotAtItsLastGeneration(t *testing.T) {
	tab := roundTable{base: maxGen - 2}
	seen := map[uint64]bool{}
	for i := 0; i < 10; i++ {
		id := tab.add(roundRef{}, uint64(i))
		if seen[id] {
			t.Fatalf("id %#x given out twice", id)
		}
		seen[id] = true
		tab.remove(id)
	}
	// Slot 0 served generations maxGen-2 … maxGen, then was retired; the
	// others were made after it.
	if len(tab.slots) < 4 {
		t.Fatalf("%d slots: a slot was used past its last generation", len(tab.slots))
	}
}
