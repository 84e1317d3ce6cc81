package control

import (
	"syscall"
	"unsafe"
)

// Now reads CLOCK_MONOTONIC in nanoseconds: one clock for every process of
// the machine, whatever the network namespace, and never stepped.
func Now() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic("control: clock_gettime(CLOCK_MONOTONIC): " + e.Error())
	}
	return ts.Nano()
}
