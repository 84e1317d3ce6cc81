package quorum

// roundTable maps the wire ids of a proposer's rounds to what it knows of
// them (roundRef). A node holding many leases keeps an entry per lease (the
// late entry of the accept round that left the key's fast path), and every
// answer a voter sends is looked up here: with 100,000 leases, probing a
// hash map of that size for each of the three answers to each renewal,
// and for the entries each round adds and removes, was a fifth of the
// holder's CPU (bench renewal, -node-profile), almost all of it waiting
// for memory. Here an id names its slot: a lookup is one index and one
// comparison.
//
// An id is idBit | gen<<slotBits | slot. A slot is reused once its entry
// is removed, with a generation one higher, so that an answer to the
// round that used the slot before finds a different id and misses; a slot
// whose generation would reach maxGen is retired instead, so no id comes
// twice in one life. Freed slots are reused oldest first, which spreads the
// generations over the slots. The generations start at a random base
// (NewProposer), so that an answer meant for an earlier life of the node
// is very unlikely to match a round of this one, as it was when round ids
// started at a random number. idBit keeps these ids apart from the ids of
// the proposer's other requests (observations), which count from below
// 1<<62 (Proposer.nextRID).
type roundTable struct {
	slots []roundSlot
	free  []uint32 // freed slots, oldest first from freeAt
	at    int      // free[at:] are the slots free to reuse
	base  uint64   // the generation a new slot starts at
	n     int      // entries
}

type roundSlot struct {
	gen uint64 // of the slot's current id; 0 while the slot is free
	// seq orders the entries as they were added (Proposer.nextRID at
	// that moment), for a walk in a reproducible order.
	seq uint64
	ref roundRef
}

const (
	slotBits = 26
	slotMask = 1<<slotBits - 1
	maxGen   = 1<<(63-slotBits) - 1
	idBit    = 1 << 63
)

func newRoundTable(base uint64) roundTable {
	// Leave room for 2^36 uses of every slot from the base.
	return roundTable{base: base%(maxGen/2) + 1}
}

// add makes an entry for ref and returns its id. seq is the caller's
// counter at this moment (see roundSlot.seq).
func (t *roundTable) add(ref roundRef, seq uint64) uint64 {
	var i uint32
	if t.at < len(t.free) {
		i = t.free[t.at]
		t.at++
		if t.at == len(t.free) {
			t.free, t.at = t.free[:0], 0
		} else if t.at >= 1024 && t.at*2 >= len(t.free) {
			n := copy(t.free, t.free[t.at:])
			t.free, t.at = t.free[:n], 0
		}
	} else {
		if len(t.slots) > slotMask {
			panic("quorum: more than 2^26 rounds at once")
		}
		i = uint32(len(t.slots))
		t.slots = append(t.slots, roundSlot{seq: t.base - 1}) // its first id is of generation base
	}
	s := &t.slots[i]
	s.gen = s.lastGen() + 1
	s.seq, s.ref = seq, ref
	t.n++
	return idBit | s.gen<<slotBits | uint64(i)
}

// lastGen is the generation the slot's previous id had. A free slot keeps
// it in ref.gen's place: see remove.
func (s *roundSlot) lastGen() uint64 { return s.seq }

// slot returns id's slot if id is in the table.
func (t *roundTable) slot(id uint64) *roundSlot {
	if id&idBit == 0 {
		return nil
	}
	i := id & slotMask
	if i >= uint64(len(t.slots)) {
		return nil
	}
	s := &t.slots[i]
	if s.gen == 0 || s.gen != (id&^idBit)>>slotBits {
		return nil
	}
	return s
}

// get returns id's entry; the zero roundRef if there is none.
func (t *roundTable) get(id uint64) (roundRef, bool) {
	if s := t.slot(id); s != nil {
		return s.ref, true
	}
	return roundRef{}, false
}

// set replaces id's entry, which must be in the table.
func (t *roundTable) set(id uint64, ref roundRef) {
	if s := t.slot(id); s != nil {
		s.ref = ref
	}
}

// remove deletes id's entry, if it is in the table, and frees its slot.
func (t *roundTable) remove(id uint64) {
	s := t.slot(id)
	if s == nil {
		return
	}
	gen := s.gen
	*s = roundSlot{seq: gen} // a free slot keeps its last generation in seq
	t.n--
	if gen < maxGen {
		t.free = append(t.free, uint32(id&slotMask))
	}
}

// len is the number of entries.
func (t *roundTable) len() int { return t.n }

// each calls f for every entry, in no particular order; f must not add or
// remove entries.
func (t *roundTable) each(f func(id, seq uint64, ref roundRef)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.gen != 0 {
			f(idBit|s.gen<<slotBits|uint64(i), s.seq, s.ref)
		}
	}
}
