package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	workerSecret = "worker-secret-0123456789"
	readerSecret = "reader-secret-0123456789"
	adminSecret  = "admin-secret-0123456789a"
)

func testTokens() []tokenConfig {
	return []tokenConfig{
		{Name: "worker", Secret: workerSecret, Rules: []ruleConfig{
			{Prefix: "jobs/", Allow: []string{"lock"}},
			{Prefix: "jobs/secret/", Allow: []string{}},
			{Prefix: "leaders/", Allow: []string{"elect"}},
		}},
		{Name: "reader", Secret: readerSecret, Rules: []ruleConfig{{Prefix: "", Allow: []string{"read"}}}},
		{Name: "root", Secret: adminSecret, Rules: []ruleConfig{{Prefix: "", Allow: []string{"admin"}}}},
	}
}

// TestHTTPAccessControl: on a listener that needs tokens, each token may
// do what its longest matching rule allows and nothing else: a denied
// request is a 403 with the reason, counted; no token or an unknown one
// is a 401; a session is its token's own.
func TestHTTPAccessControl(t *testing.T) {
	m, cfg := startMesh(t)
	at := newAPITest(t, m, cfg, apiOpts{tokens: testTokens()})
	if a := at.do(t, "POST", "/v1/sessions", nil, ""); a.status != 401 || a.str("code") != "unauthorized" || a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %s", a.status, a.raw)
	}
	if a := at.do(t, "POST", "/v1/sessions", nil, "not-a-token-at-all-000"); a.status != 401 {
		t.Errorf("an unknown token: %d %s", a.status, a.raw)
	}
	at.must(t, 200, "GET", "/v1/health", nil, "")
	at.must(t, 200, "GET", "/v1/openapi.json", nil, "")

	ws := at.session(t, "30s", workerSecret)
	at.must(t, 201, "PUT", "/v1/locks/jobs/a", map[string]any{"session": ws}, workerSecret)
	for _, tc := range []struct {
		method, path string
		body         any
		token, why   string
	}{
		{"PUT", "/v1/locks/other", map[string]any{"session": ws}, workerSecret, `token "worker" lacks "lock" on "other" (no rule's prefix matches it)`},
		{"PUT", "/v1/locks/jobs/secret/x", map[string]any{"session": ws}, workerSecret, `its rule for prefix "jobs/secret/" allows nothing`},
		{"GET", "/v1/locks/jobs/secret/x", nil, workerSecret, `lacks "read"`},
		{"PUT", "/v1/elections/jobs/x", map[string]any{"session": ws}, workerSecret, `lacks "elect" on "jobs/x"`},
		{"PUT", "/v1/locks/jobs/b", map[string]any{"session": ws}, readerSecret, `token "reader" lacks "lock"`},
		{"PUT", "/v1/voters/x", nil, workerSecret, `lacks "admin" on ""`},
		{"GET", "/v1/sessions", nil, readerSecret, `lacks "admin"`},
		{"POST", "/v1/sessions/" + ws + "/refresh", nil, readerSecret, `belongs to token "worker"`},
		{"DELETE", "/v1/sessions/" + ws, nil, readerSecret, `belongs to token "worker"`},
	} {
		a := at.do(t, tc.method, tc.path, tc.body, tc.token)
		if a.status != 403 || a.str("code") != "forbidden" || !strings.Contains(a.str("detail"), tc.why) {
			t.Errorf("%s %s: %d %s, want 403 saying %s", tc.method, tc.path, a.status, a.raw, tc.why)
		}
	}
	at.must(t, 200, "GET", "/v1/locks/jobs/a", nil, readerSecret)
	at.must(t, 200, "GET", "/v1/locks/jobs/a", nil, workerSecret)
	at.must(t, 200, "GET", "/v1/watch/jobs/a?wait=1ms", nil, workerSecret)
	at.must(t, 201, "PUT", "/v1/elections/leaders/x", map[string]any{"session": ws}, workerSecret)
	at.must(t, 200, "POST", "/v1/sessions/"+ws+"/refresh", nil, adminSecret)

	// Listing shows only what the token may read.
	rs := at.session(t, "30s", adminSecret)
	at.must(t, 201, "PUT", "/v1/locks/jobs/secret/y", map[string]any{"session": rs}, adminSecret)
	l := at.must(t, 200, "GET", "/v1/locks?prefix=jobs/", nil, workerSecret)
	if strings.Contains(l.raw, "jobs/secret/y") || !strings.Contains(l.raw, `"jobs/a"`) {
		t.Errorf("worker's listing: %s", l.raw)
	}
	if l := at.must(t, 200, "GET", "/v1/locks?prefix=jobs/", nil, readerSecret); !strings.Contains(l.raw, "jobs/secret/y") {
		t.Errorf("reader's listing: %s", l.raw)
	}
	denied := at.api.acl.deniedCounts()
	if denied["worker"] != 5 || denied["reader"] != 4 || denied["anonymous"] != 2 {
		t.Errorf("denied counts %v, want worker 5, reader 4, anonymous 2", denied)
	}
	st := at.must(t, 200, "GET", "/v1/status", nil, readerSecret)
	if !strings.Contains(st.raw, `"denied":{"anonymous":2,"reader":4,"worker":5}`) {
		t.Errorf("status does not count the refusals: %.300s", st.raw)
	}
}

