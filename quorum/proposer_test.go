package quorum

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Tests of the proposer's rules, driven against real acceptors by the
// synchronous driver of scenario_test.go.

func TestProposerAcquireTakesTwoRoundTripsThenOne(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")

	mark := len(c.waves)
	t0 := p1.clock.Now()
	g := c.mustGrant("p1", "k")
	w := c.wavesSince(mark)
	if len(w) != 2 || !slices.Equal(kinds(w[0]), []OpKind{OpPrepare}) || !slices.Equal(kinds(w[1]), []OpKind{OpAccept}) {
		t.Fatalf("acquire of a free key: %d round trips %v, want prepare then accept", len(w), waveKinds(w))
	}
	if len(w[0]) != 3 {
		t.Errorf("prepare went to %d voters, want all 3", len(w[0]))
	}
	// The deadline counts from t0, read before the prepare was sent, on
	// the proposer's own clock.
	if g.Deadline != t0+scHolderTTL {
		t.Errorf("deadline %v, want t0 + HolderTTL = %v", g.Deadline, t0+scHolderTTL)
	}
	if epoch, deadline, ok := p1.prop.Holds("k"); !ok || epoch != g.Epoch || deadline != g.Deadline {
		t.Errorf("Holds = %d %v %v, want %d %v", epoch, deadline, ok, g.Epoch, g.Deadline)
	}

	// The accept promised the next ballot: the release goes straight to
	// accept, and so does the next acquire.
	mark = len(c.waves)
	c.mustRelease("p1", "k", g.Epoch)
	if w := c.wavesSince(mark); len(w) != 1 || !slices.Equal(kinds(w[0]), []OpKind{OpAccept}) {
		t.Errorf("release: %v, want one round trip of accepts", waveKinds(w))
	}
	mark = len(c.waves)
	g2 := c.mustGrant("p1", "k")
	w = c.wavesSince(mark)
	if len(w) != 1 || !slices.Equal(kinds(w[0]), []OpKind{OpAccept}) {
		t.Fatalf("re-acquire after a release: %v, want one round trip of accepts", waveKinds(w))
	}
	if len(w[0]) != 3 {
		t.Errorf("re-acquire sent %d requests, want one per voter (3)", len(w[0]))
	}
	if g2.Epoch <= g.Epoch {
		t.Errorf("re-acquire epoch %d, not above %d", g2.Epoch, g.Epoch)
	}
	if st := p1.prop.Stats(); st.FastRounds != 2 {
		t.Errorf("FastRounds = %d, want 2 (release and re-acquire)", st.FastRounds)
	}
}

// A proposer that adopts a configuration drops every fast path: its next
// acquire of a key it released prepares again, among the new voters, instead
// of going straight to accept on the promises of the old ones.
//
// This tests the rule's own effect, not an invariant: no run or scenario is
// known in which keeping the fast paths breaks one (the mutation
// keep-fast-on-adopt passed 3,200 simulated runs aimed at voter changes,
// forgetting and idle keys). A fast accept goes only to voters of the new
// configuration whose promise of its ballot the node holds, in the lives
// that made it, and needs a majority of the new voters among them. Every
// majority of a configuration meets every majority of the one before, and a
// change moves each key with a prepare at a majority of the new voters
// before the next change may start; so a value chosen after the fast path's
// base leaves a promise above its ballot at some voter of every majority
// the fast accept could reach (a forgotten key leaves its promise in the
// promise floor). Dropping the fast paths keeps the proposer from resting
// on that argument: a promise to it from the old voters need not be one of
// the new.
//
// Here the configuration adds a voter d (pending, as during the change)
// that never answers; a, b and c are a majority of it.
func TestProposerAdoptingAConfigurationDropsFastPaths(t *testing.T) {
	for _, keep := range []bool{false, true} {
		c := newTestCluster(t, voters3, "p1")
		if keep {
			breakRules(c.node("p1").prop, keepFastOnAdopt)
		}
		g := c.mustGrant("p1", "k")
		c.mustRelease("p1", "k", g.Epoch)
		next := c.m.Next(append(slices.Clone(c.m.Voters), "d"), true, 0)
		for _, id := range c.m.Voters {
			if !c.node(id).acc.Adopt(next) {
				t.Fatalf("%s did not adopt %v", id, next.Voters)
			}
		}
		if !c.node("p1").prop.Adopt(next) {
			t.Fatalf("p1 did not adopt %v", next.Voters)
		}
		c.m = next
		mark := len(c.waves)
		c.mustGrant("p1", "k")
		w := waveKinds(c.wavesSince(mark))
		fast := len(w) == 1 && slices.Equal(w[0], []OpKind{OpAccept})
		switch {
		case !keep && (len(w) != 2 || !slices.Equal(w[0], []OpKind{OpPrepare}) || !slices.Equal(w[1], []OpKind{OpAccept})):
			t.Errorf("acquire after adopting a configuration: %v, want prepare then accept", w)
		case keep && !fast:
			t.Errorf("with keep-fast-on-adopt: %v, want the one round trip of accepts the mutation makes", w)
		}
	}
}

