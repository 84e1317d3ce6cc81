package quorum

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// Audit 13: registers are finite (DESIGN §3.2a), issue 11 finding 6. A
// voter drops only a free register, and a sweep writes a key back only if
// the value at its highest ballot is free. So a grant whose lease ran out
// without a release (its holder crashed, was shut down, or lost the lease
// and never freed it) stays in every voter's register until someone
// acquires the key again: under per-entity locking (invoice/<id>, each
// locked once) every key a crashed node held is kept for good.
//
// Fixed: a sweep that finds a grant at the highest ballot, with every
// voter answering and none timing a lease of the key, frees it as a
// takeover would (epoch kept), then forgets it (Proposer.mayFreeExpired).
// Fault keep-expired-grants brings the old rule back; fault
// free-live-grants frees a grant whatever the voters' timers say, and the
// checkers catch it (I1).

const sweptKey = "k1" // n0's to sweep (bucket 0 of 3)

// sweepWatch hooks the voters' answers on sweptKey: every write of a free
// value over the grant by another node than its holder, and every forget,
// is checked against the voters' timers at that moment; and the peeks,
// prepares, accepts and forgets of the key answered are counted (the cost).
type sweepWatch struct {
	holder  NodeID
	grant   Value         // the grant, once written
	end     time.Duration // real time: the holder's latest deadline, once known
	freedAt time.Duration // when a voter first accepted a free value over the grant
	early   []string      // frees and forgets while a voter timed the grant, or before its deadline
	ops     map[OpKind]int
}

func (w *sweepWatch) hook(s *sim, holder NodeID) {
	w.holder, w.ops = holder, make(map[OpKind]int)
	for _, v := range s.nodes[:3] {
		prev := v.node.answered
		v.node.answered = func(req *Request, resp *Response) {
			for i, op := range req.Ops {
				if op.Key != sweptKey || i >= len(resp.Results) {
					continue
				}
				if op.Kind == OpAccept && op.Value.Held && op.Ballot.Node == holder {
					w.grant = op.Value
				}
				if req.From == holder {
					continue
				}
				if sweeper := s.lookup(req.From); sweeper != nil && sweeper.idx < 3 {
					w.ops[op.Kind]++ // a voter's sweep
				}
				freeing := op.Kind == OpAccept && !op.Value.Held && w.grant.Held && op.Value.Epoch == w.grant.Epoch
				if !resp.Results[i].OK || !(freeing || op.Kind == OpForget) {
					continue
				}
				if freeing && w.freedAt == 0 {
					w.freedAt = s.now
				}
				if w.end > 0 && s.now < w.end {
					w.early = append(w.early, fmt.Sprintf("%v: %s's %v at %s before the holder's deadline %v", s.now, req.From, op.Kind, v.id, w.end))
				}
				for _, u := range s.nodes[:3] {
					if r := acceptorOf(u); r != nil {
						if reg := r.regs[sweptKey]; reg != nil && reg.value.sameGrant(w.grant) && reg.remaining(u.clock.Now()) > 0 {
							w.early = append(w.early, fmt.Sprintf("%v: %s's %v at %s while %s times the grant (%v left)",
								s.now, req.From, op.Kind, v.id, u.id, reg.remaining(u.clock.Now())))
						}
					}
				}
			}
			prev(req, resp)
		}
	}
}

// holderDeadline is the holder's latest deadline (real time) of the grant of
// sweptKey it holds now.
// holdSweptKey has n's first client take the test's key at 1.5s and hold it
// for a minute.
func holdSweptKey(s *sim, n *simNode) {
	s.at(1500*time.Millisecond, func() {
		c := n.clients[0]
		c.holdTime = time.Minute
		c.acquire(sweptKey, true, time.Second)
		s.flush(n)
	})
}

func holderDeadline(s *sim) (time.Duration, uint64) {
	gs := s.check.grants[sweptKey]
	if len(gs) == 0 {
		return 0, 0
	}
	g := gs[len(gs)-1]
	return g.end, g.token
}

