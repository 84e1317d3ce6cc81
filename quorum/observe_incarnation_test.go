package quorum

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// An observer must tell a voter's later life from an earlier one by the
// rounds it answers, not by incarnation: an incarnation is the wall clock
// at start, and a clock set back across a restart makes a later life look
// older. n3 holds k0; n4 observes it, and is cut off from the voters from
// just before every voter and n3 crash at once (no disks: the voters'
// state is gone) until after n5 took k0, at ballots below those n4 saw it
// held under, and released it. The voters restart with their wall clocks
// an hour back. At the heal their answers hold k0 free at a lower ballot,
// under a lower incarnation than the lives n4 heard from: an observer
// that takes a lower incarnation for an earlier life takes those answers
// for late messages, and shows n3's lease held, and live, for good. One
// that orders lives by rounds (an answer to a round sent after it last
// heard from the earlier life comes from a later one) reports k0 free
// within a few round trips of the heal.
//
// With the fault observe-inc-order (the rule before) n4 still shows n3's
// lease at the end.
func TestObserverAfterMajorityLossWithClocksSetBack(t *testing.T) {
	const (
		holder, observer, taker = 3, 4, 5
		grantAt                 = 1200 * time.Millisecond // the voters' first quarantine is over
		crashAt                 = 3 * time.Second         // n3 renewed k0 five times
		healAt                  = 5500 * time.Millisecond
	)
	for _, bug := range []string{"", "observe-inc-order"} {
		t.Run("fault="+bug, func(t *testing.T) {
			cfg := faultFree(1, 3, 3, 1, 1)
			cfg.Disks = false
			cfg.Observe = 300 * time.Millisecond
			cfg.WallIncarnations = true
			cfg.Duration = 7 * time.Second
			cfg.Bug = bug
			var staged []string
			var before []uint64 // the voters' incarnations before the crash
			cfg.Script = func(s *sim) {
				h, tk := s.nodes[holder].clients[0], s.nodes[taker].clients[0]
				s.at(grantAt, func() {
					h.holdTime = 10 * time.Second // held to its crash
					h.acquire("k0", true, time.Second)
					s.flush(h.n)
				})
				s.at(crashAt-100*time.Millisecond, func() {
					for v := 0; v < 3; v++ {
						cutBoth(s, v, observer, true)
					}
				})
				s.at(crashAt, func() {
					for v := 0; v < 3; v++ {
						before = append(before, s.nodes[v].inc)
						s.crash(s.nodes[v])
					}
					s.crash(s.nodes[holder])
					s.wallBack += int64(time.Hour / time.Microsecond)
				})
				s.at(crashAt+50*time.Millisecond, func() {
					for v := 0; v < 3; v++ {
						s.start(s.nodes[v])
						if s.nodes[v].inc >= before[v] {
							staged = append(staged, fmt.Sprintf("n%d's new life is not below its last", v))
						}
					}
				})
				s.at(crashAt+1300*time.Millisecond, func() { // the voters' quarantine is over
					tk.holdTime = 300 * time.Millisecond
					tk.acquire("k0", true, time.Second)
					s.flush(tk.n)
				})
				s.at(healAt, func() {
					n := s.nodes[observer]
					log := s.check.obs[obsLife{n.idx, n.inc, "k0"}]
					if log == nil || len(log.states) == 0 || !log.states[len(log.states)-1].Value.Held {
						staged = append(staged, "the observer did not last see k0 held")
					}
					if g := s.check.grants["k0"]; len(g) != 2 || !g[1].closed {
						staged = append(staged, "n5 did not take k0 and release it")
					}
					for v := 0; v < 3; v++ {
						cutBoth(s, v, observer, false)
					}
				})
			}
			s := newSim(cfg)
			s.run()
			if len(s.fail) > 0 {
				t.Fatal(failureReport(s))
			}
			if len(staged) > 0 {
				t.Fatalf("the scenario is not the one wanted: %v", staged)
			}
			n := s.nodes[observer]
			log := s.check.obs[obsLife{n.idx, n.inc, "k0"}]
			last, lastAt := log.states[len(log.states)-1], log.at[len(log.at)-1]
			t.Logf("last state %v live=%v at ballot %v, reported at %v", last.Value, last.Live, last.Ballot, lastAt)
			held := last.Value.Held && last.Live
			switch {
			case bug != "" && !held:
				t.Fatalf("with %s the observer no longer shows n3's lease: the scenario no longer reaches the bug", bug)
			case bug == "" && held:
				t.Fatalf("n5 released k0 at %v; the observer still shows %v live", s.check.grants["k0"][1].end, last.Value)
			case bug == "" && lastAt > healAt+5*cfg.RoundTimeout:
				t.Fatalf("the observer reports k0 free only at %v (the heal at %v)", lastAt, healAt)
			}
		})
	}
}

