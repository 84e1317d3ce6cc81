//go:build linux

package faulttest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

var (
	// errExited: the process ended before answering; the request's outcome
	// is unknown (it may have taken effect).
	errExited = errors.New("the process exited before answering")
	// errNoAnswer: no answer within the wait; the outcome is unknown.
	errNoAnswer = errors.New("no answer in time")
	// errDown: the node had no process; nothing was sent.
	errDown = errors.New("the node is down")
)

// proc is one OS process of the suite (a node or the proxy), driven over
// its stdin and stdout with control's JSON lines.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   *os.File

	// onReply sees every reply and event, in the order the process wrote
	// them, before the caller does (nil call for events). For a fenced
	// write it returns the fence's verdict.
	onReply func(p *proc, pc *pendingCall, r control.Reply, at int64) error
	// onExit runs once the process has exited, before exited closes.
	onExit func(p *proc)

	started chan control.Reply
	hello   control.Reply // the "started" line: addresses and pid
	writeMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*pendingCall // nil once the process exited
	paused  int64                   // when SIGSTOP was sent; 0 when running

	exited  chan struct{}
	exitAt  int64 // control.Now() once it exited
	exitErr error
}

type pendingCall struct {
	req    control.Request
	callAt int64
	ch     chan result
}

// result is a request's answer, or why there is none.
type result struct {
	r      control.Reply
	callAt int64 // when it was sent (control.Now)
	at     int64 // when the answer was read
	err    error // errExited, errNoAnswer or errDown: outcome unknown (errDown: not sent)
	fence  error // a write's verdict from the fenced resource
}

func (r result) ok() bool { return r.err == nil && r.r.Err == "" }

// code is the request's error code, or "unknown" when its outcome is.
func (r result) code() string {
	if r.err != nil {
		return "unknown"
	}
	return r.r.Err
}

// startProc starts argv with its stderr appended to logPath and waits for
// its "started" line.
func startProc(name string, argv []string, logPath string, onReply func(*proc, *pendingCall, control.Reply, int64) error, onExit func(*proc)) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== faulttest: starting %s: %q\n", name, argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{
		name: name, cmd: cmd, stdin: stdin, log: logf, onReply: onReply, onExit: onExit,
		started: make(chan control.Reply, 1), pending: make(map[uint64]*pendingCall), exited: make(chan struct{}),
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go p.read(stdout)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case p.hello = <-p.started:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited at start (%v); see %s", name, p.exitErr, logPath)
	case <-timer.C:
		p.kill()
		return nil, fmt.Errorf("%s did not start within 30s; see %s", name, logPath)
	}
}

// read dispatches the process's output lines until it exits. A line that
// does not parse is logged and skipped.
func (p *proc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		at := control.Now()
		var r control.Reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			fmt.Fprintf(p.log, "=== faulttest: unparsable line from %s: %q\n", p.name, sc.Bytes())
			continue
		}
		if r.Event == control.EventStarted {
			select {
			case p.started <- r:
			default:
			}
			continue
		}
		var pc *pendingCall
		if r.ID != 0 {
			p.mu.Lock()
			pc = p.pending[r.ID]
			delete(p.pending, r.ID)
			p.mu.Unlock()
		}
		var fence error
		if p.onReply != nil {
			fence = p.onReply(p, pc, r, at)
		}
		if pc != nil {
			pc.ch <- result{r: r, callAt: pc.callAt, at: at, fence: fence}
		}
	}
	io.Copy(io.Discard, stdout) // a line too long stopped the scanner
	err := p.cmd.Wait()
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.exitAt = control.Now()
	p.exitErr = err
	p.mu.Unlock()
	for _, pc := range pending {
		pc.ch <- result{callAt: pc.callAt, err: errExited}
	}
	if p.onExit != nil {
		p.onExit(p)
	}
	p.log.Close()
	close(p.exited)
}

// call sends req and waits up to wait for its answer.
func (p *proc) call(req control.Request, wait time.Duration) result {
	ch := make(chan result, 1)
	p.mu.Lock()
	if p.pending == nil {
		p.mu.Unlock()
		return result{err: errDown}
	}
	p.nextID++
	req.ID = p.nextID
	callAt := control.Now()
	p.pending[req.ID] = &pendingCall{req: req, callAt: callAt, ch: ch}
	p.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		p.mu.Lock()
		delete(p.pending, req.ID)
		p.mu.Unlock()
		return result{err: fmt.Errorf("%w: %v", errDown, err)}
	}
	p.writeMu.Lock()
	_, err = p.stdin.Write(append(line, '\n'))
	p.writeMu.Unlock()
	if err != nil {
		// The pipe is closed: the process is gone or going, and the
		// reader fails the call (it may have read it before dying).
		<-p.exited
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case res := <-ch:
		return res
	case <-timer.C:
		return result{callAt: callAt, err: errNoAnswer}
	}
}

// signal sends sig; SIGSTOP and SIGCONT are remembered, so that a process
// killed while stopped is known to have done nothing since it stopped.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		return errExited
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = control.Now()
	case syscall.SIGCONT:
		p.paused = 0
	}
	return p.cmd.Process.Signal(sig)
}

// pausedAt is when the process was stopped, or 0 if it runs.
func (p *proc) pausedAt() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// close ends stdin, which makes a node shut down (without releasing its
// leases, after reporting how each ended), and waits up to grace for the
// exit before killing it.
func (p *proc) close(grace time.Duration) {
	p.signal(syscall.SIGCONT)
	p.writeMu.Lock()
	p.stdin.Close()
	p.writeMu.Unlock()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		p.kill()
	}
}
