package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// status's text for a node whose voter c stopped answering a moment ago:
// gossip still shows c alive, the probes do not, and the text says which
// is which, what the node waits for, and who is live.
func TestPrintStatus(t *testing.T) {
	st := mesh.Status{
		Name: "a", Addr: "10.0.0.1:7946", RPCAddr: "10.0.0.1:7947",
		Voters: []string{"a", "b", "c"}, Config: mesh.Configuration{Voters: []string{"a", "b", "c"}, Version: 1},
		VotingState: mesh.Live, LiveVoters: []string{"a"},
		VoterHealth: []mesh.VoterHealth{
			{Name: "a", Self: true, Live: true, State: "live"},
			{Name: "b", State: "catching-up", Answered: 150 * time.Millisecond, Why: "catching-up"},
			{Name: "c", State: "live", Answered: 3500 * time.Millisecond, Why: "no answer for 3.5s", ProbeError: "dial tcp 10.0.0.3:7947: connect: connection refused"},
		},
		Waiting: mesh.Waiting{Voters: []mesh.VoterWait{{Name: "b", Why: "catching-up"}, {Name: "c", Why: "no answer for 3.5s"}}},
		Members: []mesh.Member{
			{Name: "a", State: "alive", Voter: true}, {Name: "b", State: "alive", Voter: true}, {Name: "c", State: "alive", Voter: true},
		},
	}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"node:    a (not ready)\n",
		"waiting: no majority of voters known live: b (catching-up), c (no answer for 3.5s)\n",
		"voters:  a, b, c (version 1); live: a\n",
		"voters, as this node's probes find them:\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q", want)
		}
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]+" "+strings.Join(f[1:2], "")] += l + "\n"
		}
	}
	for name, want := range map[string][]string{
		"a yes":   {"live", "-", "this node"},
		"b no":    {"catching-up", "150ms ago"},
		"c no":    {"live", "3.5s ago", "no answer for 3.5s", "last probe failed: dial tcp"},
		"c alive": {"yes"}, // gossip's view, in the members table
	} {
		for _, w := range want {
			if !strings.Contains(lines[name], w) {
				t.Errorf("line %q lacks %q: %q", name, w, lines[name])
			}
		}
	}
}
