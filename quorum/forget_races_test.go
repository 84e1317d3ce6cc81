package quorum

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Forgetting keys, racing other work (design.md R74, R76, R82): a sweep's
// write-back (maybeWriteBack, forgetWrittenBack) against the holder's
// fast acquire, accepted by some voters only, across a voter restart, and
// the forget after it against a new grant; a release one voter missed,
// which a sweep writes back and forgets; and observers of keys the voters
// forget, which order a forgotten key by a read's ballot (readOrder).

var forgetfulObserveSeeds = flag.Int64("observe.forgetful.seeds", 30, "seeds of TestSimulationObserveForgetful, each with 3 and 5 voters")

// takeRequests collects what node id has ready and returns its requests,
// kept back from the voters (the scenario delivers them when it chooses).
func takeRequests(c *testCluster, id NodeID) []Request {
	n := c.node(id)
	rd := n.prop.Ready()
	c.collect(n, rd)
	out := make([]Request, 0, len(rd.Requests))
	for _, r := range rd.Requests {
		r.Ops = slices.Clone(r.Ops)
		out = append(out, r)
	}
	return out
}

// opKindsOf are the kinds of the operations of reqs, in order.
func opKindsOf(reqs []Request) []OpKind {
	var ks []OpKind
	for _, r := range reqs {
		for _, op := range r.Ops {
			ks = append(ks, op.Kind)
		}
	}
	return ks
}

// deliverRequests hands reqs from node id to their voters, to those in to
// only when to is not empty.
func deliverRequests(c *testCluster, id NodeID, reqs []Request, to ...NodeID) {
	for _, r := range reqs {
		if len(to) == 0 || slices.Contains(to, r.To) {
			c.deliver(c.node(id), r)
		}
	}
}

// stageWriteBack stages a sweep by p2 of k, which p1 took and released (so
// p1 keeps its one-round-trip path for k) and whose copy at c is demoted,
// up to the write-back's accepts, which it returns undelivered: every
// voter promised the write-back's ballot.
func stageWriteBack(t *testing.T, c *testCluster) (OpResult, []Request) {
	t.Helper()
	g := c.mustGrant("p1", "k")
	c.mustRelease("p1", "k", g.Epoch)
	demoteCopy(c, "c", "k")
	p2 := c.node("p2").prop
	p2.forget("k")
	c.roundTrip() // the peeks
	prep := takeRequests(c, "p2")
	if k := opKindsOf(prep); !slices.Equal(k, []OpKind{OpPrepare, OpPrepare, OpPrepare}) {
		t.Fatalf("after the peeks p2 sends %v, want three prepares", k)
	}
	deliverRequests(c, "p2", prep)
	acc := takeRequests(c, "p2")
	if k := opKindsOf(acc); !slices.Equal(k, []OpKind{OpAccept, OpAccept, OpAccept}) {
		t.Fatalf("after the promises p2 sends %v, want three accepts", k)
	}
	return g, acc
}

// votersKeepingK is how many voters keep a register of k.
func votersKeepingK(c *testCluster) int {
	n := 0
	for _, id := range c.m.Voters {
		if c.node(id).acc.regs["k"] != nil {
			n++
		}
	}
	return n
}

// mustAllHoldP1 fails unless every voter holds p1's grant of epoch e, timed.
func mustAllHoldP1(t *testing.T, c *testCluster, e uint64) {
	t.Helper()
	for id, r := range c.registers("k") {
		if !r.Value.heldBy("p1", c.node("p1").inc) || r.Value.Epoch != e || r.Remaining <= 0 {
			t.Errorf("%s holds %v at %v (timer %v), want p1's grant of epoch %d, timed", id, r.Value, r.Accepted, r.Remaining, e)
		}
	}
}

