//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockmesh/lockmesh/mesh"
)

// TestInspect: status, voters list and holder as a user reads them, and
// the agent's HTTP endpoints.
func TestInspect(t *testing.T) {
	ag := sharedCluster(t)
	r := lockmesh(t, "status", "-socket", ag[0].socket)
	for _, want := range []string{"node:    a (ready)", "voting:  live", "voters:  a, b, c (version 1); live: a, b, c",
		"voters, as this node's probes find them:", "members, as gossip shows them:", "\n  a ", "\n  b ", "\n  c "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = lockmesh(t, "status", "-json", "-socket", ag[2].socket)
	var st mesh.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Name != "c" || st.VotingState != mesh.Live || !st.Ready || len(st.Voters) != 3 {
		t.Errorf("status -json: %v, %+v", err, st)
	}
	if strings.Contains(r.stdout, `"Voting"`) || len(st.VoterHealth) != 3 {
		t.Errorf("status -json: the deprecated Voting, or not every voter's health:\n%s", r.stdout)
	}

	r = lockmesh(t, "voters", "list", "-socket", ag[1].socket)
	lines := strings.Split(r.stdout, "\n")
	if r.code != 0 || len(lines) < 4 || strings.Join(lines[:3], ",") != "a,b,c" || !strings.HasPrefix(lines[3], "# version ") {
		t.Errorf("voters list: status %d:\n%s", r.code, r.stdout)
	}

	r = lockmesh(t, "holder", "-json", "-socket", ag[0].socket, "never-taken")
	var h mesh.Holder
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || h.Key != "never-taken" || h.Held || h.Token != 0 {
		t.Errorf("holder -json: %v, %+v", err, h)
	}
	if r := lockmesh(t, "holder", "-socket", ag[0].socket, ""); r.code != exitUsage {
		t.Errorf("holder of an empty key: status %d, want %d; stderr %s", r.code, exitUsage, r.stderr)
	}

	for path, want := range map[string]struct {
		code int
		body string
	}{
		"/healthz":        {200, "ok"},
		"/readyz":         {200, "ok"},
		"/readyz?verbose": {200, "[+]quorum ok"},
		"/status":         {200, `"VotingState": "live"`},
		"/metrics":        {200, `lockmesh_voting_state{node="a",state="live"} 1`},
		"/nosuch":         {404, "not found"},
	} {
		resp, err := http.Get("http://" + ag[0].http + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code || !strings.Contains(string(body), want.body) {
			t.Errorf("GET %s: %d %q, want %d and %q", path, resp.StatusCode, body, want.code, want.body)
		}
	}
}

// TestVoterChanges: voters add and remove through any agent, and the
// refusals.
func TestVoterChanges(t *testing.T) {
	ag := sharedCluster(t)
	d := extraAgent(t, "d")
	r := lockmesh(t, "voters", "add", d.name, "-socket", ag[0].socket)
	if r.code != 0 || !strings.Contains(r.stdout, "\n"+d.name+"\n") {
		t.Fatalf("voters add: status %d, %q; stderr %s", r.code, r.stdout, r.stderr)
	}
	r = lockmesh(t, "voters", "remove", d.name, "-socket", ag[1].socket)
	if r.code != 0 || strings.Contains(r.stdout, "\n"+d.name+"\n") || !strings.Contains(r.stdout, "# retired: ") {
		t.Fatalf("voters remove: status %d, %q; stderr %s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ args, says string }{
		{"add nosuch", "unknown node"},
		{"add " + d.name, "not allowed"}, // retired
	} {
		r := lockmesh(t, append([]string{"voters", "-socket", ag[0].socket}, strings.Fields(tc.args)...)...)
		if r.code != exitError || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("voters %s: status %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitError, tc.says)
		}
	}
}
