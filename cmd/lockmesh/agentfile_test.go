package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestAgentConfigPrecedence: a flag on the command line wins over the
// environment, which wins over the file, which wins over the default.
func TestAgentConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(path, []byte(`{
		"ttl": "7s", "max_ttl": "30s", "seeds": ["10.0.0.1:7946", "10.0.0.2:7946"],
		"bootstrap_expect": 3, "log_json": true, "api_addr": "127.0.0.1:8500",
		"limits": {"max_sessions": 5},
		"tokens": [{"name": "w", "secret": "0123456789abcdef", "rules": [{"prefix": "", "allow": ["read"]}]}]
	}`), 0o600)
	c := agentCommand()
	t.Setenv("LOCKMESH_MAX_TTL", "20s")
	t.Setenv("LOCKMESH_API_ADDR", "127.0.0.1:9000")
	t.Setenv("LOCKMESH_CONFIG", path)
	if _, err := c.parse([]string{"-api-addr", "127.0.0.1:9999"}); err != nil {
		t.Fatal(err)
	}
	file, err := applyConfigFile(c.fs, c.fs.Lookup("config").Value.String())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"api-addr":         "127.0.0.1:9999", // flag over environment and file
		"max-ttl":          "20s",            // environment over file
		"ttl":              "7s",             // file over default
		"seeds":            "10.0.0.1:7946,10.0.0.2:7946",
		"bootstrap-expect": "3",
		"log-json":         "true",
		"profile":          "auto", // default
	} {
		if got := c.fs.Lookup(name).Value.String(); got != want {
			t.Errorf("-%s = %q, want %q", name, got, want)
		}
	}
	if file.Limits == nil || file.Limits.MaxSessions != 5 || file.Limits.MaxWaiters != defaultAPILimits().MaxWaiters || len(file.Tokens) != 1 {
		t.Errorf("file: %+v", file)
	}
}

// TestAgentConfigFileErrors: a file the agent cannot use is an error that
// names the key.
func TestAgentConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"nmae": "a"}`, `"nmae": not a setting`},
		{`{"config": "other.json"}`, `"config": not a setting`},
		{`{"ttl": "soon"}`, `"ttl"`},
		{`{"limits": {"max_sessions": 0}}`, `max_sessions`},
		{`{"limits": {"max_sesions": 10}}`, `unknown field`},
		{`{"tokens": [{"name": "a", "secret": "0123456789abcdef", "rule": []}]}`, `unknown field "rule"`},
		{`[1, 2]`, `not a JSON object`},
	} {
		path := filepath.Join(t.TempDir(), "agent.json")
		os.WriteFile(path, []byte(tc.body), 0o600)
		_, err := applyConfigFile(agentCommand().fs, path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}

// TestAPIListenerRule: without tokens the TCP listener starts only on a
// loopback address, unless -api-open; with tokens, anywhere, and then
// every request there needs one.
func TestAPIListenerRule(t *testing.T) {
	tokens := agentFile{Tokens: []tokenConfig{{Name: "w", Secret: "0123456789abcdef"}}}
	for _, tc := range []struct {
		addr    string
		open    bool
		file    agentFile
		ok      bool
		tcpAnon bool
	}{
		{addr: "127.0.0.1:0", ok: true, tcpAnon: true},
		{addr: "[::1]:0", ok: true, tcpAnon: true},
		{addr: "0.0.0.0:8500"},
		{addr: ":8500"},
		{addr: "10.1.2.3:8500"},
		{addr: "0.0.0.0:8500", open: true, ok: true, tcpAnon: true},
		{addr: "0.0.0.0:8500", file: tokens, ok: true},
		{addr: "127.0.0.1:0", file: tokens, ok: true},
	} {
		f := defaultAgentFlags()
		f.socket, f.apiAddr, f.apiOpen, f.apiTLS = "/tmp/x.sock", tc.addr, tc.open, "auto"
		p, err := planAPI(f, tc.file, hclog.NewNullLogger())
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s open=%v tokens=%d: %v", tc.addr, tc.open, len(tc.file.Tokens), err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "-api-open")):
			t.Errorf("%s open=%v tokens=%d: %v, want a refusal naming -api-open", tc.addr, tc.open, len(tc.file.Tokens), err)
		case tc.ok && p.tcpAnon != tc.tcpAnon:
			t.Errorf("%s: anonymous requests allowed %v, want %v", tc.addr, p.tcpAnon, tc.tcpAnon)
		case tc.ok && p.socket != "/tmp/x-http.sock":
			t.Errorf("api socket %q", p.socket)
		}
	}
}
