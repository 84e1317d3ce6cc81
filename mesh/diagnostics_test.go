package mesh

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Issue 13, item 3: what a node says when it is set up wrong, and the
// texts of its errors.

// startLogged starts a node of DefaultLocalConfig named name, logging to
// log; edit changes its config first.
func startLogged(t *testing.T, log *testLog, logger hclog.Logger, name string, edit func(*Config)) *Mesh {
	t.Helper()
	cfg := DefaultLocalConfig()
	cfg.Name = name
	cfg.Logger = logger
	if edit != nil {
		edit(cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// TestNameNotAmongVoters: a Name missing from Voters is allowed (a node to
// be added later) but said at startup, with the list and the consequence;
// one that differs from a voter only in case or spaces is refused.
func TestNameNotAmongVoters(t *testing.T) {
	cfg := DefaultLocalConfig()
	cfg.Name, cfg.Voters = "api-4", []string{"api-1", "api-2", "api-3"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a node outside the voters is allowed: %v", err)
	}
	w := cfg.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], `Name "api-4" is not among Voters ["api-1" "api-2" "api-3"]`) ||
		!strings.Contains(w[0], "not vote") {
		t.Errorf("Warnings: %q", w)
	}
	cfg.NoVote = true
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("Warnings of a node meant not to vote: %q", w)
	}
	cfg.Name, cfg.NoVote = "api-1", false
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("Warnings of a voter: %q", w)
	}
	for _, name := range []string{"API-1", "api-1 "} {
		cfg.Name = name
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `voter "api-1" differs from it only in case or spaces`) {
			t.Errorf("Name %q: %v", name, err)
		}
	}

	var log testLog
	startLogged(t, &log, log.logger("svc"), "api-4", func(c *Config) { c.Voters = []string{"api-1", "api-2", "api-3"} })
	line, ok := log.line("[WARN]", `this node's Name "api-4" is not among Voters`, "it will take locks but not vote")
	if !ok {
		t.Fatalf("no startup warning; log:\n%s", strings.Join(log.lines, "\n"))
	}
	t.Log(line)
}

// TestOtherMeshLogsBothVoterLists: two nodes founded on different voter
// lists log both lists (not configuration ids), and show the mismatch in
// Status.
func TestOtherMeshLogsBothVoterLists(t *testing.T) {
	var log testLog
	a := startLogged(t, &log, log.logger("a"), "a", func(c *Config) { c.Voters = []string{"a", "b", "c"} })
	startLogged(t, &log, log.logger("b"), "b", func(c *Config) {
		c.Voters = []string{"x", "b", "y"}
		c.Seeds = []string{a.Addr()}
	})
	defer func() {
		if t.Failed() {
			t.Log(strings.Join(log.lines, "\n"))
		}
	}()
	line := log.waitLine(t, "a.lockmesh:", "another voter configuration", "peer=b",
		`our_founding_voters=["a", "b", "c"]`, `their_founding_voters=["b", "x", "y"]`)
	t.Log(line)
	if strings.Contains(line, "theirs=") || strings.Contains(line, "ours=") {
		t.Errorf("the line still gives configuration ids: %s", line)
	}
	log.waitLine(t, "b.lockmesh:", "another voter configuration", "peer=a",
		`our_founding_voters=["b", "x", "y"]`, `their_founding_voters=["a", "b", "c"]`)
	want := Mismatch{Peer: "b", What: "founding voters", Ours: "a,b,c", Theirs: "b,x,y"}
	var got []Mismatch
	waitFor(t, 10*time.Second, "the mismatch in Status", func() bool {
		got = a.Status().Waiting.Mismatches
		return len(got) == 1 && got[0].Peer == want.Peer && got[0].What == want.What &&
			got[0].Ours == want.Ours && got[0].Theirs == want.Theirs
	})
	if s := a.Status().Waiting.String(); !strings.Contains(s, "founding voters differs from b's: ours a,b,c, theirs b,x,y") {
		t.Errorf("Waiting: %q", s)
	}
}