// keepingSweptKey are the voters that keep a register of sweptKey.
func keepingSweptKey(s *sim) []NodeID {
	var kept []NodeID
	for _, v := range s.nodes[:3] {
		if a := acceptorOf(v); a != nil && a.regs[sweptKey] != nil {
			kept = append(kept, v.id)
		}
	}
	return kept
}

// sweepConfig is the runs' mesh: voters n0..n2 with clocks fast at the
// drift bound (their timers end soonest), lockers n3 and n4 slow (the
// holder's deadline ends latest), one client each, registers idle after
// 300ms.
func sweepConfig(bug string) simConfig {
	cfg := faultFree(1, 3, 2, 1, 3)
	cfg.Bug = bug
	cfg.Clocks = "adversarial"
	cfg.RegisterIdle = 300 * time.Millisecond
	cfg.Duration = 8 * time.Second
	return cfg
}

// The holder crashes. n3 takes k1 at 1.5s and crashes at 2s holding it,
// never to come back; nobody touches k1 until n4 acquires it at 7s.
// Fixed: once the lease has run out at every voter, n0's sweep frees the
// grant and forgets it: no voter keeps k1 from about 3s, no free came
// while a voter timed the grant or before the holder's deadline, and n4's
// grant at 7s has a token above the dead holder's. Each run logs what the
// sweeps sent about k1 until it was gone (the cost). Fault
// keep-expired-grants: every voter keeps the grant until n4 takes it, and
// no sweep so much as peeks at it.
func TestSweepFreesAGrantWhoseHolderCrashed(t *testing.T) {
	for _, bug := range []string{"", "keep-expired-grants"} {
		t.Run("bug="+bug, func(t *testing.T) { runHolderCrashed(t, bug) })
	}
}

func runHolderCrashed(t *testing.T, bug string) {
	if bucketOf(sweptKey, 3) != 0 {
		t.Fatalf("%s is not n0's to sweep", sweptKey)
	}
	cfg := sweepConfig(bug)
	var (
		w       sweepWatch
		epoch   uint64
		goneAt  time.Duration
		keptAt6 []NodeID
		opsAt6  map[OpKind]int // the sweeps' operations on k1 by 6s
		later   OpResult
	)
	cfg.Script = func(s *sim) {
		n3, n4 := s.nodes[3], s.nodes[4]
		w.hook(s, n3.id)
		holdSweptKey(s, n3)
		s.at(2*time.Second, func() {
			w.end, epoch = holderDeadline(s)
			s.crash(n3)
		})
		for at := 2 * time.Second; at < 7*time.Second; at += 50 * time.Millisecond {
			s.at(at, func() {
				if goneAt == 0 && len(keepingSweptKey(s)) == 0 {
					goneAt = s.now
				}
			})
		}
		s.at(6*time.Second, func() { keptAt6, opsAt6 = keepingSweptKey(s), maps.Clone(w.ops) })
		s.onResult = func(n *simNode, res OpResult) {
			if n == n4 && res.Key == sweptKey && !res.Internal && later.Outcome == 0 {
				later = res
			}
		}
		s.at(7*time.Second, func() {
			n4.clients[0].acquire(sweptKey, true, time.Second)
			s.flush(n4)
		})
	}
	s := newSim(cfg)
	s.run()
	t.Logf("grant of epoch %d, holder's deadline %v; first freed at %v; no voter keeps %s from %v; kept at 6s by %v",
		epoch, w.end, w.freedAt, sweptKey, goneAt, keptAt6)
	t.Logf("sweeps' operations on %s answered by 6s: %v; in the run: forgotten %d, written back %d (%d expired grants freed); n4 at 7s: %v epoch %d",
		sweptKey, opsAt6, s.stats.Forgotten, s.stats.WrittenBack, s.stats.FreedExpired, later.Outcome, later.Epoch)
	switch {
	case len(s.fail) > 0:
		t.Fatalf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case epoch == 0:
		t.Fatalf("n3 was never granted %s: the run does not reach its state", sweptKey)
	case len(w.early) > 0:
		t.Fatalf("the grant was freed while its lease ran: %v", w.early)
	case later.Outcome != Granted || later.Epoch <= epoch:
		t.Fatalf("n4's acquire at 7s: %v epoch %d, want granted above %d", later.Outcome, later.Epoch, epoch)
	case bug == "" && (goneAt == 0 || goneAt > 4*time.Second || len(keptAt6) > 0):
		t.Fatalf("%v keep %s at 6s (no voter from %v): a grant whose holder crashed is kept for good", keptAt6, sweptKey, goneAt)
	case bug != "" && (len(keptAt6) != 3 || w.freedAt != 0 || len(opsAt6) > 0):
		t.Fatalf("under %s %v keep %s at 6s, the sweeps sent %v, first freed at %v; want all three kept, nothing sent, never freed",
			bug, keptAt6, sweptKey, opsAt6, w.freedAt)
	}
}

