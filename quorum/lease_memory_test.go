package quorum

import (
	"testing"
	"unsafe"
)

// TestHeldLeaseStateSizes keeps what a node keeps for each lease it holds
// within its allocation size classes (bench renewal: about 1 KB a lease on
// the holder, its own voter's register included). Growing one of these
// past its bound costs every held lease the next size class.
func TestHeldLeaseStateSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	for _, c := range []struct {
		name      string
		size, max uintptr
	}{
		{"keyState", unsafe.Sizeof(keyState{}), 224},
		{"heldLease", unsafe.Sizeof(heldLease{}), 64},
		{"register", unsafe.Sizeof(register{}), 256},
		{"timer", unsafe.Sizeof(timer{}), 48}, // a notice timer per lease
	} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, above its %d-byte size class", c.name, c.size, c.max)
		}
	}
}

// TestSharedIncsAreNeverWritten: fast paths share their sets of voters
// (sharedIncs); one set stands for the same pairs in any order, and a voter
// that joins a key's set later leaves the shared one as it was.
func TestSharedIncsAreNeverWritten(t *testing.T) {
	var s sharedIncs
	ab := s.ofReplies([]reply{{from: "a", inc: 1}, {from: "b", inc: 2}})
	ba := s.ofReplies([]reply{{from: "b", inc: 2}, {from: "a", inc: 1}})
	if ab != ba {
		t.Fatalf("the same pairs in another order are two sets: %v, %v", *ab, *ba)
	}
	if other := s.ofReplies([]reply{{from: "a", inc: 1}, {from: "b", inc: 3}}); other == ab {
		t.Fatalf("another incarnation shares the set: %v", *other)
	}
	abc := s.with(*ab, voterInc{"c", 4})
	if len(*ab) != 2 || ab.get("c") != 0 || abc.get("c") != 4 || abc.get("a") != 1 || len(*abc) != 3 {
		t.Fatalf("after a late voter: shared %v, the key's %v", *ab, *abc)
	}
	if again := s.with(*ba, voterInc{"c", 4}); again != abc {
		t.Errorf("the same late voter made a second set: %v, %v", *again, *abc)
	}
}
