package quorum

import (
	"encoding/binary"
	"strconv"
	"strings"
)

// A counting semaphore — up to N holders of a name at once — is N ordinary
// keys, its slots: NAME#0 to NAME#(N−1). A holder holds one slot, as a
// lease like any other, so each holder has its own fencing token (the
// slot's, increasing per slot), its own renewals and loss notice, and the
// slots' waiters are served in turn by the voters. No register of a new
// shape and no protocol change is needed; at most N leases can be held
// at once because there are N slots, each held by one lease at a time.
//
// The one thing N keys cannot tell is N itself: a node that believed N were
// 5 would use slots the others never look at. So every slot's value starts
// with the N its holder used (SlotValue), and an acquirer checks every slot
// it finds held (Semaphore.Check); package mesh also checks the other slots
// once granted, and slot N, the first beyond its own.

// Semaphore names a counting semaphore and its size.
type Semaphore struct {
	Name string
	N    int
}

// MaxSemaphore bounds N: an acquirer may look at every slot.
const MaxSemaphore = 256

// Slots is how many slots the semaphore has: N.
func (s Semaphore) Slots() int { return s.N }

// Slot is the key of slot i.
func (s Semaphore) Slot(i int) string { return s.Name + "#" + strconv.Itoa(i) }

// SlotOf returns the slot a key is of, if it is one of s's (any index,
// within N or not).
func (s Semaphore) SlotOf(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, s.Name+"#")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// slotMagic starts the value of every semaphore slot.
const slotMagic = "\x00sem"

// SlotValue is the value a holder of one of s's slots writes: N, then the
// holder's own data.
func (s Semaphore) SlotValue(data string) string {
	b := make([]byte, 0, len(slotMagic)+binary.MaxVarintLen64+len(data))
	b = append(b, slotMagic...)
	b = binary.AppendUvarint(b, uint64(s.N))
	return string(append(b, data...))
}

// ParseSlotValue splits a slot's value into the N its holder used and the
// holder's data; ok is false for a value no semaphore wrote.
func ParseSlotValue(v string) (n int, data string, ok bool) {
	rest, found := strings.CutPrefix(v, slotMagic)
	if !found {
		return 0, "", false
	}
	x, k := binary.Uvarint([]byte(rest))
	if k <= 0 || x == 0 || x > MaxSemaphore {
		return 0, "", false
	}
	return int(x), rest[k:], true
}

// Check compares the value of a slot found held with s: it returns the N
// its holder used, and false when that is not s.N (or the slot is held by
// a plain lock, n 0).
func (s Semaphore) Check(v string) (n int, ok bool) {
	n, _, ok = ParseSlotValue(v)
	if !ok {
		return 0, false
	}
	return n, n == s.N
}
