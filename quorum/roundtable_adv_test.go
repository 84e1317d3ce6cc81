package quorum

import (
	"math/rand"
	"testing"
)

// Near the last generation, with many entries live at once and slots
// retired every few uses, no id is given out twice, every removed id
// misses, and every live one is found.
func TestRoundTableNearTheLastGeneration(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	tab := roundTable{base: maxGen - 5}
	ever := map[uint64]bool{}
	var live, gone []uint64
	for step := 0; step < 200000; step++ {
		if rng.Intn(2) == 0 || len(live) == 0 {
			id := tab.add(roundRef{}, uint64(step))
			if ever[id] {
				t.Fatalf("step %d: id %#x given out twice", step, id)
			}
			if id&idBit == 0 {
				t.Fatalf("step %d: id %#x without idBit", step, id)
			}
			ever[id] = true
			live = append(live, id)
			continue
		}
		i := rng.Intn(len(live))
		id := live[i]
		tab.remove(id)
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		gone = append(gone, id)
		if g := gone[rng.Intn(len(gone))]; func() bool { _, ok := tab.get(g); return ok }() {
			t.Fatalf("step %d: removed id %#x found", step, g)
		}
	}
	for _, id := range live {
		if _, ok := tab.get(id); !ok {
			t.Fatalf("live id %#x missing", id)
		}
	}
	if tab.len() != len(live) {
		t.Fatalf("len %d, want %d", tab.len(), len(live))
	}
	t.Logf("%d ids, %d slots", len(ever), len(tab.slots))
}
