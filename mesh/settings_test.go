package mesh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
)

func TestSettingsThatBreakExclusion(t *testing.T) {
	base := wire.Settings{Versions: wire.Range{Min: 1, Max: 2}, Drift: 0.01, TTL: time.Second, MaxTTL: 10 * time.Second}
	with := func(edit func(*wire.Settings)) wire.Settings {
		s := base
		edit(&s)
		return s
	}
	for _, tc := range []struct {
		name   string
		theirs wire.Settings
		timing bool
		want   []string // What of each mismatch
	}{
		{"the same", base, true, nil},
		{"another Drift", with(func(s *wire.Settings) { s.Drift = 0.001 }), true, []string{"Timing.Drift"}},
		{"a longer default TTL within our MaxTTL", with(func(s *wire.Settings) { s.TTL, s.MaxTTL = 10*time.Second, time.Minute }), true, nil},
		{"a default TTL over our MaxTTL", with(func(s *wire.Settings) { s.TTL, s.MaxTTL = 20*time.Second, time.Minute }), true, []string{"TTL"}},
		{"a MaxTTL under our default TTL", with(func(s *wire.Settings) { s.TTL, s.MaxTTL = 100*time.Millisecond, 500*time.Millisecond }), true, []string{"TTL"}},
		{"later versions that overlap", with(func(s *wire.Settings) { s.Versions = wire.Range{Min: 2, Max: 5} }), true, nil},
		{"versions that do not overlap", with(func(s *wire.Settings) { s.Versions = wire.Range{Min: 3, Max: 4} }), true, []string{"protocol version"}},
		{"everything", wire.Settings{Versions: wire.Range{Min: 3, Max: 3}, Drift: 0.05, TTL: time.Hour, MaxTTL: time.Hour}, true,
			[]string{"protocol version", "Timing.Drift", "TTL"}},
		{"a node of version 1, which says nothing else", wire.Settings{Versions: wire.Legacy}, false, nil},
	} {
		got := mismatches(base, tc.theirs, tc.timing)
		var what []string
		for _, m := range got {
			what = append(what, m.What)
			if m.Ours == "" || m.Theirs == "" || m.Ours == m.Theirs {
				t.Errorf("%s: %+v does not name both values", tc.name, m)
			}
		}
		if !slices.Equal(what, tc.want) {
			t.Errorf("%s: mismatches %v, want %v", tc.name, what, tc.want)
		}
		if back := mismatches(tc.theirs, base, tc.timing); len(back) != len(got) {
			t.Errorf("%s: the rule is not symmetric: %v and %v", tc.name, got, back)
		}
	}
}

// counter reads one of a node's counters.
func counter(m *Mesh, name string) uint64 {
	return m.stats.counters[metricSlot[counterKind][name]].Load()
}

// A node configured with another Drift than its peers is refused on every
// ballot connection, at both ends: as it dials (it refuses the voters'
// answers) and as they listen (they refuse its hellos), and as a voter
// dials it. Both sides count it, list it and log it, naming both values;
// it is granted nothing, and the voters go on granting among themselves.
func TestDriftMismatchIsRefusedBothWays(t *testing.T) {
	logs := &testLog{}
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1, tcp: true, tweak: func(cfg *Config) {
		cfg.Logger = logs.logger(cfg.Name)
		if cfg.Name == "node3" {
			cfg.Timing.Drift = 0.02
		}
	}})
	c.waitVoting()
	odd, voter := c.nodes[3], c.nodes[0]

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l, err := odd.TryAcquire(ctx, "k"); err == nil {
		l.Release(context.Background())
		t.Fatal("a node whose Drift differs from the voters' was granted a lease")
	}
	// The dialer's side (odd refuses the voters' answers) and the
	// listener's (the voters refuse odd's hello).
	want := func(m *Mesh, peer, ours, theirs string) {
		t.Helper()
		waitFor(t, 10*time.Second, string(m.name)+" listing "+peer, func() bool {
			return slices.ContainsFunc(m.SettingsMismatches(), func(s SettingsMismatch) bool {
				return s.Peer == peer && s.What == "Timing.Drift" && s.Ours == ours && s.Theirs == theirs && s.Via == "hello"
			})
		})
		if counter(m, "rpc.refused_settings") == 0 {
			t.Errorf("%s did not count rpc.refused_settings", m.name)
		}
	}
	want(odd, "node0", "0.02", "0.01")
	want(voter, "node3", "0.01", "0.02")
	// Status says so, and says what the odd node waits for.
	if st := odd.Status(); !slices.ContainsFunc(st.Waiting.Mismatches, func(mm Mismatch) bool {
		return mm.Peer == "node0" && mm.What == "Timing.Drift" && mm.Ours == "0.02" && mm.Theirs == "0.01"
	}) {
		t.Errorf("the odd node's Status lists mismatches %+v, want Timing.Drift with node0", st.Waiting.Mismatches)
	}
	logs.waitLine(t, "REFUSING A PEER", "node3", "Timing.Drift is 0.01 here and 0.02 at node3")
	logs.waitLine(t, "REFUSING A PEER", "node0", "Timing.Drift is 0.02 here and 0.01 at node0")

	// A voter dialing the odd node refuses its answer.
	rpc, _ := voter.book.rpcAddr("node3")
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if _, err := voter.identify(pctx, "node3", rpc); !errors.Is(err, errSettings) || !strings.Contains(err.Error(), "Timing.Drift is 0.01 here and 0.02 at node3") {
		t.Errorf("a voter dialing the odd node: %v, want a refusal naming both values", err)
	}

	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	l, err := c.nodes[1].Acquire(actx, "k")
	if err != nil {
		t.Fatalf("the voters no longer grant among themselves: %v", err)
	}
	l.Release(actx)
}

