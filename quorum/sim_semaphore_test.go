package quorum

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Semaphores in the simulator: with simConfig.Semaphore = N, the clients
// take slots of one counting semaphore (quorum.Semaphore) instead of keys:
// each tries every slot once without waiting, from a slot of its own
// choosing, and if all are held waits for the first it tried — the way
// package mesh takes one. On top of every per-key invariant (exclusion per
// slot is I1, tokens increasing per slot I2), the checker holds them to:
//
//	S1 at no moment do more than N clients hold slots of the semaphore;
//	S2 every slot an acquire finds held says it is of a semaphore of N.
//
// TestCheckerCatchesSemaphoreExtraSlot breaks the slot rule on purpose
// (one slot too many) and shows S1 catch it.

type semCheck struct {
	maxHeld int // the most holders seen at once
}

// semTry is a client's semaphore acquire in progress.
type semTry struct {
	sem    Semaphore
	start  int // the slot tried first, and waited for if all are held
	tried  int // slots tried so far
	budget time.Duration
	wait   bool // every slot tried: waiting for the first
}

// semaphore is the run's semaphore, as its clients see it.
func (s *sim) semaphore() Semaphore {
	return Semaphore{Name: "sem", N: s.cfg.Semaphore}
}

// semSlots is how many slots the run's clients use: N, or one too many when
// the run breaks the rule that a semaphore's slots record N (design.md R88).
func (s *sim) semSlots() int {
	if s.cfg.Bug == "semaphore-extra-slot" {
		return s.cfg.Semaphore + 1
	}
	return s.cfg.Semaphore
}

// actSemaphore starts taking a slot.
func (c *simClient) actSemaphore() {
	s := c.s
	sem := s.semaphore()
	budget := time.Second + time.Duration(s.rand.Int63n(int64(3*time.Second)))
	c.sem = &semTry{sem: sem, start: s.rand.Intn(s.semSlots()), budget: budget}
	c.semNext()
}

// semNext tries the next slot once, or, every slot tried, waits for the
// first.
func (c *simClient) semNext() {
	t := c.sem
	if t.tried < c.s.semSlots() {
		slot := (t.start + t.tried) % c.s.semSlots()
		t.tried++
		c.acquire(t.sem.Slot(slot), false, 0)
		return
	}
	t.wait = true
	if c.s.healed {
		t.budget = time.Hour // waits begun after the heal must be served (I9)
	}
	c.acquire(t.sem.Slot(t.start), true, t.budget)
}

// semContinue goes on to the next slot after an acquire that found one
// held, checking S2; false when the acquire is over.
func (c *simClient) semContinue(res OpResult) bool {
	t := c.sem
	if t == nil {
		return false
	}
	if res.Outcome == Locked && res.Data != "" {
		if n, ok := t.sem.Check(res.Data); !ok {
			c.s.failf("S2: %q held under a semaphore of %d, not %d", res.Key, n, t.sem.N)
		}
	}
	if res.Outcome != Locked || t.wait {
		c.sem = nil
		return false
	}
	c.semNext()
	return true
}

// semGranted checks S1 when a slot is granted.
func (k *simChecker) semGranted(g *grantRec) {
	s := k.s
	if s.cfg.Semaphore == 0 {
		return
	}
	held := 0
	var who []string
	for key, list := range k.grants {
		if !strings.HasPrefix(key, "sem#") {
			continue
		}
		for _, h := range list {
			if h.start <= g.start && h.end > g.start {
				held++
				who = append(who, fmt.Sprintf("%s token %d (c%d)", key, h.token, h.client.id))
			}
		}
	}
	k.sem.maxHeld = max(k.sem.maxHeld, held)
	if held > s.cfg.Semaphore {
		s.failf("S1: %d holders of a semaphore of %d at once: %s", held, s.cfg.Semaphore, strings.Join(who, ", "))
	}
}

// semaphoreConfig is a simulated run of clients taking slots of a
// semaphore of n through every fault of TestSimulation.
func semaphoreConfig(seed int64, voters, n int) simConfig {
	cfg := defaultSimConfig(seed, voters)
	cfg.Semaphore = n
	cfg.Updates = true
	cfg.Clients = 1 // one per node: N slots among 5 to 9 clients
	return cfg
}

// TestSimulationSemaphore runs seeded runs of clients on a semaphore of 2
// and 3 holders, checking S1 and S2 with every other invariant (per slot:
// exclusion, increasing tokens, linearizability).
func TestSimulationSemaphore(t *testing.T) {
	seeds := 40
	switch {
	case testing.Short():
		seeds = 8
	case raceEnabled:
		seeds = 4
	}
	t.Parallel()
	most, grants := 0, 0
	for seed := int64(1); seed <= int64(seeds); seed++ {
		for _, v := range []int{3, 5} {
			s := newSim(semaphoreConfig(seed, v, 2+int(seed%2)))
			s.run()
			most = max(most, s.check.sem.maxHeld)
			grants += s.stats.Grants
			if len(s.fail) > 0 {
				t.Fatal(failureReport(s))
			}
		}
	}
	if most < 2 {
		t.Fatalf("never more than %d holders at once: the runs do not reach the states S1 is about", most)
	}
	t.Logf("%d grants; at most %d holders at once", grants, most)
}

// One slot too many: a semaphore of N lets N+1 hold at once.
func TestCheckerCatchesSemaphoreExtraSlot(t *testing.T) {
	skipUnderRace(t)
	t.Parallel()
	for seed := int64(1); seed <= 20; seed++ {
		cfg := semaphoreConfig(seed, 3, 2)
		cfg.Bug = "semaphore-extra-slot"
		s := newSim(cfg)
		s.run()
		if len(s.fail) > 0 && strings.HasPrefix(violation(s.fail[0]), "S1") {
			t.Logf("caught at seed %d: %s", seed, firstLine(s.fail[0]))
			return
		}
	}
	t.Fatal("one slot too many never broke S1 in 20 seeds")
}
