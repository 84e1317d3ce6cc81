//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal: only Linux kills CMD when lock dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}