func waveKinds(w [][]Request) [][]OpKind {
	var out [][]OpKind
	for _, reqs := range w {
		out = append(out, kinds(reqs))
	}
	return out
}

// acquireMany starts acquires of n keys on node id at once, and settles.
func acquireMany(c *testCluster, id NodeID, prefix string, n int) map[string]uint64 {
	c.t.Helper()
	p := c.node(id).prop
	ops := make(map[OpID]string)
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("%s%04d", prefix, i)
		op, err := p.Acquire(key, scOpts(false))
		if err != nil {
			c.t.Fatal(err)
		}
		ops[op] = key
	}
	c.settle()
	epochs := make(map[string]uint64)
	for op, key := range ops {
		res := c.mustResult(id, op)
		if res.Outcome != Granted {
			c.t.Fatalf("acquire of %s: %v", key, res.Outcome)
		}
		epochs[key] = res.Epoch
	}
	return epochs
}

// oneRequestPerVoter fails unless wave is one request to each voter, each
// carrying n operations of kind k.
func oneRequestPerVoter(t *testing.T, what string, wave []Request, n int, k OpKind) {
	t.Helper()
	var to []NodeID
	for _, r := range wave {
		to = append(to, r.To)
		if len(r.Ops) != n || !slices.Equal(kinds([]Request{r}), []OpKind{k}) {
			t.Errorf("%s: request to %s carries %d operations %v, want %d %v", what, r.To, len(r.Ops), kinds([]Request{r}), n, k)
		}
	}
	slices.Sort(to)
	if !slices.Equal(to, voters3) {
		t.Errorf("%s: requests to %v, want exactly one to each of %v", what, to, voters3)
	}
}

func TestProposerRenewalBatchIsOneRequestPerVoter(t *testing.T) {
	const n = 50
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	mark := len(c.waves)
	epochs := acquireMany(c, "p1", "k", n)
	w := c.wavesSince(mark)
	if len(w) != 2 {
		t.Fatalf("%d acquires started together took %d round trips, want 2", n, len(w))
	}
	oneRequestPerVoter(t, "batched prepares", w[0], n, OpPrepare)

	t0 := p1.clock.Now()
	mark = len(c.waves)
	c.advance(scRenewEvery)
	w = c.wavesSince(mark)
	if len(w) != 1 {
		t.Fatalf("renewal of %d leases took %d round trips, want 1", n, len(w))
	}
	oneRequestPerVoter(t, "renewal", w[0], n, OpAccept)
	if len(p1.events) != n {
		t.Fatalf("%d lease events, want %d renewals", len(p1.events), n)
	}
	for _, ev := range p1.events {
		if ev.Lost || ev.Epoch != epochs[ev.Key] || ev.Deadline != t0+scRenewEvery+scHolderTTL {
			t.Errorf("event %+v, want a renewal keeping epoch %d to deadline %v", ev, epochs[ev.Key], t0+scRenewEvery+scHolderTTL)
		}
	}
}

