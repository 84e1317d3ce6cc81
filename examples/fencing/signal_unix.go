//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// freeze stops every thread of p (SIGSTOP), as a long GC pause, a frozen
// virtual machine or a suspended laptop would, and returns once all of them
// have stopped. kill(2) returns before that: one thread takes the signal
// and stops the others when it next runs, and on a busy machine another
// thread could meanwhile read the parent's "go" and begin its write. The
// parent learns of the completed stop from wait4 with WUNTRACED (p is our
// child), which leaves the child's exit status for exec.Cmd.Wait.
func freeze(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(p.Pid, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("waiting for process %d to stop: %w", p.Pid, err)
		case ws.Stopped():
			return nil
		case ws.Exited() || ws.Signaled():
			return fmt.Errorf("process %d ended instead of stopping (%v)", p.Pid, ws)
		}
	}
}

// thaw resumes a frozen process (SIGCONT).
func thaw(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
