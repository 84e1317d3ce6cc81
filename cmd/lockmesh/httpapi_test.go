package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

// The HTTP API against a real one-voter mesh in this process, served by
// httptest on loopback.

// oneVoter is a mesh of one voter with the production lease timing (a
// 10 s TTL: tests must not lose leases to a loaded machine), started once
// for the tests of the HTTP API (a new voter waits out a quarantine of a
// TTL before it is ready). Each test uses keys of its own.
var oneVoter struct {
	once sync.Once
	m    *mesh.Mesh
	cfg  *mesh.Config
	err  error
}

func startMesh(t testing.TB) (*mesh.Mesh, *mesh.Config) {
	t.Helper()
	oneVoter.once.Do(func() {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name = "h1"
		cfg.Voters = []string{"h1"}
		cfg.Timing = lease.DefaultTiming()
		cfg.RoundTimeout = 250 * time.Millisecond
		m, err := mesh.New(cfg)
		if err != nil {
			oneVoter.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		oneVoter.m, oneVoter.cfg, oneVoter.err = m, cfg, m.WaitReady(ctx)
	})
	if oneVoter.err != nil {
		t.Fatal(oneVoter.err)
	}
	return oneVoter.m, oneVoter.cfg
}

// apiTest is an HTTP API served for a test.
type apiTest struct {
	api *httpAPI
	url string
	hc  *http.Client
}

type apiOpts struct {
	tokens    []tokenConfig
	limits    *apiLimits
	anonymous bool // requests without a token may do anything
}

func newAPITest(t testing.TB, m *mesh.Mesh, cfg *mesh.Config, o apiOpts) *apiTest {
	t.Helper()
	lim := defaultAPILimits()
	if o.limits != nil {
		lim = *o.limits
	}
	a, err := loadACL(o.tokens, hclog.NewNullLogger(), func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := newHTTPAPI(m, cfg, lim, a, nil)
	srv := httptest.NewUnstartedServer(api.handler(o.anonymous))
	srv.Config = api.server(o.anonymous)
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		api.close()
	})
	return &apiTest{api: api, url: srv.URL, hc: &http.Client{Timeout: time.Minute}}
}

// answer is a decoded JSON answer.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) str(k string) string {
	s, _ := a.body[k].(string)
	return s
}

func (a answer) num(k string) float64 {
	f, _ := a.body[k].(float64)
	return f
}

// do sends method path with body (JSON unless a string or nil) and token
// ("" for none).
func (at *apiTest) do(t testing.TB, method, path string, body any, token string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, _ := json.Marshal(b)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, at.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := at.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s %s: %d with Content-Type %q, want application/problem+json", method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return a
}

// must is do, failing the test unless the status is want.
func (at *apiTest) must(t testing.TB, want int, method, path string, body any, token string) answer {
	t.Helper()
	a := at.do(t, method, path, body, token)
	if a.status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.raw, want)
	}
	return a
}

func (at *apiTest) session(t testing.TB, ttl, token string) string {
	t.Helper()
	return at.must(t, 201, "POST", "/v1/sessions", map[string]any{"ttl": ttl}, token).str("id")
}

