package main

import "syscall"

// setParentDeathSignal has the kernel SIGKILL CMD when lock dies (the
// thread that started CMD, strictly: Go keeps its threads alive).
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