// A hello naming protocol versions that do not overlap this node's is
// refused, as is a malformed one; a version-1 hello is taken.
func TestHelloVersionsAreJudged(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1, tcp: true})
	m := c.nodes[0]
	later := m.settings()
	later.Versions = wire.Range{Min: wire.MaxVersion + 1, Max: wire.MaxVersion + 2}
	err := m.checkHello("future", 2, wire.EncodeSettings(later))
	want := fmt.Sprintf("protocol version is 1-%d here and %d-%d at future", wire.MaxVersion, wire.MaxVersion+1, wire.MaxVersion+2)
	if !errors.Is(err, errSettings) || !strings.Contains(err.Error(), want) {
		t.Errorf("a hello of later versions: %v, want %q", err, want)
	}
	if err := m.checkHello("garbled", 2, []byte{0x95, 1}); !errors.Is(err, errMalformed) {
		t.Errorf("a malformed hello payload: %v", err)
	}
	if err := m.checkHello("old", 1, nil); err != nil {
		t.Errorf("a version-1 hello: %v", err)
	}
	if err := m.checkHello("same", 2, wire.EncodeSettings(m.settings())); err != nil {
		t.Errorf("a hello of this node's own settings: %v", err)
	}
	got := m.SettingsMismatches()
	if len(got) != 1 || got[0].Peer != "future" || got[0].What != "protocol version" {
		t.Errorf("listed %+v", got)
	}
	// A later hello that agrees clears the refusal.
	if err := m.checkHello("future", 2, wire.EncodeSettings(m.settings())); err != nil || len(m.SettingsMismatches()) != 0 {
		t.Errorf("an agreeing hello: %v; still listed %+v", err, m.SettingsMismatches())
	}
}

// A node of protocol version 1 opens its ballot connections with the first
// hello and expects no answer: a node of version 2 answers its requests,
// and sends no hello back.
func TestVersion1HelloStillConnects(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 2, tcp: true})
	c.waitVoting()
	target := c.nodes[0]
	conn, err := net.Dial("tcp", target.Status().RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := encodeRequest(&quorum.Request{Config: target.current.Load().ID, From: "node1", To: "node0",
		Ops: []quorum.Op{{ID: 1, Kind: quorum.OpPeek, Key: "k"}}})
	if _, err := conn.Write(append(hello("node1"), frame(2, 7, req)...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	head := make([]byte, 13)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("no answer to a version-1 hello and request: %v", err)
	}
	if typ := head[4]; typ != 3 {
		t.Fatalf("the first frame back has type %d, want a reply (3)", typ)
	}
	body := make([]byte, int(head[0])<<24|int(head[1])<<16|int(head[2])<<8|int(head[3])-9)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	resp, err := target.lim.decodeResponse(body)
	if err != nil || len(resp.Results) != 1 || resp.From != "node0" {
		t.Fatalf("reply %+v, %v", resp, err)
	}
}

// Requests to a voter whose gossip metadata names no version (version 1)
// leave without OpUnwatch, which it would refuse with the whole request;
// to one of version 2 they keep it.
func TestUnwatchNotSentToVersion1(t *testing.T) {
	var m Mesh
	old := nodeMeta{wire.Meta{RPC: "127.0.0.1:1", Inc: 1}}
	cur := nodeMeta{wire.Meta{RPC: "127.0.0.1:2", Inc: 1}}
	cur.SetSettings(wire.Settings{Versions: wire.Supported, Drift: 0.01, TTL: time.Second, MaxTTL: time.Second})
	m.book.note(&memberlist.Node{Name: "old", Addr: net.IPv4(127, 0, 0, 1), Port: 1}, old, "alive")
	m.book.note(&memberlist.Node{Name: "cur", Addr: net.IPv4(127, 0, 0, 1), Port: 2}, cur, "alive")
	for _, tc := range []struct {
		node         string
		version      int
		helloVersion int
	}{{"old", 1, 1}, {"cur", wire.MaxVersion, 2}, {"unknown", 1, 1}} {
		if v := m.peerVersion(tc.node); v != tc.version {
			t.Errorf("peerVersion(%s) = %d, want %d", tc.node, v, tc.version)
		}
		if v := m.helloVersion(tc.node); v != tc.helloVersion {
			t.Errorf("helloVersion(%s) = %d, want %d", tc.node, v, tc.helloVersion)
		}
	}
	ops := []quorum.Op{{ID: 1, Kind: quorum.OpPrepare, Key: "a"}, {Kind: quorum.OpUnwatch, Key: "b"},
		{ID: 2, Kind: quorum.OpAccept, Key: "c"}, {Kind: quorum.OpUnwatch, Key: "d"}}
	got := withoutUnwatch(ops)
	if len(got) != 2 || got[0].Key != "a" || got[1].Key != "c" {
		t.Errorf("withoutUnwatch left %+v", got)
	}
}