// TestHTTPLockLifecycle: a session takes a lock (try once), the grant
// carries the token, deadline and durations; another session is refused
// with the holder named; the value is set and read; the lock is listed,
// released, and free again.
func TestHTTPLockLifecycle(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	s1, s2 := at.session(t, "30s", ""), at.session(t, "30s", "")
	g := at.must(t, 201, "PUT", "/v1/locks/jobs/nightly", map[string]any{"session": s1, "value": "worker-1"}, "")
	if g.num("token") == 0 || g.str("key") != "jobs/nightly" || g.str("session") != s1 || g.str("value") != "worker-1" {
		t.Fatalf("grant %s", g.raw)
	}
	if g.num("valid_ms") <= 0 || g.num("valid_ms") > g.num("remaining_ms") || g.num("ttl_ms") != 10000 {
		t.Errorf("grant durations: %s", g.raw)
	}
	if _, err := time.Parse(time.RFC3339Nano, g.str("deadline")); err != nil {
		t.Errorf("deadline %q: %v", g.str("deadline"), err)
	}
	again := at.must(t, 200, "PUT", "/v1/locks/jobs/nightly", map[string]any{"session": s1}, "")
	if again.num("token") != g.num("token") {
		t.Errorf("asking again: token %v, want the grant's %v", again.num("token"), g.num("token"))
	}
	busy := at.must(t, 409, "PUT", "/v1/locks/jobs/nightly", map[string]any{"session": s2}, "")
	if busy.str("code") != "locked" || busy.str("holder") != "h1" || busy.num("token") != g.num("token") {
		t.Errorf("a second session: %s", busy.raw)
	}
	at.must(t, 200, "PATCH", "/v1/locks/jobs/nightly", map[string]any{"session": s1, "value": "worker-1b"}, "")
	h := at.must(t, 200, "GET", "/v1/locks/jobs/nightly", nil, "")
	if h.body["held"] != true || h.str("value") != "worker-1b" || h.num("token") != g.num("token") || h.str("index") == "" {
		t.Errorf("holder %s", h.raw)
	}
	list := at.must(t, 200, "GET", "/v1/locks?prefix=jobs/", nil, "")
	if locks, _ := list.body["locks"].([]any); len(locks) != 1 {
		t.Errorf("list %s", list.raw)
	}
	at.must(t, 409, "DELETE", "/v1/locks/jobs/nightly?session="+s2, nil, "")
	at.must(t, 200, "DELETE", "/v1/locks/jobs/nightly?session="+s1, nil, "")
	if h := at.must(t, 200, "GET", "/v1/locks/jobs/nightly", nil, ""); h.body["held"] != false {
		t.Errorf("after release: %s", h.raw)
	}
	g2 := at.must(t, 201, "PUT", "/v1/locks/jobs/nightly", map[string]any{"session": s2}, "")
	if g2.num("token") <= g.num("token") {
		t.Errorf("next token %v after %v", g2.num("token"), g.num("token"))
	}
}

// TestHTTPHungClientLosesLock: a client takes a lock under a session of 1
// s and then stops (no refresh, connection left open). Another client,
// waiting for the lock, gets it no later than the session's TTL plus a
// round trip after the hung client's last refresh was sent, and not
// before its TTL has passed.
func TestHTTPHungClientLosesLock(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	const ttl = time.Second
	hung := at.session(t, ttl.String(), "")
	at.must(t, 201, "PUT", "/v1/locks/hung", map[string]any{"session": hung}, "")
	lastSent := time.Now()
	at.must(t, 200, "POST", "/v1/sessions/"+hung+"/refresh", nil, "")
	waiter := at.session(t, "30s", "")
	g := at.must(t, 201, "PUT", "/v1/locks/hung", map[string]any{"session": waiter, "wait": "20s"}, "")
	took := time.Since(lastSent)
	const roundTrip = 750 * time.Millisecond // generous: a release round and the answer, under -race on 2 busy cores
	t.Logf("the waiter got the lock %v after the hung client's last refresh was sent (session TTL %v)", took.Round(time.Millisecond), ttl)
	if took < ttl || took > ttl+roundTrip {
		t.Errorf("granted %v after the last refresh, want between %v and %v", took, ttl, ttl+roundTrip)
	}
	if g.str("session") != waiter {
		t.Errorf("grant %s", g.raw)
	}
	p := at.must(t, 410, "POST", "/v1/sessions/"+hung+"/refresh", nil, "")
	if p.str("code") != "session_expired" {
		t.Errorf("refreshing the expired session: %s", p.raw)
	}
}

// TestHTTPRefreshKeepsLock: a session refreshed within its TTL keeps its
// lock for several TTLs while another waits.
func TestHTTPRefreshKeepsLock(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	s := at.session(t, "1s", "")
	g := at.must(t, 201, "PUT", "/v1/locks/kept", map[string]any{"session": s}, "")
	waiter := at.session(t, "30s", "")
	got := make(chan answer, 1)
	go func() { got <- at.do(t, "PUT", "/v1/locks/kept", map[string]any{"session": waiter, "wait": "3s"}, "") }()
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case a := <-got:
			if a.status != 409 || a.str("code") != "locked" {
				t.Fatalf("the waiter: %d %s, want 409 locked after its wait", a.status, a.raw)
			}
			r := at.must(t, 200, "POST", "/v1/sessions/"+s+"/refresh", nil, "")
			leases, _ := r.body["leases"].([]any)
			if len(leases) != 1 || leases[0].(map[string]any)["token"].(float64) != g.num("token") {
				t.Errorf("refresh after 3s: %s", r.raw)
			}
			return
		case <-tk.C:
			at.must(t, 200, "POST", "/v1/sessions/"+s+"/refresh", nil, "")
		}
	}
}

