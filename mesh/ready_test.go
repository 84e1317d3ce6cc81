package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/transport"
)

// waitReady waits on m.Ready() for at most limit.
func waitReady(t *testing.T, m *Mesh, limit time.Duration) {
	t.Helper()
	select {
	case <-m.Ready():
	case <-time.After(limit):
		st := m.Status()
		t.Fatalf("%s not ready after %v: %s", m.Name(), limit, st.Waiting)
	}
}

// restartNode stops node i of c (leaving gracefully, as an agent does on
// SIGTERM, or crashing) and starts a new process under its name and
// gossip port, on c's network.
func (c *cluster) restartNode(i int, leave bool) *Mesh {
	c.t.Helper()
	return c.restartNodeWith(i, leave, nil)
}

// restartNodeWith is restartNode with tweak applied to the new process's
// configuration (nil: none).
func (c *cluster) restartNodeWith(i int, leave bool, tweak func(*Config)) *Mesh {
	c.t.Helper()
	old := c.nodes[i]
	cfg := old.cfg
	if tweak != nil {
		tweak(&cfg)
	}
	_, port, _ := net.SplitHostPort(old.Addr())
	cfg.BindPort, _ = strconv.Atoi(port)
	cfg.AdvertisePort = cfg.BindPort
	cfg.Seeds = nil
	for j, m := range c.nodes {
		if j != i && !m.isClosed() {
			cfg.Seeds = append(cfg.Seeds, m.Addr())
		}
	}
	cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
		return c.net.Listen(name, h)
	}
	if leave {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		old.Leave(ctx)
		cancel()
	} else {
		old.Shutdown()
	}
	m, err := New(&cfg)
	if err != nil {
		c.t.Fatalf("restarting %s: %v", old.Name(), err)
	}
	c.nodes[i] = m
	return m
}

// TestRestartedVoterReadiness: a restarted voter is not ready while it is
// quarantined, nor while it catches up (Status says from whom it waits),
// and becomes ready, its vote live, once both are over.
func TestRestartedVoterReadiness(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	for _, m := range c.nodes {
		waitReady(t, m, 30*time.Second)
	}
	if st := c.nodes[0].Status(); !st.Ready || st.VotingState != Live || len(st.LiveVoters) < 2 {
		t.Fatalf("a voter of a running mesh: ready %v, %v, live voters %v", st.Ready, st.VotingState, st.LiveVoters)
	}

	// node2 restarts unable to reach node1: it cannot finish its catch-up
	// (of 3 voters it needs both others).
	c.net.Cut("node2", "node1")
	c.net.Cut("node1", "node2")
	m := c.restartNode(2, false)
	ready := m.Ready()
	st := m.Status()
	if st.Ready || st.VotingState != Quarantined || st.Waiting.Quarantine <= 0 || st.Waiting.Quarantine > m.quarantine() {
		t.Fatalf("just restarted: ready %v, %v, quarantine left %v (of %v)", st.Ready, st.VotingState, st.Waiting.Quarantine, m.quarantine())
	}
	if !strings.Contains(st.Waiting.String(), "quarantined for") {
		t.Errorf("Waiting of a quarantined voter: %q", st.Waiting)
	}
	rec := httptest.NewRecorder()
	HTTPHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "not ready: quarantined for") {
		t.Errorf("/readyz while quarantined: %d %q", rec.Code, rec.Body)
	}

	waitFor(t, 20*time.Second, "the restarted voter to catch up from node0", func() bool {
		st := m.Status()
		return st.VotingState == CatchingUp && !slices.Contains(st.Waiting.CatchUp, "node0")
	})
	st = m.Status()
	if st.Ready || !slices.Contains(st.Waiting.CatchUp, "node1") || slices.Contains(st.Waiting.CatchUp, "node0") {
		t.Fatalf("catching up without node1: ready %v, waiting for %v", st.Ready, st.Waiting.CatchUp)
	}
	select {
	case <-ready:
		t.Fatal("Ready closed while catching up")
	default:
	}
	rec = httptest.NewRecorder()
	HTTPHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "[-]vote failed: catching up, waiting for node1") ||
		!strings.Contains(rec.Body.String(), "readyz check failed") {
		t.Errorf("/readyz?verbose while catching up: %d\n%s", rec.Code, rec.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	err := m.WaitReady(ctx)
	cancel()
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for node1") {
		t.Errorf("WaitReady while catching up: %v", err)
	}

	c.net.Heal()
	waitReady(t, m, 20*time.Second)
	if st := m.Status(); st.VotingState != Live || !st.Ready {
		t.Fatalf("ready, but %v (ready %v): %s", st.VotingState, st.Ready, st.Waiting)
	}
	rec = httptest.NewRecorder()
	HTTPHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("/readyz once ready: %d %q", rec.Code, rec.Body)
	}
}

