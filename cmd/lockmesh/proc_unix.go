//go:build unix

package main

import (
	"os"
	"syscall"
)

// Process groups, signals and file owners: Unix only (proc_other.go says
// so elsewhere).

// forwarded are the signals lock passes on to CMD's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func checkPlatform() error { return nil }

// childAttr makes CMD the leader of a process group of its own, so that
// one signal reaches it and every process it starts.
func childAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(a)
	return a
}

// signalGroup sends sig to the process group pgid. A group that has no
// process left is not an error.
func signalGroup(pgid int, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		syscall.Kill(-pgid, s)
	}
}

// signalNumber is sig's number, for the shell's 128+N exit statuses.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// exitStatus is a finished process's status as a shell reports it: its
// exit code, or 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ps.ExitCode()
}

// fileOwner is the user id owning path.
func fileOwner(path string) (int, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// withUmask runs fn with the process's umask set to mask. Only for use
// before other goroutines create files.
func withUmask(mask os.FileMode, fn func() error) error {
	old := syscall.Umask(int(mask))
	defer syscall.Umask(old)
	return fn()
}
