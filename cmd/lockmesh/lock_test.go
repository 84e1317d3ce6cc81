//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestLockRunsCommand: lock runs CMD with the key and token in its
// environment, exits with CMD's status, and releases the key.
func TestLockRunsCommand(t *testing.T) {
	ag := sharedCluster(t)
	r := lockmesh(t, "lock", "-socket", ag[0].socket, "-v", "jobs/run", "--",
		"sh", "-c", `echo "$LOCKMESH_KEY $LOCKMESH_TOKEN"; exit 7`)
	if r.code != 7 {
		t.Fatalf("exit status %d, want CMD's 7; stderr: %s", r.code, r.stderr)
	}
	key, token, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
	if key != "jobs/run" || token == "" || token == "0" {
		t.Fatalf("CMD saw LOCKMESH_KEY, LOCKMESH_TOKEN = %q, %q", key, token)
	}
	if !strings.Contains(r.stderr, "released (token "+token+")") {
		t.Errorf("-v did not report the release; stderr: %s", r.stderr)
	}
	h := lockmesh(t, "holder", "jobs/run", "-socket", ag[1].socket)
	if want := "jobs/run: free (last token " + token + ")\n"; h.code != 0 || h.stdout != want {
		t.Errorf("holder: status %d, %q; want 0, %q (stderr %s)", h.code, h.stdout, want, h.stderr)
	}
}

// TestLockExcludes: several lock processes on one key, through different
// agents, never run CMD at the same time, and each grant's token is higher
// than the one before.
func TestLockExcludes(t *testing.T) {
	ag := sharedCluster(t)
	file := filepath.Join(t.TempDir(), "intervals")
	script := fmt.Sprintf(`echo "start $LOCKMESH_TOKEN" >> %[1]s; sleep 0.05; echo "end $LOCKMESH_TOKEN" >> %[1]s`, file)
	const runs = 6
	var wg sync.WaitGroup
	codes := make([]result, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = lockmesh(t, "lock", "-socket", ag[i%len(ag)].socket, "-timeout", "45s", "excl", "--", "sh", "-c", script)
		}()
	}
	wg.Wait()
	for i, r := range codes {
		if r.code != 0 {
			t.Fatalf("run %d: status %d; stderr: %s", i, r.code, r.stderr)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*runs {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 2*runs, b)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if s[0] != "start" || e[0] != "end" || s[1] != e[1] {
			t.Fatalf("CMDs overlapped (want start T, end T pairs):\n%s", b)
		}
		tok, _ := strconv.ParseUint(s[1], 10, 64)
		if tok <= last {
			t.Fatalf("token %d after %d:\n%s", tok, last, b)
		}
		last = tok
	}
}

// TestLockKilledClientFreesKey: when the lock process dies, its agent
// releases the key at once (the lease is tied to the connection), the next
// waiter runs, and CMD dies with lock (Linux's parent-death signal).
func TestLockKilledClientFreesKey(t *testing.T) {
	ag := sharedCluster(t)
	a := start(t, "lock", "-socket", ag[0].socket, "killed", "--", "sh", "-c", `echo "$LOCKMESH_TOKEN"; exec sleep 600`)
	tokA, _ := strconv.ParseUint(a.line(t), 10, 64)
	b := start(t, "lock", "-socket", ag[1].socket, "-timeout", "45s", "killed", "--", "sh", "-c", `echo "$LOCKMESH_TOKEN"`)
	// b asks only after a holds: its grant must wait for a's end. (Whether
	// b's request has reached the voters before the kill does not matter.)
	a.cmd.Process.Kill()
	tokB, _ := strconv.ParseUint(b.line(t), 10, 64)
	if code := b.wait(t); code != 0 {
		t.Fatalf("the waiter exited %d; stderr: %s", code, b.stderr)
	}
	if tokB <= tokA {
		t.Errorf("the waiter's token %d is not above the killed holder's %d", tokB, tokA)
	}
	// a's stdout ends only when every process holding it has exited:
	// lock, and CMD (sleep), killed by the parent-death signal.
	a.wait(t)
}

// TestLockExitStatuses: the documented statuses for each way lock can
// fail.
func TestLockExitStatuses(t *testing.T) {
	ag := sharedCluster(t)
	sock := ag[0].socket
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A holder that keeps "held" until its stdin closes.
	h := start(t, "lock", "-socket", ag[1].socket, "held", "--", "sh", "-c", "echo holding; read x; exit 0")
	h.line(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no arguments", []string{"lock"}, exitUsage, "want KEY -- CMD"},
		{"no --", []string{"lock", "-socket", sock, "k", "true"}, exitUsage, "want KEY -- CMD"},
		{"flag after KEY", []string{"lock", "-socket", sock, "k", "-ttl", "1s", "--", "true"}, exitUsage, "flags go before KEY"},
		{"bad flag", []string{"lock", "-frobnicate", "k", "--", "true"}, exitUsage, "frobnicate"},
		{"-n 0", []string{"lock", "-socket", sock, "-n", "0", "k", "--", "true"}, exitUsage, "want 1 to"},
		{"TTL out of range", []string{"lock", "-socket", sock, "-ttl", "1h", "k", "--", "true"}, exitUsage, "TTL"},
		{"no agent", []string{"lock", "-socket", filepath.Join(t.TempDir(), "none.sock"), "k", "--", "true"}, exitUnavailable, "cannot reach the agent"},
		{"timeout", []string{"lock", "-socket", sock, "-timeout", "300ms", "held", "--", "echo", "ran"}, exitTimeout, "held by b"},
		{"not found", []string{"lock", "-socket", sock, "k", "--", "/no/such/command"}, exitNotFound, "no such file"},
		{"not executable", []string{"lock", "-socket", sock, "k", "--", notExec}, exitCannotRun, "permission denied"},
		{"unknown command", []string{"frobnicate"}, exitUsage, "unknown command"},
		{"elect without VALUE", []string{"elect", "-socket", sock, "leader"}, exitUsage, "want NAME VALUE"},
		{"elect timeout", []string{"elect", "-socket", sock, "-timeout", "300ms", "held", "me"}, exitTimeout, "held by b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := lockmesh(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("status %d, stderr %q; want %d and %q", r.code, r.stderr, tc.code, tc.says)
			}
			if strings.Contains(r.stdout, "ran") {
				t.Errorf("CMD ran: %q", r.stdout)
			}
		})
	}
	h.stdin.Close()
	if code := h.wait(t); code != 0 {
		t.Errorf("the holder exited %d; stderr: %s", code, h.stderr)
	}

	// A signal while waiting: 128 + its number, and CMD never runs.
	h = start(t, "lock", "-socket", ag[1].socket, "held", "--", "sh", "-c", "echo holding; read x; exit 0")
	h.line(t)
	w := start(t, "lock", "-socket", sock, "-v", "held", "--", "echo", "ran")
	w.stderr.waitFor(t, "asking agent")
	w.cmd.Process.Signal(syscall.SIGINT)
	if code := w.wait(t); code != exitSignal+int(syscall.SIGINT) {
		t.Errorf("interrupted waiter: status %d, want %d; stderr: %s", code, exitSignal+int(syscall.SIGINT), w.stderr)
	}
	h.stdin.Close()
	h.wait(t)
}
