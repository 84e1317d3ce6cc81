package mesh

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Status.VoterHealth shows each voter as the probes find it: all live in a
// healthy mesh, this node marked Self; a voter that stops is reported by
// its next probe (ProbeError), then, once its last answer is too old to
// count, not live, with how long it has not answered. Gossip's view of it
// (Members) is not what it goes by.
func TestVoterHealth(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	m := c.nodes[0]
	waitFor(t, 10*time.Second, "every voter known live", func() bool { return len(m.Status().LiveVoters) == 3 })
	st := m.Status()
	if len(st.VoterHealth) != 3 {
		t.Fatalf("VoterHealth %+v", st.VoterHealth)
	}
	for _, v := range st.VoterHealth {
		if !v.Live || v.State != "live" || v.Why != "" || v.Self != (v.Name == "node0") || (v.Answered == 0) != v.Self {
			t.Errorf("healthy mesh: %+v", v)
		}
	}

	c.nodes[2].Shutdown()
	stopped := time.Now()
	health := func() VoterHealth {
		for _, v := range m.Status().VoterHealth {
			if v.Name == "node2" {
				return v
			}
		}
		t.Fatal("node2 missing from VoterHealth")
		return VoterHealth{}
	}
	waitFor(t, 5*time.Second, "a failed probe of node2", func() bool { return health().ProbeError != "" })
	t.Logf("probe failure seen %v after the stop: %+v", time.Since(stopped), health())
	waitFor(t, 10*time.Second, "node2 not live", func() bool { return !health().Live })
	h := health()
	if !strings.HasPrefix(h.Why, "no answer for ") || h.Answered < m.liveWindow() || h.State != "live" {
		t.Errorf("a stopped voter: %+v", h)
	}
	t.Logf("not live %v after the stop: %+v", time.Since(stopped), h)
	for _, mem := range m.Status().Members {
		if mem.Name == "node2" {
			t.Logf("gossip says node2 is %s", mem.State)
		}
	}
	b, err := json.Marshal(m.Status())
	if err != nil || strings.Contains(string(b), `"Voting"`) || !strings.Contains(string(b), `"VoterHealth"`) {
		t.Errorf("JSON: %v: %s", err, b)
	}
}