// TestRollingRestartGatedOnReadiness: restarting the voters one at a time,
// each only once the one before is ready again (WaitReady), keeps a
// majority of them ready — and granting — at every step.
func TestRollingRestartGatedOnReadiness(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	client := c.nodes[3]
	for _, m := range c.nodes {
		waitReady(t, m, 30*time.Second)
	}
	var last uint64
	take := func(step string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := client.Acquire(ctx, "rolling")
		if err != nil {
			t.Fatalf("%s: the mesh does not grant: %v", step, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d after %d", step, l.Token(), last)
		}
		last = l.Token()
		l.Release(ctx)
	}
	majorityReady := func(step string) {
		t.Helper()
		var ready, not []string
		for _, m := range c.nodes[:3] {
			if m.isClosed() {
				not = append(not, m.Name()+" (stopped)")
				continue
			}
			if st := m.Status(); st.Ready {
				ready = append(ready, m.Name())
			} else {
				not = append(not, fmt.Sprintf("%s (%s)", m.Name(), st.Waiting))
			}
		}
		if len(ready) < 2 {
			t.Fatalf("%s: ready %v; not ready: %v", step, ready, not)
		}
		t.Logf("%s: ready %v", step, ready)
	}
	take("before")
	for i := range 3 {
		majorityReady(fmt.Sprintf("before restarting node%d", i))
		m := c.restartNode(i, i%2 == 0) // leave, crash, leave
		majorityReady(fmt.Sprintf("node%d restarted", i))
		take(fmt.Sprintf("node%d restarted", i))
		if st := m.Status(); st.Ready {
			t.Fatalf("node%d ready at once after a restart (%v)", i, st.VotingState)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.WaitReady(ctx)
		cancel()
		if err != nil {
			t.Fatalf("node%d: %v", i, err)
		}
		if st := m.Status(); st.VotingState != Live {
			t.Fatalf("node%d ready while %v", i, st.VotingState)
		}
		majorityReady(fmt.Sprintf("node%d ready again", i))
		take(fmt.Sprintf("node%d ready again", i))
	}
	// Every voter has restarted: those that never did are gone, and the
	// mesh still grants on the restarted ones alone.
	c.net.Partition([]string{"node0", "node1", "node3"}, []string{"node2"})
	take("on node0 and node1 alone")
	c.net.Heal()
}

// TestVotingStateText: the states' names, in JSON both ways.
func TestVotingStateText(t *testing.T) {
	for s, want := range map[VotingState]string{
		NotVoter: "not-voter", Quarantined: "quarantined", CatchingUp: "catching-up", Live: "live", Silenced: "silenced",
	} {
		b, err := json.Marshal(s)
		var back VotingState
		if err != nil || string(b) != `"`+want+`"` || json.Unmarshal(b, &back) != nil || back != s {
			t.Errorf("%v: %s, %v, back %v", s, b, err, back)
		}
	}
	var s VotingState
	if err := json.Unmarshal([]byte(`"dancing"`), &s); err == nil {
		t.Error("an unknown state was read")
	}
}

// TestStatusJSON: Status survives JSON (the agent's socket and /status),
// with the quarantine left as a readable duration.
func TestStatusJSON(t *testing.T) {
	st := Status{Name: "a", VotingState: Quarantined, Waiting: Waiting{
		Quarantine: 1500 * time.Millisecond, CatchUp: []string{"b"},
		Voters:     []VoterWait{{Name: "b", Why: "no answer yet"}},
		Mismatches: []Mismatch{{Peer: "x", What: "founding voters", Ours: "a,b,c", Theirs: "x,y", At: time.Unix(1, 0).UTC()}},
	}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"VotingState":"quarantined"`, `"Quarantine":"1.5s"`, `"Peer":"x"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.VotingState != Quarantined || back.Waiting.Quarantine != 1500*time.Millisecond ||
		!slices.Equal(back.Waiting.CatchUp, st.Waiting.CatchUp) || !slices.Equal(back.Waiting.Mismatches, st.Waiting.Mismatches) {
		t.Errorf("round trip: %+v", back.Waiting)
	}
}

// TestMismatchedVoterNotLive: a voter with a recorded mismatch (another
// configuration, or settings, once nodes exchange them) is not known live
// until the mismatch is cleared.
func TestMismatchedVoterNotLive(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	m := c.nodes[0]
	waitFor(t, 30*time.Second, "node0 to know every voter live", func() bool { return len(m.Status().LiveVoters) == 3 })
	m.noteMismatch(Mismatch{Peer: "node1", What: "Timing.Drift", Ours: "0.01", Theirs: "0.05"})
	m.noteMismatch(Mismatch{Peer: "node2", What: "Timing.Drift", Ours: "0.01", Theirs: "0.05"})
	st := m.Status()
	if st.Ready || len(st.LiveVoters) != 1 || !strings.Contains(st.Waiting.String(), "node1 (mismatch: Timing.Drift)") {
		t.Fatalf("ready %v with voters %v: %s", st.Ready, st.LiveVoters, st.Waiting)
	}
	m.clearMismatch("node1", "Timing.Drift")
	if st := m.Status(); !st.Ready || len(st.LiveVoters) != 2 || len(st.Waiting.Mismatches) != 1 {
		t.Fatalf("after clearing node1: ready %v, live %v, %s", st.Ready, st.LiveVoters, st.Waiting)
	}
}