// The holder is cut off, alive. n3 takes k1 at 1.5s; from 2s to 3.2s it
// reaches no voter, and its client releases k1 at 2.6s, before its lease's
// notice: the release retries until the cut heals. Meanwhile every voter's
// timer runs out, and n0's sweep frees the grant and forgets it. The
// release, which wrote nothing, must say NotHeld (as after a takeover),
// and n4's acquire at 5s gets a token above n3's; no checker may fire.
func TestSweepFreesTheExpiredGrantOfACutOffHolder(t *testing.T) {
	cfg := sweepConfig("")
	var (
		w       sweepWatch
		epoch   uint64
		release []OpResult
		later   OpResult
		kept    []NodeID
	)
	cfg.Script = func(s *sim) {
		n3, n4 := s.nodes[3], s.nodes[4]
		w.hook(s, n3.id)
		cut := func(on bool) {
			for _, v := range s.nodes[:3] {
				for _, pair := range [][2]int{{n3.idx, v.idx}, {v.idx, n3.idx}} {
					if on {
						s.cut[pair] = true
					} else {
						delete(s.cut, pair)
					}
				}
			}
		}
		holdSweptKey(s, n3)
		s.at(2*time.Second, func() { cut(true) })
		s.at(2600*time.Millisecond, func() {
			w.end, epoch = holderDeadline(s)
			if c := n3.clients[0]; c.state == cHolding {
				c.release()
				s.flush(n3)
			}
		})
		s.at(3200*time.Millisecond, func() { cut(false) })
		s.onResult = func(n *simNode, res OpResult) {
			switch {
			case res.Key != sweptKey:
			case n == n3 && s.now > 2600*time.Millisecond:
				release = append(release, res)
			case n == n4 && !res.Internal && later.Outcome == 0:
				later = res
			}
		}
		s.at(5*time.Second, func() {
			kept = keepingSweptKey(s)
			n4.clients[0].acquire(sweptKey, true, time.Second)
			s.flush(n4)
		})
	}
	s := newSim(cfg)
	s.run()
	var got []string
	for _, r := range release {
		got = append(got, fmt.Sprintf("%v epoch %d internal %v unknown %v", r.Outcome, r.Epoch, r.Internal, r.Unknown))
	}
	t.Logf("grant of epoch %d, holder's deadline %v; first freed at %v; kept at 5s by %v; n3's results after its release: %v; n4 at 5s: %v epoch %d",
		epoch, w.end, w.freedAt, kept, got, later.Outcome, later.Epoch)
	t.Logf("sweeps' operations on %s answered: %v", sweptKey, w.ops)
	switch {
	case len(s.fail) > 0:
		t.Fatalf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case epoch == 0:
		t.Fatalf("n3 was never granted %s: the run does not reach its state", sweptKey)
	case len(w.early) > 0:
		t.Fatalf("the grant was freed while its lease ran: %v", w.early)
	case w.freedAt == 0 || w.freedAt > 3200*time.Millisecond:
		t.Fatalf("the grant was freed at %v, want while n3 was cut off", w.freedAt)
	case len(release) != 1 || release[0].Outcome != NotHeld || release[0].Internal:
		t.Fatalf("n3's release said %v, want NotHeld: the key was freed by a sweep, not by it", got)
	case len(kept) > 0:
		t.Fatalf("%v keep %s at 5s", kept, sweptKey)
	case later.Outcome != Granted || later.Epoch <= epoch:
		t.Fatalf("n4's acquire at 5s: %v epoch %d, want granted above %d", later.Outcome, later.Epoch, epoch)
	}
}

