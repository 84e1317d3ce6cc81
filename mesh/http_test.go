package mesh

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// get asks h for path and returns the status and body.
func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestHTTPHandler: the endpoints of a ready node, and of one shut down.
func TestHTTPHandler(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	for _, m := range c.nodes {
		waitReady(t, m, 30*time.Second)
	}
	waitFor(t, 10*time.Second, "node0 to know every voter live", func() bool { return len(c.nodes[0].Status().LiveVoters) == 3 })
	h := HTTPHandler(c.nodes[0])
	for _, tc := range []struct {
		method, path string
		code         int
		body         []string
	}{
		{"GET", "/healthz", 200, []string{"ok\n"}},
		{"GET", "/livez", 200, []string{"ok\n"}},
		{"GET", "/healthz?verbose", 200, []string{"[+]mesh ok\n", "healthz check passed\n"}},
		{"GET", "/readyz", 200, []string{"ok\n"}},
		{"HEAD", "/readyz", 200, nil},
		{"GET", "/readyz?verbose", 200, []string{"[+]configuration ok\n", "[+]vote ok\n",
			"[+]quorum ok (voters known live: node0, node1, node2)\n", "readyz check passed\n"}},
		{"GET", "/status", 200, []string{`"Ready": true`, `"VotingState": "live"`}},
		{"GET", "/nosuch", 404, []string{"not found"}},
		{"POST", "/readyz", 405, []string{"method not allowed"}},
	} {
		code, body := get(t, h, tc.method, tc.path)
		if code != tc.code {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, code, body, tc.code)
		}
		for _, want := range tc.body {
			if !strings.Contains(body, want) {
				t.Errorf("%s %s: %q lacks %q", tc.method, tc.path, body, want)
			}
		}
	}
	_, body := get(t, h, "GET", "/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Name != "node0" || !st.Ready || len(st.LiveVoters) != 3 {
		t.Errorf("/status: %v, %+v", err, st)
	}

	c.nodes[0].Shutdown()
	for path, want := range map[string]string{
		"/healthz": "unhealthy: shut down\n",
		"/readyz":  "not ready: not ready\n",
	} {
		if code, body := get(t, h, "GET", path); code != 503 || body != want {
			t.Errorf("%s after Shutdown: %d %q, want 503 %q", path, code, body, want)
		}
	}
}

// TestReadyChecks: what /readyz says in each state, in few words.
func TestReadyChecks(t *testing.T) {
	for _, tc := range []struct {
		st      Status
		code    int
		body    string
		verbose []string
	}{
		{Status{Waiting: Waiting{Configuration: true}}, 503, "not ready: no voter configuration yet\n",
			[]string{"[-]configuration failed: no voter configuration yet\n", "readyz check failed\n"}},
		{Status{VotingState: Quarantined, Voters: []string{"a", "b", "c"}, LiveVoters: []string{"b", "c"},
			Waiting: Waiting{Quarantine: 2500 * time.Millisecond}},
			503, "not ready: quarantined for 2.5s more\n",
			[]string{"[+]configuration ok\n", "[-]vote failed: quarantined for 2.5s more\n", "[+]quorum ok (voters known live: b, c)\n"}},
		{Status{VotingState: Live, Voters: []string{"a", "b", "c"}, LiveVoters: []string{"a"},
			Waiting: Waiting{Voters: []VoterWait{{"b", "no answer for 3s"}, {"c", "quarantined"}}}},
			503, "not ready: no majority of voters known live (live: a; not: b no answer for 3s, c quarantined)\n",
			[]string{"[+]vote ok\n", "[-]quorum failed: no majority"}},
		{Status{VotingState: Silenced, Waiting: Waiting{Silenced: true}}, 503,
			"not ready: silenced: an earlier process with this node's name still answers\n", nil},
		{Status{Ready: true, VotingState: NotVoter, LiveVoters: []string{"a", "b"},
			Waiting: Waiting{Mismatches: []Mismatch{{Peer: "x", What: "founding voters", Ours: "a,b,c", Theirs: "x,y,z"}}}},
			200, "ok\n",
			[]string{"[+]vote ok (not a voter)\n", "[+]mismatch x ok (founding voters: ours a,b,c, theirs x,y,z)\n", "readyz check passed\n"}},
	} {
		for _, verbose := range []bool{false, true} {
			rec := httptest.NewRecorder()
			writeChecks(rec, "readyz", readyChecks(tc.st), verbose)
			body := rec.Body.String()
			if rec.Code != tc.code {
				t.Errorf("%+v: %d, want %d", tc.st, rec.Code, tc.code)
			}
			if !verbose && body != tc.body {
				t.Errorf("%+v: %q, want %q", tc.st, body, tc.body)
			}
			if verbose {
				for _, want := range tc.verbose {
					if !strings.Contains(body, want) {
						t.Errorf("%+v, verbose: %q lacks %q", tc.st, body, want)
					}
				}
			}
		}
	}
}