// The holder's one-round-trip path against a write-back (R74). p1
// released k and keeps the promise of its next ballot (its fast path);
// p2's sweep prepares a higher ballot at every voter, and p1 acquires k
// again before p2's accepts land. p1's accept at its old ballot must be
// refused everywhere (else two values at one ballot), p1 must win on a
// prepare with a token above the last, and p2's accepts, coming after,
// must be refused and the sweep end without a forget.
func TestSweepWriteBackLosesToTheHoldersFastAcquire(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g, acc := stageWriteBack(t, c)
	p1 := c.node("p1").prop
	op, err := p1.Acquire("k", scOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	first := takeRequests(c, "p1")
	if k := opKindsOf(first); !slices.Equal(k, []OpKind{OpAccept, OpAccept, OpAccept}) {
		t.Fatalf("p1's acquire sends %v, want its fast path's accepts (the scenario needs them)", k)
	}
	mark := len(c.answers)
	deliverRequests(c, "p1", first)
	for _, a := range c.answers[mark:] {
		if a.resp.Results[0].OK {
			t.Errorf("%s accepted p1's fast accept at %v after promising p2's write-back", a.req.To, a.req.Ops[0].Ballot)
		}
	}
	c.settle()
	res := c.waitResult("p1", op, 4*scRoundTimeout)
	if res.Outcome != Granted || res.Epoch <= g.Epoch {
		t.Fatalf("p1's acquire: %v epoch %d, want granted above %d", res.Outcome, res.Epoch, g.Epoch)
	}
	mark = len(c.answers)
	deliverRequests(c, "p2", acc)
	c.settle()
	for _, a := range c.answers[mark:] {
		if a.req.From == "p2" && a.resp.Results[0].OK {
			t.Errorf("%s accepted p2's write-back %v over p1's grant", a.req.To, a.req.Ops[0].Kind)
		}
	}
	if p2 := c.node("p2").prop; p2.forgetting != 0 || p2.working("k") {
		t.Errorf("p2's sweep has not ended")
	}
	mustAllHoldP1(t, c, res.Epoch)
	c.mustRelease("p1", "k", res.Epoch)
	if g3 := c.mustGrant("p1", "k"); g3.Epoch <= res.Epoch {
		t.Errorf("k granted at %d after %d", g3.Epoch, res.Epoch)
	}
}

// A write-back whose accept reaches only some voters (R74). c loses
// p2's accept: a and b hold k at the write-back's ballot, c its demoted
// copy. No forget may go out (not every voter acknowledged), nothing is
// dropped, and the next grant's token is above the last; a later sweep
// forgets the key once its release reached every voter.
func TestWriteBackAcceptedBySomeVotersForgetsNothing(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g, acc := stageWriteBack(t, c)
	deliverRequests(c, "p2", acc, "a", "b")
	if k := opKindsOf(takeRequests(c, "p2")); len(k) != 0 {
		t.Errorf("p2 sends %v with c's acknowledgment missing, want nothing", k)
	}
	c.advance(3 * scRoundTimeout)
	p2 := c.node("p2").prop
	if p2.forgetting != 0 || p2.working("k") {
		t.Fatalf("p2's sweep has not ended")
	}
	if n := votersKeepingK(c); n != 3 {
		t.Fatalf("%d voters hold k after a write-back that forgot nothing, want 3", n)
	}
	regs := c.registers("k")
	if regs["a"].Accepted != regs["b"].Accepted || regs["c"].Accepted == regs["a"].Accepted || regs["a"].Value.Held {
		t.Fatalf("registers: a %v, b %v, c %v: not the split wanted", regs["a"].Accepted, regs["b"].Accepted, regs["c"].Accepted)
	}
	g2 := c.mustGrant("p1", "k")
	if g2.Epoch <= g.Epoch {
		t.Fatalf("k granted at %d after %d", g2.Epoch, g.Epoch)
	}
	mustAllHoldP1(t, c, g2.Epoch)
	c.mustRelease("p1", "k", g2.Epoch)
	p2.forget("k")
	c.settle()
	if n := votersKeepingK(c); n != 0 {
		t.Errorf("%d voters keep k after its release reached all and a sweep", n)
	}
	if g3 := c.mustGrant("p1", "k"); g3.Epoch <= g2.Epoch {
		t.Errorf("k granted at %d after %d once forgotten", g3.Epoch, g2.Epoch)
	}
}

// The forget that follows a write-back races an acquire (R74). Every
// voter acknowledged the write-back; p2's forgets are held back while p1
// takes k (its fast path refused: the write-back promised p2's next
// ballot), then delivered, a only before the grant and b, c after it. a
// drops k; b and c hold p1's grant, not the write-back's ballot, and keep
// it. One holder, a token above the last, and the lease is timed by a
// majority.
func TestForgetAfterWriteBackSparesANewGrant(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g, acc := stageWriteBack(t, c)
	deliverRequests(c, "p2", acc)
	fg := takeRequests(c, "p2")
	if k := opKindsOf(fg); !slices.Equal(k, []OpKind{OpForget, OpForget, OpForget}) {
		t.Fatalf("after every voter accepted the write-back p2 sends %v, want three forgets", k)
	}
	deliverRequests(c, "p2", fg, "a")
	if c.node("a").acc.regs["k"] != nil {
		t.Fatalf("a keeps k after the write-back's forget")
	}
	g2 := c.mustGrant("p1", "k")
	if g2.Epoch <= g.Epoch {
		t.Fatalf("k granted at %d after %d", g2.Epoch, g.Epoch)
	}
	deliverRequests(c, "p2", fg, "b", "c")
	timed := 0
	for id, r := range c.registers("k") {
		if r.Value.Held && r.Remaining > 0 {
			timed++
		} else {
			t.Logf("%s holds %v at %v (timer %v)", id, r.Value, r.Accepted, r.Remaining)
		}
	}
	if timed < 2 {
		t.Fatalf("p1's lease of epoch %d is timed at %d voters after the late forgets, want a majority", g2.Epoch, timed)
	}
	op, err := c.node("p2").prop.Acquire("k", scOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	if res := c.waitResult("p2", op, 4*scRoundTimeout); res.Outcome == Granted {
		t.Fatalf("p2 granted k at %d while p1 holds it at %d", res.Epoch, g2.Epoch)
	}
}

// A voter restarts (amnesia) between the write-back's promises and its
// accepts (R74). c refuses the accept (another life's promise), a and b
// take it; the sweep ends with no forget. After c's quarantine and
// catch-up, the next grant's token is above the last and only one node
// gets it.
func TestWriteBackAcrossAVoterRestartForgetsNothing(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g, acc := stageWriteBack(t, c)
	c.restartAcceptor("c")
	mark := len(c.answers)
	deliverRequests(c, "p2", acc)
	for _, a := range c.answers[mark:] {
		if a.req.To == "c" && a.resp.Status == StatusOK && len(a.resp.Results) > 0 && a.resp.Results[0].OK {
			t.Errorf("c, restarted, accepted the write-back promised by its earlier life")
		}
	}
	if k := opKindsOf(takeRequests(c, "p2")); len(k) != 0 {
		t.Errorf("p2 sends %v after c refused, want nothing", k)
	}
	c.advance(scQuarantine + 10*scRoundTimeout)
	if st := c.node("c").acc.State(); st != Live {
		t.Fatalf("c is %v after its quarantine", st)
	}
	g2 := c.mustGrant("p2", "k")
	if g2.Epoch <= g.Epoch {
		t.Fatalf("k granted at %d after %d across the restart", g2.Epoch, g.Epoch)
	}
	op, err := c.node("p1").prop.Acquire("k", scOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	if res := c.waitResult("p1", op, 4*scRoundTimeout); res.Outcome == Granted {
		t.Fatalf("p1 granted k at %d while p2 holds it at %d", res.Epoch, g2.Epoch)
	}
}

// Observers in forgetful runs (R82). TestSimulationObserve runs with
// the default registers, where voters rarely forget a key, so the
// observer's forgotten-key rules (an empty answer where a voter reported
// a value; reports settling on an empty register; the read that orders
// it at its ballot) and the write-backs of sweeps rarely meet observers.
// Here every run's voters drop idle registers all the time (three
// registers, 300ms idle) and its proposers their idle keys, with every
// node observing every key and a fifth of the operations reads; O1 to O4
// and every other invariant are checked.
func TestSimulationObserveForgetful(t *testing.T) {
	seeds := *forgetfulObserveSeeds
	if testing.Short() || raceEnabled {
		seeds = 4
	}
	states, final, wb := 0, 0, uint64(0)
	for seed := int64(1); seed <= seeds; seed++ {
		for _, v := range []int{3, 5} {
			cfg := observeConfig(1100+seed, v)
			smallRegisters(&cfg)
			smallIdle(&cfg)
			cfg.ReadShare = 0.2
			s := newSim(cfg)
			s.run()
			final += s.check.obsFinal
			for _, log := range s.check.obs {
				states += len(log.states)
			}
			for _, n := range s.nodes {
				if n.node != nil && n.node.prop != nil {
					wb += n.node.prop.Stats().WriteBacks
				}
			}
			if len(s.fail) > 0 {
				t.Fatal(failureReport(s))
			}
		}
	}
	t.Logf("%d observed states, %d last states checked at rest, %d write-backs (live nodes at the end)", states, final, wb)
}

// An observer's ordering read races a new grant (R82). As
// in TestObserveForgottenKeyAfterAMissedRelease, n4 observes k0 and is
// cut off from the voters while n3 takes and releases it and a sweep
// forgets it; at the heal n4 meets empty registers and reads k0 with a
// ballot. n3 takes k0 again at the heal plus an offset (0 to 40ms, every 0.5ms), so
// that its prepare and accept land before, among and after the read's.
// Beyond O1 to O4, checked here: n4 never reports k0 free once a grant of
// it is more than a read's deadline old and still running (the read would
// have had to begin after the grant was chosen, and then it finds it).
func TestObserverOrderingReadRacesAGrant(t *testing.T) {
	const (
		observer = 4
		cutAt    = 600 * time.Millisecond
		healAt   = 1600 * time.Millisecond
	)
	reads := 0
	for off := time.Duration(0); off <= 40*time.Millisecond; off += time.Millisecond / 2 {
		cfg := faultFree(1, 3, 2, 1, 1)
		cfg.Observe = 300 * time.Millisecond
		cfg.RegisterIdle = 150 * time.Millisecond
		cfg.Duration = 4 * time.Second
		cfg.Script = func(s *sim) {
			c := s.nodes[3].clients[0]
			s.at(300*time.Millisecond, func() {
				c.holdTime = 400 * time.Millisecond
				c.acquire("k0", true, time.Second)
				s.flush(c.n)
			})
			s.at(cutAt, func() {
				for v := 0; v < 3; v++ {
					cutBoth(s, v, observer, true)
				}
			})
			s.at(healAt, func() {
				for v := 0; v < 3; v++ {
					cutBoth(s, v, observer, false)
				}
			})
			s.at(healAt+off, func() {
				c.holdTime = 800 * time.Millisecond
				c.acquire("k0", true, time.Second)
				s.flush(c.n)
			})
		}
		s := newSim(cfg)
		s.run()
		if len(s.fail) > 0 {
			t.Fatalf("offset %v: %s", off, failureReport(s))
		}
		n := s.nodes[observer]
		log := s.check.obs[obsLife{n.idx, n.inc, "k0"}]
		if log == nil {
			t.Fatalf("offset %v: n4 reported nothing of k0", off)
		}
		grants := s.check.grants["k0"]
		if len(grants) != 2 {
			t.Fatalf("offset %v: k0 granted %d times, want twice", off, len(grants))
		}
		margin := 3*cfg.RoundTimeout + 50*time.Millisecond
		var seq []string
		for i, st := range log.states {
			seq = append(seq, fmt.Sprintf("%v:%v@%v", log.at[i], st.Value, st.Ballot))
			if st.Value.Held && st.Live {
				continue
			}
			for _, g := range grants {
				if g.start+margin < log.at[i] && log.at[i] < g.end {
					t.Errorf("offset %v: n4 reports k0 %v at %v (ballot %v) while token %d, granted at %v, runs to %v",
						off, st.Value, log.at[i], st.Ballot, g.token, g.start, g.end)
				}
			}
			if log.at[i] >= healAt && !st.Ballot.IsZero() && !st.Value.Held && st.Ballot.Node == n.id {
				reads++
			}
		}
		if last := log.states[len(log.states)-1]; last.Value.Held && last.Live {
			t.Errorf("offset %v: n4's last state of k0 is %v, live, after every grant ended", off, last.Value)
		}
		t.Logf("offset %v: grants at %v and %v; n4: %v", off, grants[0].start, grants[1].start, seq)
	}
	t.Logf("%d free states ordered by n4's own read ballot after the heal", reads)
}

// A release that one voter missed (R74). p1 takes k and releases it
// while c is cut off: a and b hold k free at the release's ballot, c p1's
// grant, whose timer runs out. No lease runs anywhere, and the highest
// value is free: a sweep writes back (mayWriteBack) and forgets the key.
// Within five sweeps no voter keeps k, and the next grant's token is
// above p1's. Fault sweep-needs-every-free writes back only when every
// voter holds the key free: the sweeps only peek, and all three voters
// keep k until someone writes it again.
func TestSweepForgetsAReleaseOneVoterMissed(t *testing.T) {
	for _, fault := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweep-needs-every-free=%v", fault), func(t *testing.T) { runMissedRelease(t, fault) })
	}
}

func runMissedRelease(t *testing.T, fault bool) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g := c.mustGrant("p1", "k")
	c.cut["c"] = true
	c.mustRelease("p1", "k", g.Epoch)
	c.cut["c"] = false
	c.advance(2 * scTTL)
	p2 := c.node("p2").prop
	if fault {
		breakRules(p2, sweepNeedsEveryFree)
	}
	mark := len(c.waves)
	for i := 0; i < 5 && votersKeepingK(c) > 0; i++ {
		p2.forget("k")
		c.settle()
		c.advance(scRoundTimeout)
	}
	var sent []OpKind
	for _, w := range c.wavesSince(mark) {
		for _, r := range w {
			if r.From == "p2" {
				sent = append(sent, r.Ops[0].Kind)
			}
		}
	}
	for id, r := range c.registers("k") {
		t.Logf("%s: %v at %v, timer %v", id, r.Value, r.Accepted, r.Remaining)
	}
	kept := votersKeepingK(c)
	t.Logf("after the sweeps (%d ops sent: %v), %d voters keep k; write-backs %d", len(sent), sent, kept, p2.Stats().WriteBacks)
	switch {
	case fault && (kept != 3 || slices.Contains(sent, OpAccept) || slices.Contains(sent, OpForget)):
		t.Fatalf("with every voter required free: %d voters keep k, sweeps sent %v; want all three kept, peeks only", kept, sent)
	case !fault && kept > 0:
		t.Fatalf("%d voters keep k after the sweeps: a release one voter missed is never forgotten", kept)
	case !fault:
		g2 := c.mustGrant("p2", "k")
		if g2.Epoch <= g.Epoch {
			t.Fatalf("after the forget k was granted at token %d, not above %d", g2.Epoch, g.Epoch)
		}
	}
}