// TestHTTPStreamedSession: a session bound to its stream ends when the
// stream's connection closes, and its lock goes to the next at once;
// refreshing it afterwards says it ended.
func TestHTTPStreamedSession(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", at.url+"/v1/sessions", strings.NewReader(`{"ttl":"30s","stream":true}`))
	resp, err := at.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("no first line: %v", sc.Err())
	}
	var first struct {
		Event   string
		Session sessionJSON
	}
	if err := json.Unmarshal(sc.Bytes(), &first); err != nil || first.Event != "session" || !first.Session.Streamed {
		t.Fatalf("first line %s: %v", sc.Bytes(), err)
	}
	id := first.Session.ID
	at.must(t, 201, "PUT", "/v1/locks/streamed", map[string]any{"session": id}, "")
	waiter := at.session(t, "30s", "")
	got := make(chan time.Time, 1)
	go func() {
		at.must(t, 201, "PUT", "/v1/locks/streamed", map[string]any{"session": waiter, "wait": "20s"}, "")
		got <- time.Now()
	}()
	closed := time.Now()
	cancel()
	select {
	case at := <-got:
		t.Logf("granted %v after the stream closed", at.Sub(closed).Round(time.Millisecond))
		if at.Sub(closed) > 2*time.Second {
			t.Errorf("granted %v after the stream closed", at.Sub(closed))
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the waiter did not get the lock after the stream closed")
	}
	if p := at.do(t, "POST", "/v1/sessions/"+id+"/refresh", nil, ""); p.status != 410 {
		t.Errorf("refresh of the closed stream's session: %d %s", p.status, p.raw)
	}
}

// TestHTTPSessionDelete: deleting a session releases its leases before
// the answer.
func TestHTTPSessionDelete(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	s := at.session(t, "30s", "")
	at.must(t, 201, "PUT", "/v1/locks/a", map[string]any{"session": s}, "")
	at.must(t, 201, "PUT", "/v1/semaphores/pool-del", map[string]any{"session": s, "n": 2}, "")
	at.must(t, 204, "DELETE", "/v1/sessions/"+s, nil, "")
	if h := at.must(t, 200, "GET", "/v1/locks/a", nil, ""); h.body["held"] != false {
		t.Errorf("after the session's delete: %s", h.raw)
	}
	if l := at.must(t, 200, "GET", "/v1/locks?prefix=pool-del", nil, ""); len(l.body["locks"].([]any)) != 0 {
		t.Errorf("semaphore slots after the session's delete: %s", l.raw)
	}
	at.must(t, 410, "GET", "/v1/sessions/"+s, nil, "")
	at.must(t, 404, "GET", "/v1/sessions/0123", nil, "")
}

