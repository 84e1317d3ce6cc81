package quorum

import (
	"fmt"
	"testing"
	"time"
)

// Review of 7ae21e0 (sweeps free a grant whose lease ran out at every
// voter). These tests attack the change from outside; they reuse audit
// 13's mesh (voters' clocks fast at the drift bound, lockers' slow).

// The sweep's report. OpResult.Swept says Released "once a majority
// accepted the free value, else NoQuorum and Unknown". n3 crashes holding
// k1; n0's sweep frees it, every voter accepts the free value and the key
// is forgotten everywhere (audit 13). The report of that sweep must say
// Released: finish marks the op done (phaseDone) before reportSwept looks
// at x.phase, so every report said NoQuorum and Unknown, whatever the
// voters accepted.
func TestReviewSweptReportsReleasedWhenEveryVoterAccepted(t *testing.T) {
	cfg := a13Config("")
	var (
		swept []OpResult
		kept  []NodeID
	)
	cfg.Script = func(s *sim) {
		n3 := s.nodes[3]
		s.at(1500*time.Millisecond, func() {
			c := n3.clients[0]
			c.holdTime = time.Minute
			c.acquire(a13Key, true, time.Second)
			s.flush(n3)
		})
		s.at(2*time.Second, func() { s.crash(n3) })
		s.onResult = func(n *simNode, res OpResult) {
			if res.Swept {
				swept = append(swept, res)
			}
		}
		s.at(6*time.Second, func() { kept = a13Kept(s) })
	}
	s := newSim(cfg)
	s.run()
	var got []string
	for _, r := range swept {
		got = append(got, fmt.Sprintf("%v unknown=%v epoch %d of %s", r.Outcome, r.Unknown, r.Epoch, r.Holder))
	}
	t.Logf("sweep reports: %v; kept at 6s by %v; freedExpired %d", got, kept, s.stats.FreedExpired)
	switch {
	case len(s.fail) > 0:
		t.Fatalf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case len(swept) == 0 || len(kept) > 0:
		t.Fatalf("the run does not reach its state: reports %v, kept by %v", got, kept)
	case swept[len(swept)-1].Outcome != Released || swept[len(swept)-1].Unknown:
		t.Fatalf("every voter accepted the free value and forgot the key, but the sweep reported %v", got)
	}
}
