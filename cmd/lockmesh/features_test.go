//go:build linux

package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLockSemaphore: lock -n 2 lets two commands hold KEY at once, through
// different agents, each on a slot of its own with its slot's key and
// token; a third waits (here: times out, its CMD never run), one that
// gives KEY another N is refused, and a slot freed goes to the next.
func TestLockSemaphore(t *testing.T) {
	ag := sharedCluster(t)
	hold := `echo "$LOCKMESH_KEY $LOCKMESH_TOKEN $LOCKMESH_SEMAPHORE"; read x; exit 0`
	a := start(t, "lock", "-socket", ag[0].socket, "-n", "2", "pool", "--", "sh", "-c", hold)
	b := start(t, "lock", "-socket", ag[1].socket, "-n", "2", "pool", "--", "sh", "-c", hold)
	slots := map[string]bool{}
	for _, p := range []*bg{a, b} {
		f := strings.Fields(p.line(t))
		if len(f) != 3 || !strings.HasPrefix(f[0], "pool#") || f[2] != "pool" || f[1] == "0" {
			t.Fatalf("CMD saw %q, want a slot of pool, its token, and pool", f)
		}
		slots[f[0]] = true
	}
	if len(slots) != 2 {
		t.Fatalf("two holders on one slot: %v", slots)
	}
	r := lockmesh(t, "lock", "-socket", ag[2].socket, "-n", "2", "-timeout", "500ms", "pool", "--", "echo", "ran")
	if r.code != exitTimeout || strings.Contains(r.stdout, "ran") {
		t.Fatalf("a third holder of a semaphore of 2: status %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = lockmesh(t, "lock", "-socket", ag[2].socket, "-n", "3", "-timeout", "5s", "pool", "--", "echo", "ran")
	if r.code != exitUsage || !strings.Contains(r.stderr, "used with 3 holders here and 2") || strings.Contains(r.stdout, "ran") {
		t.Fatalf("another N: status %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	a.stdin.Close()
	if code := a.wait(t); code != 0 {
		t.Fatalf("the first holder exited %d: %s", code, a.stderr)
	}
	r = lockmesh(t, "lock", "-socket", ag[2].socket, "-n", "2", "-timeout", "10s", "pool", "--", "echo", "ran")
	if r.code != 0 || r.stdout != "ran\n" {
		t.Fatalf("after a slot was freed: status %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	b.stdin.Close()
	b.wait(t)
}

// TestElect: elect prints the leader line once elected and holds the
// election until interrupted; elect -listen prints every leader in order,
// with growing tokens; a second candidate takes over when the first
// resigns; locks lists the election's lock.
func TestElect(t *testing.T) {
	ag := sharedCluster(t)
	listen := start(t, "elect", "-socket", ag[1].socket, "-listen", "sched")
	if l := listen.line(t); l != "sched: no leader" {
		t.Fatalf("the listener's first line %q", l)
	}
	one := start(t, "elect", "-socket", ag[0].socket, "sched", "10.0.0.1:80")
	line := one.line(t)
	t1 := leaderToken(t, line, "sched: 10.0.0.1:80 (node a, token ")
	if l := listen.line(t); l != line {
		t.Fatalf("the listener saw %q, the leader %q", l, line)
	}
	locks := lockmesh(t, "locks", "-socket", ag[2].socket, "sc")
	if f := strings.Fields(locks.stdout); locks.code != 0 || len(f) < 3 || f[0] != "sched" || f[1] != "a" || f[2] != fmt.Sprint(t1) {
		t.Fatalf("locks: status %d, %q, want sched held by a under token %d; stderr %s", locks.code, locks.stdout, t1, locks.stderr)
	}
	two := start(t, "elect", "-socket", ag[2].socket, "sched", "10.0.0.2:80")
	one.cmd.Process.Signal(syscall.SIGINT)
	if code := one.wait(t); code != 0 {
		t.Fatalf("the first leader, interrupted, exited %d: %s", code, one.stderr)
	}
	line = two.line(t)
	t2 := leaderToken(t, line, "sched: 10.0.0.2:80 (node c, token ")
	if t2 <= t1 {
		t.Fatalf("the second leader's token %d is not above the first's %d", t2, t1)
	}
	for {
		l := listen.line(t)
		if l == "sched: no leader" {
			continue // between the two (or coalesced away)
		}
		if l != line {
			t.Fatalf("the listener saw %q, want %q", l, line)
		}
		break
	}
	two.cmd.Process.Signal(syscall.SIGINT)
	two.wait(t)
	listen.cmd.Process.Signal(syscall.SIGINT)
	if code := listen.wait(t); code != 0 {
		t.Errorf("the listener, interrupted, exited %d: %s", code, listen.stderr)
	}
}

// leaderToken checks a leader line and returns its token.
func leaderToken(t *testing.T, line, prefix string) uint64 {
	t.Helper()
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok || !strings.HasSuffix(rest, ")") {
		t.Fatalf("leader line %q, want %q...", line, prefix)
	}
	tok, err := strconv.ParseUint(strings.TrimSuffix(rest, ")"), 10, 64)
	if err != nil || tok == 0 {
		t.Fatalf("leader line %q: token %v", line, err)
	}
	return tok
}
