package quorum

import (
	"testing"
	"time"
)

func TestProbeMut(t *testing.T) {
	try := func(name, bug string, tweak func(*simConfig)) {
		for seed := int64(1); seed <= 80; seed++ {
			for _, v := range []int{3, 5} {
				c := defaultSimConfig(seed, v)
				c.Bug = bug
				tweak(&c)
				s := newSim(c)
				s.run()
				if len(s.fail) > 0 {
					t.Logf("%s: caught at %d/%d: %s", name, seed, v, firstLine(s.fail[0])[:100])
					return
				}
			}
		}
		t.Logf("%s: not caught in 80", name)
	}
	try("lfo uniform20 drop15", "list-from-one", func(c *simConfig) {
		reconfigHeavy(c)
		c.Keys, c.Uniform, c.Drop = 20, true, 0.15
	})
	try("lfo drop25 crash200", "list-from-one", func(c *simConfig) {
		reconfigHeavy(c)
		c.Keys, c.Drop, c.CrashEvery = 4, 0.25, 200*time.Millisecond
	})
	try("lfo partitions only", "list-from-one", func(c *simConfig) {
		reconfigHeavy(c)
		c.Keys, c.Crashes, c.Drop = 4, false, 0.2
	})
}
