//go:build unix

package main

import (
	"os"
	"syscall"
)

// freeze stops every thread of p (SIGSTOP), as a long GC pause, a frozen
// virtual machine or a suspended laptop would; thaw resumes it (SIGCONT).
func freeze(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func thaw(p *os.Process) error   { return p.Signal(syscall.SIGCONT) }
