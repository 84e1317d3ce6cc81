package pgtest

import "syscall"

// setParentDeathSignal asks Linux to send the server SIGINT (fast shutdown)
// when the test binary dies. Go sets it after switching the user, which
// would otherwise clear it.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGINT
}
