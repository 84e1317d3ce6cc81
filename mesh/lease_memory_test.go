package mesh

import (
	"testing"
	"unsafe"
)

// TestLeaseSize keeps a Lease within its allocation size class: a node may
// hold 100,000 of them (bench renewal).
func TestLeaseSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if n := unsafe.Sizeof(Lease{}); n > 112 {
		t.Errorf("Lease is %d bytes, above its 112-byte size class", n)
	}
}
