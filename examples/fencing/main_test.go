package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// childEnv makes the test binary run as a child of the demo.
const childEnv = "LOCKMESH_FENCING_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Args[1:], os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// TestFencingDemo runs the demo with the test binary as its three children,
// for a few seconds with three pauses. Each pause freezes a holder before
// its write until another process has taken the lock over and written; the
// resumed holder's write must then be refused. No update may be lost and no
// committed write may carry a lower token than an earlier one.
func TestFencingDemo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cfg := demoConfig{
		Duration: 3 * time.Second,
		Pauses:   3,
		Dir:      t.TempDir(),
		Out:      testWriter{t},
		Stderr:   &stderr,
		Command: func(args ...string) *exec.Cmd {
			cmd := exec.Command(self, args...)
			cmd.Env = append(os.Environ(), childEnv+"=1")
			return cmd
		},
	}
	res, err := runDemo(cfg)
	if err != nil {
		t.Fatalf("%v\nthe children's stderr:\n%s", err, stderr.String())
	}
	t.Log(res.summary())
	switch {
	case res.pauses != cfg.Pauses:
		t.Errorf("%d pauses done, want %d", res.pauses, cfg.Pauses)
	case res.stale < 1:
		t.Errorf("no stale write refused: the pauses did not exercise the fence")
	case res.increments == 0 || int64(res.increments) != res.audit.counter:
		t.Errorf("counter %d after %d increments committed", res.audit.counter, res.increments)
	}
}

// testWriter sends the demo's story to the test log, a line at a time.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// lockedBuffer collects the three children's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