func TestProposerRenewalBatchGathersLeasesTakenAtDifferentTimes(t *testing.T) {
	// Leases at least half way to their renewal are renewed with the first
	// one due, so that leases taken at different moments share a batch.
	const n = 20
	c := newTestCluster(t, voters3, "p1")
	acquireMany(c, "p1", "early", n)
	c.advance(scRenewEvery / 3)
	acquireMany(c, "p1", "late", n)
	for round := 1; round <= 3; round++ {
		mark := len(c.waves)
		c.advance(scRenewEvery)
		w := c.wavesSince(mark)
		if len(w) != 1 {
			t.Fatalf("renewal period %d: %d round trips, want 1", round, len(w))
		}
		oneRequestPerVoter(t, fmt.Sprintf("renewal period %d", round), w[0], 2*n, OpAccept)
	}
}

func TestProposerReportsLostBeforeDeadline(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	p1 := c.node("p1")
	g := c.mustGrant("p1", "k")
	// b and c go silent: renewals reach a alone, never a majority.
	c.cut["b"], c.cut["c"] = true, true
	c.advance(scHolderTTL)

	lost := -1
	for i, ev := range p1.events {
		if ev.Lost {
			lost = i
			break
		}
		t.Errorf("renewal %+v succeeded without a majority", ev)
	}
	if lost < 0 {
		t.Fatalf("no loss reported by the deadline")
	}
	ev, at := p1.events[lost], p1.eventAt[lost]
	if ev.Key != "k" || ev.Epoch != g.Epoch || ev.Reason != LostNoQuorum || ev.Deadline != g.Deadline {
		t.Errorf("lost event %+v, want k at %d, no quorum, deadline %v", ev, g.Epoch, g.Deadline)
	}
	// C3: told strictly before the deadline, on the holder's clock; and no
	// earlier than the notice margin asks (renewals retry until then).
	if at >= g.Deadline || at < g.Deadline-scNotice {
		t.Errorf("lost reported at %v, want in [%v, %v)", at, g.Deadline-scNotice, g.Deadline)
	}
	if _, _, ok := p1.prop.Holds("k"); ok {
		t.Errorf("p1 still holds k after its loss was reported")
	}
	_, err := p1.prop.Release("k", g.Epoch, 0)
	errNotHeld(t, "release of a lost lease", err)

	// Once the network heals, another holder is granted, and only after
	// p1's deadline.
	c.cut["b"], c.cut["c"] = false, false
	op := c.acquire("p2", "k", true)
	c.advance(2 * scTTL)
	res := c.mustResult("p2", op)
	if res.Outcome != Granted {
		t.Fatalf("p2: %v, want granted", res.Outcome)
	}
	p2 := c.node("p2")
	p1Deadline := g.Deadline - (p1.clock.Now() - c.now)
	p2Start := res.RoundStarted - (p2.clock.Now() - c.now)
	if p2Start < p1Deadline {
		t.Errorf("p2's grant began at %v, before p1's deadline %v", p2Start, p1Deadline)
	}
}

func TestProposerReleaseActsOnlyOnExactEpoch(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1").prop
	g := c.mustGrant("p1", "k")
	mark := len(c.waves)
	for _, tc := range []struct {
		key   string
		epoch uint64
	}{{"k", g.Epoch + 1}, {"k", g.Epoch - 1}, {"k", 0}, {"other", g.Epoch}} {
		_, err := p1.Release(tc.key, tc.epoch, 0)
		errNotHeld(t, fmt.Sprintf("Release(%q, %d)", tc.key, tc.epoch), err)
	}
	c.settle()
	if w := c.wavesSince(mark); len(w) != 0 {
		t.Errorf("refused releases sent %v", waveKinds(w))
	}
	if epoch, _, ok := p1.Holds("k"); !ok || epoch != g.Epoch {
		t.Fatalf("after refused releases Holds = %d %v, want %d", epoch, ok, g.Epoch)
	}
	res := c.mustRelease("p1", "k", g.Epoch)
	if res.Epoch != g.Epoch {
		t.Errorf("released epoch %d, want %d", res.Epoch, g.Epoch)
	}
	_, err := p1.Release("k", g.Epoch, 0)
	errNotHeld(t, "second release", err)
	// The register is free and keeps the epoch, so the next grant goes
	// above it.
	for id, r := range c.registers("k") {
		if r.Value.Held || r.Value.Epoch != g.Epoch {
			t.Errorf("%s holds %v, want free@%d", id, r.Value, g.Epoch)
		}
	}
}