// TestHTTPWatch: a long-poll with the current index waits for the next
// state, and returns it with a new index; the streamed form sends the
// current state, then each new one.
func TestHTTPWatch(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	first := at.must(t, 200, "GET", "/v1/watch/w", nil, "")
	if first.body["held"] != false || first.str("index") == "" || first.header.Get("X-Lockmesh-Index") != first.str("index") {
		t.Fatalf("first state %s", first.raw)
	}
	unchanged := at.must(t, 200, "GET", "/v1/watch/w?index="+first.str("index")+"&wait=200ms", nil, "")
	if unchanged.str("index") != first.str("index") {
		t.Errorf("a wait that ended with no change: %s", unchanged.raw)
	}
	polled := make(chan answer, 1)
	go func() { polled <- at.do(t, "GET", "/v1/watch/w?index="+first.str("index")+"&wait=20s", nil, "") }()
	resp, err := at.hc.Get(at.url + "/v1/watch/w?stream=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	nextState := func() map[string]any {
		for lines.Scan() {
			var l struct {
				Event string
				State map[string]any
			}
			json.Unmarshal(lines.Bytes(), &l)
			if l.Event == "state" {
				return l.State
			}
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return nil
	}
	if st := nextState(); st["held"] != false {
		t.Errorf("stream's first state %v", st)
	}
	s := at.session(t, "30s", "")
	g := at.must(t, 201, "PUT", "/v1/locks/w", map[string]any{"session": s, "value": "v"}, "")
	p := <-polled
	if p.status != 200 || p.body["held"] != true || p.num("token") != g.num("token") || p.str("index") == first.str("index") {
		t.Errorf("long-poll after the grant: %d %s", p.status, p.raw)
	}
	if st := nextState(); st["held"] != true || st["token"] != g.num("token") || st["value"] != "v" {
		t.Errorf("stream after the grant: %v", st)
	}
}

// TestHTTPElection: campaign, leader, proclaim, observe, resign, and a
// second candidate that tries once while the first leads.
func TestHTTPElection(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	s1, s2 := at.session(t, "30s", ""), at.session(t, "30s", "")
	g := at.must(t, 201, "PUT", "/v1/elections/sched", map[string]any{"session": s1, "value": "host-a", "wait": "5s"}, "")
	if g.str("kind") != "election" || g.num("token") == 0 {
		t.Fatalf("campaign %s", g.raw)
	}
	at.must(t, 409, "PUT", "/v1/elections/sched", map[string]any{"session": s2, "value": "host-b"}, "")
	l := at.must(t, 200, "GET", "/v1/elections/sched", nil, "")
	if l.body["held"] != true || l.str("value") != "host-a" || l.str("name") != "sched" {
		t.Errorf("leader %s", l.raw)
	}
	obs := make(chan answer, 1)
	go func() { obs <- at.do(t, "GET", "/v1/observe/sched?wait=20s&index="+l.str("index"), nil, "") }()
	at.must(t, 200, "PATCH", "/v1/elections/sched", map[string]any{"session": s1, "value": "host-a2"}, "")
	if o := <-obs; o.status != 200 || o.str("value") != "host-a2" {
		t.Errorf("observe after proclaim: %d %s", o.status, o.raw)
	}
	at.must(t, 200, "DELETE", "/v1/elections/sched?session="+s1, nil, "")
	if l := at.must(t, 200, "GET", "/v1/elections/sched", nil, ""); l.body["held"] != false {
		t.Errorf("after resign: %s", l.raw)
	}
	at.must(t, 201, "PUT", "/v1/elections/sched", map[string]any{"session": s2, "value": "host-b"}, "")
}

// TestHTTPSemaphore: two sessions hold a semaphore of 2 on slots of their
// own; a third is refused; another size is a mismatch.
func TestHTTPSemaphore(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true})
	keys := map[string]bool{}
	for range 2 {
		g := at.must(t, 201, "PUT", "/v1/semaphores/pool", map[string]any{"session": at.session(t, "30s", ""), "n": 2}, "")
		keys[g.str("key")] = true
	}
	if len(keys) != 2 {
		t.Errorf("two holders, slots %v", keys)
	}
	third := at.do(t, "PUT", "/v1/semaphores/pool", map[string]any{"session": at.session(t, "30s", ""), "n": 2}, "")
	if third.status != 409 && third.status != 504 {
		t.Errorf("a third holder: %d %s", third.status, third.raw)
	}
	if mm := at.do(t, "PUT", "/v1/semaphores/pool", map[string]any{"session": at.session(t, "30s", ""), "n": 3}, ""); mm.str("code") != "semaphore_mismatch" {
		t.Errorf("another size: %d %s", mm.status, mm.raw)
	}
}