// TestDeniedLoggedOnce: a refusal repeated is logged once, and counted
// every time.
func TestDeniedLoggedOnce(t *testing.T) {
	var logs strings.Builder
	a, err := loadACL(nil, hclog.New(&hclog.LoggerOptions{Output: &logs}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000_000, 0)
	for i := range 100 {
		a.deniedFor("worker", "lacks lock on x", now.Add(time.Duration(i)*time.Millisecond))
	}
	a.deniedFor("worker", "lacks lock on y", now)
	a.deniedFor("worker", "lacks lock on x", now.Add(deniedLogEvery))
	if n := strings.Count(logs.String(), "request denied"); n != 3 {
		t.Errorf("%d log lines, want 3 (x, y, x a minute later):\n%s", n, logs.String())
	}
	if c := a.deniedCounts()["worker"]; c != 102 {
		t.Errorf("counted %d, want 102", c)
	}
}

// TestLoadACL: what a token's configuration may not be.
func TestLoadACL(t *testing.T) {
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"W": "from-the-environment-123"}[k]
		return v, ok
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	os.WriteFile(file, []byte("from-a-file-0123456789\n"), 0o600)
	ok := []tokenConfig{
		{Name: "a", SecretEnv: "W", Rules: []ruleConfig{{Prefix: "x/", Allow: []string{"read"}}}},
		{Name: "b", SecretFile: file},
	}
	a, err := loadACL(ok, hclog.NewNullLogger(), env, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if a.authenticate("from-a-file-0123456789") == nil || a.authenticate("from-the-environment-123").name != "a" || a.authenticate("from-a-file") != nil {
		t.Error("secrets from a file and the environment")
	}
	for _, tc := range []struct {
		tok  tokenConfig
		want string
	}{
		{tokenConfig{Name: "x", Secret: "short"}, "at least 16"},
		{tokenConfig{Name: "x"}, "exactly one of"},
		{tokenConfig{Name: "x", Secret: "long-enough-secret-1", SecretEnv: "W"}, "exactly one of"},
		{tokenConfig{Name: "x", SecretEnv: "NOPE"}, "NOPE is not set"},
		{tokenConfig{Name: "", Secret: "long-enough-secret-1"}, "name"},
		{tokenConfig{Name: "x", Secret: "long-enough-secret-1", Rules: []ruleConfig{{Prefix: "a", Allow: []string{"write"}}}}, `unknown permission "write"`},
		{tokenConfig{Name: "a", Secret: "long-enough-secret-1"}, "named twice"},
		{tokenConfig{Name: "x", Secret: "from-the-environment-123"}, "same secret"},
	} {
		_, err := loadACL(append(ok[:1:1], tc.tok), hclog.NewNullLogger(), env, os.ReadFile)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.tok, err, tc.want)
		}
	}
}