// A voter cut off from the holder. n3 takes k1 at 1.5s and holds it to
// the end, renewing through n1 and n2; n0 is cut off from n3 from 2s, so
// n0's timer runs out and n0's sweep picks k1. n4 tries k1 every 400ms
// from 2.4s. Fixed: the peeks find the lease timed at n1 and n2, and
// nothing is written: n3 keeps k1 throughout, and every try of n4 finds it
// locked. Fault free-live-grants (the sweep frees whatever the timers say,
// with a prepare that is not IfFree): n0 frees n3's live lease, n4's next
// try is granted inside it, and the checker reports I1.
func TestSweepLeavesALeaseAnyVoterStillTimes(t *testing.T) {
	for _, bug := range []string{"", "free-live-grants"} {
		t.Run("bug="+bug, func(t *testing.T) { runLeaseAVoterStillTimes(t, bug) })
	}
}

func runLeaseAVoterStillTimes(t *testing.T, bug string) {
	cfg := sweepConfig(bug)
	var (
		w       sweepWatch
		tries   []string
		granted int
		lost    int
	)
	cfg.Script = func(s *sim) {
		n0, n3, n4 := s.nodes[0], s.nodes[3], s.nodes[4]
		w.hook(s, n3.id)
		holdSweptKey(s, n3)
		s.at(2*time.Second, func() {
			s.cut[[2]int{n0.idx, n3.idx}] = true
			s.cut[[2]int{n3.idx, n0.idx}] = true
		})
		for at := 2400 * time.Millisecond; at < cfg.Duration-time.Second; at += 400 * time.Millisecond {
			s.at(at, func() {
				if c := n4.clients[0]; c.state == cIdle {
					c.acquire(sweptKey, false, 0)
					s.flush(n4)
				}
			})
		}
		s.onResult = func(n *simNode, res OpResult) {
			if n == n4 && res.Key == sweptKey && !res.Internal {
				tries = append(tries, fmt.Sprintf("%v %v", s.now, res.Outcome))
				if res.Outcome == Granted {
					granted++
					n4.clients[0].holdTime = 10 * time.Millisecond
				}
			}
		}
		s.at(cfg.Duration-time.Millisecond, func() { lost = s.stats.Lost })
	}
	s := newSim(cfg)
	s.run()
	t.Logf("first freed at %v; sweeps' operations on %s answered: %v; n4's tries: %v; leases lost: %d",
		w.freedAt, sweptKey, w.ops, tries, lost)
	switch {
	case bug != "":
		if len(s.fail) == 0 || !strings.HasPrefix(violation(s.fail[0]), "I1") {
			t.Fatalf("under %s: violations %v, want I1 first", bug, s.fail)
		}
		t.Logf("caught: %s", firstLine(s.fail[0]))
	case len(s.fail) > 0:
		t.Fatalf("%d violations, first: %s", len(s.fail), firstLine(s.fail[0]))
	case len(w.early) > 0 || w.freedAt != 0:
		t.Fatalf("a sweep freed n3's live lease (first at %v): %v", w.freedAt, w.early)
	case w.ops[OpPeek] == 0:
		t.Fatalf("no sweep peeked at %s: the run does not reach its state", sweptKey)
	case lost > 0:
		t.Fatalf("n3 lost %d leases", lost)
	case len(tries) < 5 || granted > 0:
		t.Fatalf("n4's tries %v: want at least five, none granted while n3 holds %s", tries, sweptKey)
	}
}