// TestAcquireHeldByThisNode: acquiring a key this node already holds
// returns at once, saying so, instead of waiting for its own lease.
func TestAcquireHeldByThisNode(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	for name, try := range map[string]func(context.Context, string, ...AcquireOption) (*Lease, error){
		"Acquire": c.nodes[0].Acquire, "TryAcquire": c.nodes[0].TryAcquire,
	} {
		_, err := try(ctx, "report")
		var locked *LockedError
		if !errors.Is(err, ErrAlreadyHeld) || !errors.Is(err, ErrLocked) || !errors.As(err, &locked) ||
			!locked.ThisNode || locked.Holder != "node0" || locked.Token != l.Token() {
			t.Fatalf("%s of a key this node holds: %v", name, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s waited for its context", name)
		}
		if !strings.Contains(err.Error(), "already held by this node (node0, token") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Another node is told who holds it, as always.
	_, err = c.nodes[1].TryAcquire(ctx, "report")
	if !errors.Is(err, ErrLocked) || errors.Is(err, ErrAlreadyHeld) {
		t.Errorf("another node's try: %v", err)
	}
	l.Release(ctx)
	l2, err := c.nodes[0].Acquire(ctx, "report")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	l2.Release(ctx)
}

// TestInvalidKeyErrors: a refused key's error says what is wrong in the
// caller's terms, quotes at most the key's start, and does not call the
// local check a malformed message.
func TestInvalidKeyErrors(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Repeat("k", 600)
	for key, want := range map[string]string{
		long:     `mesh: invalid key "` + strings.Repeat("k", keyQuote) + `"…: 600 bytes, longer than MaxKeyLength (512)`,
		"":       "mesh: invalid key: empty key",
		"\xff":   `mesh: invalid key "\xff": not UTF-8`,
		"\x00me": `mesh: invalid key "\x00me": keys starting with a zero byte are the mesh's own`,
	} {
		_, err := c.nodes[0].Acquire(ctx, key)
		if !errors.Is(err, ErrInvalidKey) || err.Error() != want {
			t.Errorf("Acquire(%.20q): %v, want %s", key, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "malformed") || len(err.Error()) > 120) {
			t.Errorf("Acquire(%.20q): %d bytes: %v", key, len(err.Error()), err)
		}
		if _, err := c.nodes[0].Holder(ctx, key); !errors.Is(err, ErrInvalidKey) || err.Error() != want {
			t.Errorf("Holder(%.20q): %v", key, err)
		}
	}
	// A long key of many-byte characters is cut on a character boundary.
	if q := quoteKey(strings.Repeat("é", 300)); q != `"`+strings.Repeat("é", keyQuote/2)+`"…` {
		t.Errorf("quoteKey cut a character: %s", q)
	}
}

// TestGossipLogLevels: memberlist's lines about routine peer failures
// (probes, gossip and push/pull with a peer that is down) are not errors;
// real errors stay errors.
func TestGossipLogLevels(t *testing.T) {
	var log testLog
	m := &Mesh{log: log.logger("svc")}
	out := m.log.Named("memberlist").StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	g := gossipLog{m: m, out: out}
	for _, tc := range []struct{ line, level string }{
		{"[ERR] memberlist: Failed fallback TCP ping: dial tcp 10.0.0.2:7946: connect: connection refused", "[DEBUG]"},
		{"[ERR] memberlist: Failed to send gossip to 10.0.0.2:7946: write udp: network is unreachable", "[DEBUG]"},
		{"[ERR] memberlist: Failed to send indirect UDP ping: write: network is unreachable", "[DEBUG]"},
		{"[ERR] memberlist: Push/Pull with node1 failed: dial tcp 10.0.0.2:7946: connect: connection refused", "[WARN]"},
		{"[ERR] memberlist: failed to receive: EOF from=10.0.0.2:43210", "[WARN]"},
		{"[ERR] memberlist: Failed to read remote state: EOF from=10.0.0.2:43210", "[WARN]"},
		{"[WARN] memberlist: Refuting a suspect message (from: node1)", "[INFO]"},
		{"[WARN] memberlist: Refuting a dead message (from: node2)", "[INFO]"},
		{"[WARN] memberlist: Refuting an alive message for 'node2' (127.0.0.1:7946) meta:([1] VS [2]), vsn:([1 5 2 0 0 0] VS [1 5 2 0 0 0])", "[INFO]"},
		{"[INFO] memberlist: Suspect node1 has failed, no acks received", "[INFO]"},
		{"[INFO] memberlist: Marking node1 as failed, suspect timeout reached (0 peer confirmations)", "[INFO]"},
		// Real errors stay errors.
		{"[ERR] memberlist: Failed to decode ping: bad data from=10.0.0.2:43210", "[ERROR]"},
		{"[ERR] memberlist: Conflicting address for node1. Mine: 10.0.0.2:7946 Theirs: 10.0.0.3:7946 Old state: 0", "[ERROR]"},
		{"[ERR] memberlist: Received invalid msgType (99) from=10.0.0.2:43210", "[ERROR]"},
	} {
		g.Write([]byte(tc.line + "\n"))
		text := tc.line[strings.Index(tc.line, "memberlist: ")+len("memberlist: "):]
		line, ok := log.line(text)
		if !ok || !strings.Contains(line, tc.level) || !strings.Contains(line, "svc.memberlist:") {
			t.Errorf("%q logged as %q, want %s", tc.line, line, tc.level)
		}
	}
}

// TestLoggerNotNamedTwice: a logger the application already named for
// lockmesh is used as it is; another gets "lockmesh" once.
func TestLoggerNotNamedTwice(t *testing.T) {
	var log testLog
	startLogged(t, &log, log.logger("svc.lockmesh"), "solo", func(c *Config) { c.Voters = []string{"solo"} })
	startLogged(t, &log, log.logger("app"), "other", nil)
	log.waitLine(t, "svc.lockmesh:", "node=solo")
	log.waitLine(t, "svc.lockmesh.memberlist:", "node=solo")
	log.waitLine(t, "app.lockmesh", "node=other")
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, line := range log.lines {
		if strings.Contains(line, "lockmesh.lockmesh") {
			t.Errorf("doubled name: %s", line)
		}
	}
}

// TestWaitBehindOwnLease: with WaitBehindOwnLease, a second holder on the
// same node waits for the first, as a process serving several clients
// needs.
func TestWaitBehindOwnLease(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := c.nodes[0].Acquire(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.nodes[0].Acquire(ctx, "shared", WaitBehindOwnLease())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		t.Fatalf("granted while this node holds the key: %v", l)
	case <-time.After(3 * c.nodes[0].cfg.roundTimeout()):
		// Still waiting after a few rounds (a check that it waits, not a
		// wait for an event).
	}
	first.Release(ctx)
	second := <-got
	if second == nil || second.Token() <= first.Token() {
		t.Fatalf("second holder %v after token %d", second, first.Token())
	}
	second.Release(ctx)
}

// TestLeasesHeldCountedByTheNode: the node keeps this node's leases with
// their Lease (no table of its own in the mesh): Status counts them, a
// release takes one out at once, and Shutdown ends the rest.
func TestLeasesHeldCountedByTheNode(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := c.nodes[0]
	a, err := m.Acquire(ctx, "count/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Acquire(ctx, "count/b")
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Status().Leases; n != 2 {
		t.Fatalf("Status().Leases = %d holding two", n)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := m.Status().Leases; n != 1 {
		t.Fatalf("Status().Leases = %d after releasing one of two", n)
	}
	// The released key is this node's to take again; the held one is not.
	if _, err := m.TryAcquire(ctx, "count/b"); !errors.Is(err, ErrAlreadyHeld) {
		t.Fatalf("TryAcquire of the key still held: %v", err)
	}
	a2, err := m.Acquire(ctx, "count/a")
	if err != nil {
		t.Fatalf("Acquire after the release: %v", err)
	}
	m.Shutdown()
	for _, l := range []*Lease{b, a2} {
		select {
		case <-l.Done():
		default:
			t.Fatalf("%s not ended by Shutdown", l.Key())
		}
		if !errors.Is(l.Err(), ErrClosed) {
			t.Errorf("%s: Err %v after Shutdown, want ErrClosed", l.Key(), l.Err())
		}
	}
	if n := m.Status().Leases; n != 0 {
		t.Errorf("Status().Leases = %d after Shutdown", n)
	}
}
