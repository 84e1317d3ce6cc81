package quorum

import (
	"testing"
	"time"
)

// A release whose rounds hear no majority (voters too slow to answer, as
// on a loaded machine) is retried until the deadline its caller gave, not
// only for CleanupTimeout; without a deadline, CleanupTimeout bounds it.
func TestScenarioReleaseRetriesUntilItsDeadline(t *testing.T) {
	const silence = 1500 * time.Millisecond // over CleanupTimeout (20 round timeouts: 1s)
	for _, tc := range []struct {
		name     string
		deadline time.Duration // after the release starts; 0: none given
		want     Outcome
	}{
		{"no deadline", 0, NoQuorum},
		{"deadline past the silence", 3 * time.Second, Released},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, voters3, "p1")
			g := c.mustGrant("p1", "k")
			n := c.node("p1")
			c.cut["b"], c.cut["c"] = true, true
			var deadline time.Duration
			if tc.deadline != 0 {
				deadline = n.clock.Now() + tc.deadline
			}
			op, err := n.prop.Release("k", g.Epoch, deadline)
			if err != nil {
				t.Fatal(err)
			}
			c.advance(silence)
			c.cut["b"], c.cut["c"] = false, false
			res := c.waitResult("p1", op, 4*scRoundTimeout+time.Second)
			if res.Outcome != tc.want {
				t.Fatalf("release: %v, want %v", res.Outcome, tc.want)
			}
			if tc.want == Released {
				free := 0
				for _, r := range c.registers("k") {
					if !r.Value.Held {
						free++
					}
				}
				if free < 2 {
					t.Errorf("%d of 3 voters hold the key free after the release, want a majority", free)
				}
			}
		})
	}
}