// TestHTTPBadInput: every malformed request is a problem with its code,
// and nothing else is disturbed.
func TestHTTPBadInput(t *testing.T) {
	m, cfg := startMesh(t)
	lim := defaultAPILimits()
	lim.MaxBodyBytes = 4096
	lim.MaxSessions = 3
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true, limits: &lim})
	s := at.session(t, "30s", "")
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"PUT", "/v1/locks/k", `{"session": `, 400, "bad_request"},
		{"PUT", "/v1/locks/k", `{"session": "` + s + `", "bogus": 1}`, 400, "bad_request"},
		{"PUT", "/v1/locks/k", `{"session": "` + s + `"} {}`, 400, "bad_request"},
		{"PUT", "/v1/locks/k", `{"session": "` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large"},
		{"PUT", "/v1/locks/k", `{"session": "` + s + `", "wait": "soon"}`, 400, "bad_request"},
		{"PUT", "/v1/locks/k", `{}`, 400, "bad_request"},
		{"PUT", "/v1/locks/k", `{"session": "nope"}`, 404, "session_not_found"},
		{"PUT", "/v1/locks/", `{"session": "` + s + `"}`, 400, "invalid_key"},
		{"PUT", "/v1/locks/k", `{"session": "` + s + `", "ttl": "1ms"}`, 400, "invalid_option"},
		{"POST", "/v1/sessions", `{"ttl": "1ms"}`, 400, "invalid_option"},
		{"PUT", "/v1/semaphores/p", `{"session": "` + s + `", "n": 0}`, 400, "invalid_option"},
		{"GET", "/v1/watch/k?wait=forever", nil, 400, "bad_request"},
		{"GET", "/v1/nothing", nil, 404, "not_found"},
		{"POST", "/v1/locks/k", `{}`, 405, "method_not_allowed"},
		{"DELETE", "/v1/locks/k?session=" + s, nil, 409, "not_held"},
	} {
		a := at.do(t, tc.method, tc.path, tc.body, "")
		if a.status != tc.status || a.str("code") != tc.code || a.str("detail") == "" || a.num("status") != float64(tc.status) {
			t.Errorf("%s %s %.40v: %d %s, want %d %s", tc.method, tc.path, tc.body, a.status, a.raw, tc.status, tc.code)
		}
	}
	req, _ := http.NewRequest("PUT", at.url+"/v1/locks/k", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/xml")
	if resp, err := at.hc.Do(req); err != nil || resp.StatusCode != 415 {
		t.Errorf("text/xml: %v %v", resp.StatusCode, err)
	}
	at.session(t, "30s", "")
	at.session(t, "30s", "")
	if a := at.do(t, "POST", "/v1/sessions", nil, ""); a.status != 429 || a.str("code") != "too_many" || a.header.Get("Retry-After") == "" {
		t.Errorf("a session past max_sessions: %d %s", a.status, a.raw)
	}
	at.must(t, 201, "PUT", "/v1/locks/k", map[string]any{"session": s}, "")
}

// TestHTTPWaitersCap: past max_waiters, a long-poll is refused with 429,
// and requests that do not wait still go through.
func TestHTTPWaitersCap(t *testing.T) {
	m, cfg := startMesh(t)
	lim := defaultAPILimits()
	lim.MaxWaiters = 4
	at := newAPITest(t, m, cfg, apiOpts{anonymous: true, limits: &lim})
	idx := at.must(t, 200, "GET", "/v1/watch/cap", nil, "").str("index")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 4 {
		req, _ := http.NewRequestWithContext(ctx, "GET", at.url+"/v1/watch/cap?wait=1m&index="+idx, nil)
		go func() {
			if resp, err := at.hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitUntil(t, "4 long-polls waiting", func() bool { return len(at.api.waiters) == 4 })
	if a := at.do(t, "GET", "/v1/watch/cap?wait=1m&index="+idx, nil, ""); a.status != 429 || a.str("code") != "too_many" {
		t.Errorf("a fifth long-poll: %d %s", a.status, a.raw)
	}
	s := at.session(t, "30s", "")
	at.must(t, 201, "PUT", "/v1/locks/cap2", map[string]any{"session": s}, "")
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"RPCAddr": "rpc_addr", "ConfigID": "config_id", "LiveVoters": "live_voters", "Name": "name", "DataDir": "data_dir", "TimeLeft": "time_left"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProblemShape: a problem as RFC 9457 writes it, with its code.
func TestProblemShape(t *testing.T) {
	p := newProblem("locked", "mesh: lock %q held by %s (token %d)", "jobs/a", "n2", 7)
	b, _ := json.Marshal(p)
	want := `{"type":"https://github.com/lockmesh/lockmesh/blob/main/docs/http-api.md#error-locked","title":"Held by another holder","status":409,"detail":"mesh: lock \"jobs/a\" held by n2 (token 7)","code":"locked"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// waitUntil waits until cond holds, checking every few milliseconds, for
// at most 20 seconds.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tk.C:
		case <-deadline:
			t.Fatalf("no %s within 20s", what)
		}
	}
}