// The rule itself, step by step, with a proposer fed by hand: voter a
// answers a registration as incarnation 100; a later life of a, with a
// lower incarnation (its clock set back) and a register lost (a lower
// ballot), answers. Its answer to the round that life 100 answered may as
// well be a late one of a life before 100: not taken, and a new round goes
// out. Its answer to that new round, sent after the observer heard from
// life 100, comes from a life up after 100: taken, and since its ballot
// is lower, a read is started to settle the key. With the fault
// observe-inc-order, the lower incarnation is taken for an earlier life
// and its answer dropped.
func TestObserverOrdersLivesByRounds(t *testing.T) {
	for _, fault := range []bool{false, true} {
		t.Run(fmt.Sprintf("fault=%v", fault), func(t *testing.T) {
			voters := []NodeID{"a", "b", "c"}
			m := NewMembership(ClusterID(voters), voters...)
			clock := &fakeClock{now: time.Hour, wall: testWallBase}
			p, err := NewProposer(ProposerConfig{ID: "p", Incarnation: 1, Membership: m, Clock: clock,
				Rand: rand.New(rand.NewSource(1)), RoundTimeout: 40 * time.Millisecond, Drift: 0.01})
			if err != nil {
				t.Fatal(err)
			}
			if fault {
				breakRules(p, observeIncOrder)
			}
			if _, err := p.Observe("k", time.Second); err != nil {
				t.Fatal(err)
			}
			high := Ballot{Counter: 9, Incarnation: 7, Node: "h"}
			grant := Value{Held: true, Holder: "h", HolderInc: 7, Epoch: 3, TTL: time.Second, Lease: high}
			low := Ballot{Counter: 2, Incarnation: 8, Node: "q"}
			answer := func(from NodeID, inc, rid uint64, b Ballot, v Value) {
				p.Step(&Response{Config: m.ID, From: from, Inc: inc, Status: StatusOK,
					Results: []Result{{ID: rid, OK: true, Accepted: b, Value: v, Remaining: 500 * time.Millisecond}}})
			}
			// sent is what went out since the last look: the registration
			// rounds' ids, and whether a read's peek went out.
			sent := func() (rounds []uint64, read bool) {
				for _, rq := range p.Ready().Requests {
					for _, op := range rq.Ops {
						switch {
						case op.Kind == OpPeek && op.Observe > 0 && !slices.Contains(rounds, op.ID):
							rounds = append(rounds, op.ID)
						case op.Kind == OpPeek && op.Observe == 0:
							read = true
						}
					}
				}
				return rounds, read
			}
			first, _ := sent()
			if len(first) != 1 {
				t.Fatalf("registration rounds sent: %v, want one", first)
			}
			for i, id := range voters {
				answer(id, uint64(100*(i+1)), first[0], high, grant)
			}
			if _, read := sent(); read {
				t.Fatal("a read began with the voters agreeing")
			}
			o := p.observations["k"]

			answer("a", 50, first[0], low, Value{Epoch: 4})
			second, read := sent()
			switch {
			case fault:
				// The rule before asks nothing: the answer is late.
				if r := o.reports["a"]; r.inc != 100 || len(second) != 0 || read {
					t.Fatalf("with the fault: a's report of life %d, rounds %v, read %v; want life 100's word kept, nothing sent", r.inc, second, read)
				}
				return
			case o.reports["a"].inc != 100 || read:
				t.Fatalf("an answer of another life to the round life 100 answered was taken (report of life %d, read %v)", o.reports["a"].inc, read)
			case len(second) != 1:
				t.Fatalf("no new registration round after an answer of unknown order: %v", second)
			}

			answer("a", 50, second[0], low, Value{Epoch: 4})
			if r := o.reports["a"]; r.inc != 50 || r.accepted != low {
				t.Fatalf("the answer of life 50 to a round sent after life 100 was heard was not taken: %+v", r)
			}
			if _, read := sent(); !read {
				t.Fatal("a later life answered under a lower ballot, and no read began")
			}
		})
	}
}
