//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Attacks on the HTTP API (opt-in, as mesh/attack_*_test.go:
// LOCKMESH_ATTACKS=1): ten thousand long-polls held open by another
// process, ten thousand sessions each holding a lock, and clients that
// send their headers too slowly. Each checks that memory stays bounded,
// that the caps answer 429, and that other clients are served meanwhile.

func requireAttacks(t *testing.T) {
	t.Helper()
	if os.Getenv("LOCKMESH_ATTACKS") != "1" {
		t.Skip("attack tests are opt-in: set LOCKMESH_ATTACKS=1 to run them")
	}
}

// attackCount is how many long-polls or sessions an attack opens: 10,000,
// or LOCKMESH_ATTACK_N.
func attackCount() int {
	if n, err := strconv.Atoi(os.Getenv("LOCKMESH_ATTACK_N")); err == nil && n > 0 {
		return n
	}
	return 10000
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestAttackHTTPLongPolls: a process holds 10,000 long-polls of one key
// open (its own file descriptors: this one holds the other ends). The
// agent's memory grows by a bounded amount per long-poll, the 10,001st is
// refused with 429, a client taking a lock meanwhile is served at once,
// and a change of the key answers every long-poll.
func TestAttackHTTPLongPolls(t *testing.T) {
	requireAttacks(t)
	n := attackCount()
	if raceEnabled && n > 3000 {
		// The race detector allows 8,128 goroutines alive at once, and
		// the server runs one per connection.
		n = 3000
		t.Logf("under -race: %d long-polls", n)
	}
	m, cfg := startMesh(t)
	lim := defaultAPILimits()
	lim.MaxWaiters = n
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true, limits: &lim})
	idx := at.must(t, 200, "GET", "/v1/watch/attack/polled", nil, "").str("index")
	before, goBefore := heapInUse(), runtime.NumGoroutine()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), helperEnv+"=longpolls", "LOCKMESH_TEST_URL="+strings.TrimPrefix(at.url, "http://"),
		"LOCKMESH_TEST_PATH=/v1/watch/attack/polled?wait=5m&index="+idx, "LOCKMESH_TEST_N="+strconv.Itoa(n))
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		child.Process.Kill()
		child.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the long-poll process ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); l != fmt.Sprintf("opened %d", n) {
		t.Fatalf("the long-poll process said %q", l)
	}
	waitUntil(t, fmt.Sprintf("%d long-polls waiting", n), func() bool { return len(at.api.waiters) == n })
	after, goAfter := heapInUse(), runtime.NumGoroutine()
	perPoll := float64(int64(after)-int64(before)) / float64(n)
	t.Logf("%d long-polls: heap in use %.1f MiB → %.1f MiB (%.1f KiB each), goroutines %d → %d, watched keys %d",
		n, float64(before)/(1<<20), float64(after)/(1<<20), perPoll/1024, goBefore, goAfter, at.api.watches.watchCount())
	if perPoll > 64<<10 {
		t.Errorf("%.1f KiB of heap per long-poll, want at most 64", perPoll/1024)
	}
	if a := at.do(t, "GET", "/v1/watch/attack/polled?wait=5m&index="+idx, nil, ""); a.status != 429 || a.str("code") != "too_many" {
		t.Errorf("one long-poll past max_waiters: %d %s", a.status, a.raw)
	}
	start := time.Now()
	s := at.session(t, "30s", "")
	at.must(t, 201, "PUT", "/v1/locks/attack/other", map[string]any{"session": s}, "")
	at.must(t, 200, "DELETE", "/v1/locks/attack/other?session="+s, nil, "")
	t.Logf("a session, an acquire and a release beside them took %v", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a client beside the long-polls waited %v", d)
	}
	start = time.Now()
	at.must(t, 201, "PUT", "/v1/locks/attack/polled", map[string]any{"session": s}, "")
	if l := next(); l != fmt.Sprintf("answered %d", n) {
		t.Errorf("after the key changed, the long-poll process said %q", l)
	}
	t.Logf("every long-poll answered %v after the grant", time.Since(start).Round(time.Millisecond))
}

