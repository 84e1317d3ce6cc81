//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests build the lockmesh binary once, start agents as processes on
// loopback, and drive them with the binary as a user would.

var (
	build struct {
		once sync.Once
		dir  string
		path string
		err  error
	}
	shared struct {
		once   sync.Once
		dir    string
		agents []*agentProc
		err    error
	}
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h))
	}
	code := m.Run()
	for _, a := range shared.agents {
		a.stop()
	}
	for _, d := range []string{shared.dir, build.dir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// binary builds cmd/lockmesh (once per run) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "lockmesh-cmd-test-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "lockmesh")
		args := []string{"build", "-o", build.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, ".")
		start := time.Now()
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
		fmt.Fprintf(os.Stderr, "lockmesh_test: built the binary in %v\n", time.Since(start).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatalf("building lockmesh: %v", build.err)
	}
	return build.path
}

// testTTL is the agents' lease TTL: long enough that a loaded machine does
// not miss renewals, short enough that expiries do not slow the tests.
const testTTL = "2s"

// sharedCluster is three voters, a, b and c, started once for the tests
// that do not stop or pause them.
func sharedCluster(t *testing.T) []*agentProc {
	t.Helper()
	bin := binary(t)
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "lockmesh-cluster-")
		if shared.err != nil {
			return
		}
		var seed string
		for _, name := range []string{"a", "b", "c"} {
			// Data dirs: voter changes (TestVoterChanges) need them.
			args := []string{"-voters", "a,b,c", "-http", "127.0.0.1:0", "-data-dir", filepath.Join(shared.dir, name+".data")}
			if seed != "" {
				args = append(args, "-seeds", seed)
			}
			a, err := startAgent(bin, shared.dir, name, args...)
			if err != nil {
				shared.err = err
				return
			}
			shared.agents = append(shared.agents, a)
			seed = a.gossip
		}
		for _, a := range shared.agents {
			if err := a.waitReady(); err != nil {
				shared.err = err
				return
			}
		}
	})
	if shared.err != nil {
		t.Fatalf("starting the shared agents: %v", shared.err)
	}
	return shared.agents
}

// agentProc is a running lockmesh agent.
type agentProc struct {
	name, socket, gossip, http string
	cmd                        *exec.Cmd
	log                        string // its stderr
	lines                      chan string
	exited                     chan struct{}
}

// startAgent starts an agent on loopback with free ports and waits for its
// "started" line.
func startAgent(bin, dir, name string, args ...string) (*agentProc, error) {
	a := &agentProc{name: name, socket: filepath.Join(dir, name+".sock"), log: filepath.Join(dir, name+".log"),
		lines: make(chan string, 16), exited: make(chan struct{})}
	logf, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	argv := append([]string{"agent", "-name", name, "-bind", "127.0.0.1:0", "-socket", a.socket,
		"-ttl", testTTL, "-log-level", "info"}, args...)
	a.cmd = exec.Command(bin, argv...)
	a.cmd.Stderr = logf
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(a.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case a.lines <- sc.Text():
			default:
			}
		}
		a.cmd.Wait()
	}()
	line, err := a.next("started ")
	if err != nil {
		a.cmd.Process.Kill()
		return nil, err
	}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "gossip":
			a.gossip = v
		case "http":
			a.http = v
		}
	}
	return a, nil
}

// next waits for the agent's next stdout line, which must start with prefix.
func (a *agentProc) next(prefix string) (string, error) {
	select {
	case l := <-a.lines:
		if !strings.HasPrefix(l, prefix) {
			return "", fmt.Errorf("agent %s printed %q, want %q...; log in %s", a.name, l, prefix, a.log)
		}
		return l, nil
	case <-a.exited:
		return "", fmt.Errorf("agent %s exited; log:\n%s", a.name, readTail(a.log))
	case <-time.After(60 * time.Second):
		return "", fmt.Errorf("agent %s printed no %q line within 60s; log in %s", a.name, prefix, a.log)
	}
}

func (a *agentProc) waitReady() error {
	_, err := a.next("ready ")
	return err
}

// stop makes the agent leave (SIGTERM) and waits for it to exit.
func (a *agentProc) stop() {
	a.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
}

func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// result is how a run of the binary ended.
type result struct {
	stdout, stderr string
	code           int
}

// lockmesh runs the binary with args to its end (at most a minute). It may
// run on any goroutine: a failure to run is reported as status -1.
func lockmesh(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Errorf("lockmesh %q: %v", args, err)
		r.code = -1
	}
	if ctx.Err() != nil {
		t.Errorf("lockmesh %q did not end within a minute; stderr: %s", args, r.stderr)
		r.code = -1
	}
	return r
}

// bg is a lockmesh process run in the background, its stdout read line by
// line.
type bg struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	done   chan struct{} // closed once it exited and its stdout ended
	code   int
}

// start runs the binary with args in the background.
func start(t *testing.T, args ...string) *bg {
	t.Helper()
	p := &bg{cmd: exec.Command(binary(t), args...), lines: make(chan string, 64), stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// line waits for the next stdout line.
func (p *bg) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			t.Fatalf("%q ended (status %d) before printing a line; stderr: %s", p.cmd.Args, p.code, p.stderr)
		}
		return l
	case <-time.After(time.Minute):
		t.Fatalf("%q printed nothing within a minute; stderr: %s", p.cmd.Args, p.stderr)
	}
	return ""
}

// wait waits for the process to end (stdout closed too) and returns its
// exit status.
func (p *bg) wait(t *testing.T) int {
	t.Helper()
	for {
		select {
		case _, ok := <-p.lines:
			if !ok {
				<-p.done
				return p.code
			}
		case <-time.After(time.Minute):
			t.Fatalf("%q did not end within a minute; stderr: %s", p.cmd.Args, p.stderr)
		}
	}
}

// syncBuffer collects a process's stderr; waitFor waits for a string in it.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced at every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// waitFor waits until the buffer contains sub.
func (s *syncBuffer) waitFor(t *testing.T, sub string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), sub) {
			s.mu.Unlock()
			return
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q on stderr within a minute; stderr: %s", sub, s)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
