//go:build unix && !linux

package pgtest

import "syscall"

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
// A test binary that dies may leave its server running until reboot.
func setParentDeathSignal(*syscall.SysProcAttr) {}