// runLongPolls is the child of TestAttackHTTPLongPolls: it opens
// LOCKMESH_TEST_N connections to LOCKMESH_TEST_URL, sends a long-poll on
// each, says "opened N", then reads every answer and says "answered N"
// when each has been answered 200.
func runLongPolls() int {
	addr, path := os.Getenv("LOCKMESH_TEST_URL"), os.Getenv("LOCKMESH_TEST_PATH")
	n, _ := strconv.Atoi(os.Getenv("LOCKMESH_TEST_N"))
	req := "GET " + path + " HTTP/1.1\r\nHost: agent\r\n\r\n"
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_, err = io.WriteString(c, req)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "longpolls: %v after %d\n", err, len(conns))
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Printf("opened %d\n", n)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && strings.HasPrefix(line, "HTTP/1.1 200") {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("answered %d\n", ok.Load())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestAttackHTTPSessions: 10,000 sessions, each holding one lock, on one
// agent: memory per session is bounded, the next session is refused with
// 429, and deleting them frees every lock.
func TestAttackHTTPSessions(t *testing.T) {
	requireAttacks(t)
	n := attackCount()
	m, cfg := startMesh(t)
	lim := defaultAPILimits()
	lim.MaxSessions = n
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true, limits: &lim})
	before := heapInUse()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				ids[i] = at.session(t, "5m", "")
				// With a wait: on a loaded machine (-race, 2 cores) a
				// round may time out, and a try-once then finds its own
				// grant being given back.
				a := at.do(t, "PUT", fmt.Sprintf("/v1/locks/attack/s/%d", i), map[string]any{"session": ids[i], "wait": "30s"}, "")
				if a.status != 201 {
					failed.Add(1)
					t.Logf("acquire %d: %d %s", i, a.status, a.raw)
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d acquires failed", f, n)
	}
	took := time.Since(start)
	with := heapInUse()
	if a := at.do(t, "POST", "/v1/sessions", nil, ""); a.status != 429 {
		t.Errorf("a session past max_sessions: %d %s", a.status, a.raw)
	}
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				at.must(t, 204, "DELETE", "/v1/sessions/"+ids[i], nil, "")
			}
		})
	}
	wg.Wait()
	if l := at.must(t, 200, "GET", "/v1/locks?prefix=attack/s/", nil, ""); len(l.body["locks"].([]any)) != 0 {
		t.Errorf("%d locks left after every session was deleted", len(l.body["locks"].([]any)))
	}
	// Measured against the heap once they are gone: what an earlier test
	// left to collect does not count.
	without := heapInUse()
	per := float64(int64(with)-int64(without)) / float64(n)
	t.Logf("%d sessions holding a lock each, taken in %v: heap in use %.1f MiB with them, %.1f MiB once deleted (%.2f KiB per session and its lease; %.1f MiB at the start)",
		n, took.Round(time.Millisecond), float64(with)/(1<<20), float64(without)/(1<<20), per/1024, float64(before)/(1<<20))
	if per > 16<<10 {
		t.Errorf("%.1f KiB per session, want at most 16", per/1024)
	}
}

// TestAttackHTTPSlowClients: connections that send half a request and
// stop are closed when the header timeout passes, and do not keep a
// client that behaves from being served.
func TestAttackHTTPSlowClients(t *testing.T) {
	requireAttacks(t)
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	addr := strings.TrimPrefix(at.url, "http://")
	var conns []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: agent\r\nX-Slow: ")
		conns = append(conns, c)
	}
	start := time.Now()
	at.must(t, 200, "GET", "/v1/health", nil, "")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a request beside 200 slow clients took %v", d)
	}
	closed := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			closed++
		}
		c.Close()
	}
	t.Logf("%d of %d slow connections closed by the agent within %v", closed, len(conns), time.Since(start).Round(time.Second))
	if closed != len(conns) || time.Since(start) > 20*time.Second {
		t.Errorf("%d of %d slow connections closed, after %v", closed, len(conns), time.Since(start))
	}
}