func TestProposerCountsDistinctVoters(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p := c.node("p1").prop
	op, err := p.Acquire("k", scOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	answer := func(rd ProposerReady, to NodeID) *Response {
		for i := range rd.Requests {
			if rd.Requests[i].To == to {
				return c.node(to).acc.HandleRequest(&rd.Requests[i])
			}
		}
		t.Fatalf("no request to %s", to)
		return nil
	}
	// Replies that must not count towards a majority of {a, b, c}.
	noMajority := func(phase string, ra *Response) {
		t.Helper()
		p.Step(ra)
		p.Step(ra) // the same voter again: a duplicated message
		outsider := *ra
		outsider.From = "x" // a node outside the configuration
		p.Step(&outsider)
		outsider.From = "" // a reply that names nobody
		p.Step(&outsider)
		other := *ra
		other.From, other.Config = "b", c.m.ID+1 // b, but of another configuration
		p.Step(&other)
		if p.HasReady() {
			t.Fatalf("%s round completed on one voter's replies: %+v", phase, p.Ready())
		}
	}

	prepares := p.Ready()
	noMajority("prepare", answer(prepares, "a"))
	p.Step(answer(prepares, "b"))
	accepts := p.Ready()
	if len(accepts.Requests) == 0 || accepts.Requests[0].Ops[0].Kind != OpAccept {
		t.Fatalf("a and b promised, yet no accept: %+v", accepts)
	}
	noMajority("accept", answer(accepts, "a"))
	if _, ok := c.result("p1", op); ok {
		t.Fatalf("acquire ended on one voter's acks")
	}
	p.Step(answer(accepts, "b"))
	c.settle()
	res := c.mustResult("p1", op)
	if res.Outcome != Granted || !slices.Equal(res.Quorum, []NodeID{"a", "b"}) {
		t.Fatalf("%v by %v, want granted by [a b]", res.Outcome, res.Quorum)
	}
}

func TestProposerAcquireOfOwnHeldKeyIsLockedWithoutAsking(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	g := c.mustGrant("p1", "k")
	mark := len(c.waves)
	op := c.acquire("p1", "k", false)
	res := c.mustResult("p1", op)
	if res.Outcome != Locked || res.Holder != "p1" || res.Epoch != g.Epoch {
		t.Fatalf("%v by %s at %d, want locked by p1 itself at %d", res.Outcome, res.Holder, res.Epoch, g.Epoch)
	}
	if w := c.wavesSince(mark); len(w) != 0 {
		t.Errorf("asked the acceptors %v; the node knows it holds the key", waveKinds(w))
	}
}

func TestProposerCountsRecoveringVotersOut(t *testing.T) {
	// b and c restarted: they answer at once that they cannot vote, so the
	// acquire ends as no quorum (not locked), having written nothing; once
	// they are live again it succeeds.
	c := newTestCluster(t, voters3, "p1")
	c.restartAcceptor("b")
	c.restartAcceptor("c")
	op := c.acquire("p1", "k", false)
	for _, a := range c.answers {
		if a.req.To != "a" && (a.resp.Status != StatusRecovering || a.resp.Results[0].Reason != ReasonNoVote) {
			t.Errorf("%s answered %v %+v, want recovering, no vote", a.req.To, a.resp.Status, a.resp.Results)
		}
	}
	res := c.waitResult("p1", op, time.Second)
	if res.Outcome != NoQuorum || res.Unknown {
		t.Fatalf("%v unknown %v, want no quorum, known", res.Outcome, res.Unknown)
	}
	c.advance(scQuarantine)
	c.mustGrant("p1", "k")
}

func TestProposerNoQuorumWhenMajoritySilent(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.cut["b"], c.cut["c"] = true, true
	op := c.acquire("p1", "k", false)
	c.advance(time.Second)
	res := c.mustResult("p1", op)
	if res.Outcome != NoQuorum || res.Unknown {
		t.Fatalf("%v unknown %v, want no quorum, known (nothing was written)", res.Outcome, res.Unknown)
	}
	if p := c.node("p1").prop; p.Leases() != 0 {
		t.Errorf("holds %d leases", p.Leases())
	}
}

func TestProposerReadSeesHolder(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g := c.mustGrant("p2", "k")
	op, err := c.node("p1").prop.Read("k", 0)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	res := c.mustResult("p1", op)
	if res.Outcome != ReadDone || !res.Live || res.Holder != "p2" || res.Epoch != g.Epoch {
		t.Fatalf("read: %v live %v holder %s epoch %d, want p2's live grant at %d", res.Outcome, res.Live, res.Holder, res.Epoch, g.Epoch)
	}
	// A read disturbs nobody: the holder's release is still one round trip.
	mark := len(c.waves)
	c.mustRelease("p2", "k", g.Epoch)
	if w := c.wavesSince(mark); len(w) != 1 {
		t.Errorf("release after a read took %d round trips, want 1", len(w))
	}
}

func TestProposerRefusesBadArguments(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p := c.node("p1").prop
	good := scOpts(false)
	cases := []struct {
		name string
		edit func(o *AcquireOptions)
	}{
		{"no TTL", func(o *AcquireOptions) { o.TTL = 0 }},
		{"holder TTL not below TTL", func(o *AcquireOptions) { o.HolderTTL = o.TTL }},
		{"negative notice", func(o *AcquireOptions) { o.Notice = -1 }},
		{"notice not below holder TTL", func(o *AcquireOptions) { o.Notice = o.HolderTTL }},
		{"no renewal interval", func(o *AcquireOptions) { o.RenewEvery = 0 }},
		{"renewal after the notice", func(o *AcquireOptions) { o.RenewEvery = o.HolderTTL - o.Notice }},
		{"holder TTL too short for a round", func(o *AcquireOptions) {
			o.HolderTTL, o.RenewEvery = scRoundTimeout+o.Notice, time.Millisecond
		}},
	}
	for _, tc := range cases {
		o := good
		tc.edit(&o)
		if _, err := p.Acquire("k", o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%s: %v, want %v", tc.name, err, ErrBadOptions)
		}
	}
	if _, err := p.Acquire("", good); !errors.Is(err, ErrBadKey) {
		t.Errorf("empty key: %v, want %v", err, ErrBadKey)
	}
	if _, err := p.Read("", 0); !errors.Is(err, ErrBadKey) {
		t.Errorf("read of an empty key: %v, want %v", err, ErrBadKey)
	}
	if p.HasReady() {
		t.Errorf("refused calls left something to send")
	}
}

// TestProposerIdleKeysKeepTheKeyJustUsed: MaxIdleKeys bounds idle keys, not
// idle turns. A node that takes and releases one key over and over keeps its
// fast path and ballot counter for it, however many turns it takes. (Found
// as a bug: each turn used to add an entry to the idle list, so the one hot
// key was evicted at turn MaxIdleKeys+1 and its next acquire prepared from
// counter 1, lost to the acceptors' promise and backed off.)
func TestProposerIdleKeysKeepTheKeyJustUsed(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	c.restartProposer("p1", func(cfg *ProposerConfig) { cfg.MaxIdleKeys = 2 })
	for turn := 0; turn < 3; turn++ {
		g := c.mustGrant("p1", "k")
		c.mustRelease("p1", "k", g.Epoch)
	}
	// One key is idle, within the bound of two: its fast path stands.
	mark := len(c.waves)
	c.mustGrant("p1", "k")
	if w := c.wavesSince(mark); len(w) != 1 {
		t.Errorf("acquire of the only idle key took %d round trips %v, want 1 (the fast path)", len(w), waveKinds(w))
	}
}

// A waiting acquire whose prepare round is overtaken by the key's Notify
// (the notify travels apart from the replies: another connection, another
// goroutine) must not park until the old lease's end: the notify will not
// come again. It tries again at once and is granted without time passing.
func TestProposerNotifyOvertakingRepliesIsNotLost(t *testing.T) {
	c := newTestCluster(t, voters3, "p1", "p2")
	g := c.mustGrant("p1", "k")
	p2 := c.node("p2")
	o := scOpts(true)
	o.Deadline = p2.clock.Now() + 10*time.Second
	op, err := p2.prop.Acquire("k", o)
	if err != nil {
		t.Fatal(err)
	}
	// The prepares reach the acceptors (which register p2 as a waiter and
	// answer "held"), but the answers are not back yet.
	var answers []*Response
	for _, req := range p2.prop.Ready().Requests {
		answers = append(answers, c.node(req.To).acc.HandleRequest(&req))
	}
	// p1 releases; the acceptors tell p2 at once.
	c.mustRelease("p1", "k", g.Epoch)
	if _, done := c.result("p2", op); done {
		t.Fatal("the acquire ended before its replies came back")
	}
	// Now the replies of the earlier round arrive: the key was held.
	for _, resp := range answers {
		p2.prop.Step(resp)
	}
	c.settle() // no time passes
	res, done := c.result("p2", op)
	if !done || res.Outcome != Granted {
		t.Fatalf("after the overtaken notify and no time passing: done %v, %v; want granted at once", done, res.Outcome)
	}
	if res.Epoch <= g.Epoch {
		t.Errorf("granted epoch %d, not above the released %d", res.Epoch, g.Epoch)
	}
}

// Every operation leaves timers behind (a lease's loss notice, seconds
// ahead). NextTick clears the stale ones at the front a bounded batch at a
// time, so that a node that has just run a burst of operations does not
// stop for tens of milliseconds in one call; the time it reports is never
// later than that of any live timer.
func TestProposerNextTickClearsStaleTimersInBatches(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p := c.node("p1").prop
	for i := 0; i < 2*maxStalePops; i++ {
		g := c.mustGrant("p1", "k")
		c.mustRelease("p1", "k", g.Epoch)
	}
	earliestLive := func() (time.Duration, bool) {
		var at time.Duration
		ok := false
		for _, list := range [][]timer{p.timers.heap, p.timers.fifo[p.timers.head:]} {
			for i := range list {
				if tm := &list[i]; !tm.stale(p) && (!ok || tm.at < at) {
					at, ok = tm.at, true
				}
			}
		}
		return at, ok
	}
	live, hasLive := earliestLive()
	if n := p.timers.len(); n < 2*maxStalePops {
		t.Fatalf("only %d timers after %d acquires and releases: the test needs more", n, 2*maxStalePops)
	}
	for calls := 1; ; calls++ {
		before := p.timers.len()
		at, ok := p.NextTick()
		if popped := before - p.timers.len(); popped > maxStalePops {
			t.Fatalf("one NextTick cleared %d stale timers, more than %d", popped, maxStalePops)
		}
		if hasLive && (!ok || at > live) {
			t.Fatalf("NextTick = %v, %v with a live timer at %v", at, ok, live)
		}
		if p.timers.len() == 0 || !p.timers.front().stale(p) {
			if got, gotOK := earliestLive(); got != live || gotOK != hasLive {
				t.Errorf("the earliest live timer moved from %v to %v", live, got)
			}
			if ok != hasLive || (ok && at != live) {
				t.Errorf("after clearing, NextTick = %v, %v; want %v, %v", at, ok, live, hasLive)
			}
			return
		}
		if calls > 100 {
			t.Fatalf("stale timers still at the front after %d calls", calls)
		}
	}
}

// A tag attached to a held lease comes back with every event about it,
// renewals and the loss; a tag for another epoch, or for a key not held,
// is refused.
func TestProposerLeaseEventsCarryTheirTag(t *testing.T) {
	c := newTestCluster(t, voters3, "p1")
	p1 := c.node("p1")
	g := c.mustGrant("p1", "k")
	if p1.prop.TagLease("k", g.Epoch+1, "other") || p1.prop.TagLease("j", g.Epoch, "other") {
		t.Fatal("a tag was taken for a lease not held")
	}
	tag := &struct{ name string }{"k's lease"}
	if !p1.prop.TagLease("k", g.Epoch, tag) {
		t.Fatal("the tag of a held lease was refused")
	}
	c.advance(3 * scRenewEvery)
	c.cut["b"], c.cut["c"] = true, true
	c.advance(scHolderTTL)
	renewals, lost := 0, 0
	for _, ev := range p1.events {
		if ev.Tag != tag {
			t.Errorf("event %+v without its lease's tag", ev)
		}
		if ev.Lost {
			lost++
		} else {
			renewals++
		}
	}
	if renewals == 0 || lost != 1 {
		t.Fatalf("%d renewals and %d losses reported; want some and one", renewals, lost)
	}
}
