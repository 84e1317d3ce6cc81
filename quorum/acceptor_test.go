package quorum

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Tests of the acceptor's rules, one acceptor at a time. Each drives a real
// Acceptor with hand-made operations on a fake clock, so every number it
// checks is exact.

// fakeClock is a Clock that moves only when a test moves it.
type fakeClock struct {
	now  time.Duration
	wall int64 // wall-clock microseconds when now was zero
}

func (c *fakeClock) Now() time.Duration { return c.now }

func (c *fakeClock) WallMicros() int64 { return c.wall + c.now.Microseconds() }

func (c *fakeClock) advance(d time.Duration) { c.now += d }

// testWallBase is 2026-11-29 00:00 UTC in microseconds: epochs of a fresh
// cluster start there (the wall-clock floor).
const testWallBase = int64(1795910400) * 1e6

const (
	accMaxTTL     = 10 * time.Second
	accQuarantine = 10 * time.Second
	accGrace      = 100 * time.Millisecond
	accRetry      = 100 * time.Millisecond
	accTTL        = 4 * time.Second // the TTL of the grants the tests write
	accInc        = 11              // the acceptor's incarnation
)

// accFixture is one acceptor ("a" of {a, b, c} unless said otherwise) and
// the means to talk to it.
type accFixture struct {
	t      testing.TB
	id     NodeID
	a      *Acceptor
	clock  *fakeClock
	m      Membership
	nextID uint64
}

func newAccConfig(id NodeID, m Membership, clock Clock) AcceptorConfig {
	return AcceptorConfig{
		ID: id, Incarnation: accInc, Membership: m, Clock: clock,
		MaxTTL: accMaxTTL, Quarantine: accQuarantine, CatchUpBuckets: 2,
		RetryInterval: accRetry, HandoffGrace: accGrace,
	}
}

// newAccFixture returns a quarantined acceptor "a" of the given voters, its
// clock starting at an arbitrary origin (monotonic clocks of two processes
// share none).
func newAccFixture(t testing.TB, voters ...NodeID) *accFixture {
	t.Helper()
	if len(voters) == 0 {
		voters = []NodeID{"a", "b", "c"}
	}
	return newAccFixtureOf(t, "a", NewMembership(7, voters...))
}

func newAccFixtureOf(t testing.TB, id NodeID, m Membership) *accFixture {
	t.Helper()
	clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
	a, err := NewAcceptor(newAccConfig(id, m, clock))
	if err != nil {
		t.Fatalf("NewAcceptor: %v", err)
	}
	return &accFixture{t: t, id: id, a: a, clock: clock, m: m}
}

// newLiveAcceptor returns acceptor "a" of {a, b, c}, live: it waited out its
// quarantine and caught up from both other voters, who had nothing.
func newLiveAcceptor(t testing.TB) *accFixture {
	t.Helper()
	return makeLive(newAccFixture(t))
}

func makeLive(f *accFixture) *accFixture {
	t := f.t
	t.Helper()
	f.clock.advance(accQuarantine)
	f.a.Tick()
	for guard := 0; f.a.State() != Live; guard++ {
		if guard > 100 {
			t.Fatalf("acceptor still %v after catching up", f.a.State())
		}
		for _, req := range f.a.Ready().CatchUps {
			f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: req.To, To: f.id,
				Inc: 1, Status: StatusOK, Bucket: req.Bucket})
		}
	}
	if f.a.FloorOnly() {
		t.Fatalf("caught up from every voter, yet FloorOnly")
	}
	return f
}

// do sends one request from proposer from, numbering the operations.
func (f *accFixture) do(from NodeID, ops ...Op) *Response {
	f.t.Helper()
	for i := range ops {
		f.nextID++
		ops[i].ID = f.nextID
	}
	resp := f.a.HandleRequest(&Request{Config: f.m.ID, From: from, To: f.id, Ops: ops})
	if resp.Status == StatusOK && len(resp.Results) != len(ops) {
		f.t.Fatalf("%d results for %d operations", len(resp.Results), len(ops))
	}
	for i := range resp.Results {
		if resp.Results[i].ID != ops[i].ID {
			f.t.Fatalf("result %d answers operation %d, want %d", i, resp.Results[i].ID, ops[i].ID)
		}
	}
	return resp
}

// raw sends one operation as it is, its ID included (a duplicate of an
// earlier message keeps its ID).
func (f *accFixture) raw(from NodeID, op Op) Result {
	f.t.Helper()
	resp := f.a.HandleRequest(&Request{Config: f.m.ID, From: from, To: f.id, Ops: []Op{op}})
	if resp.Status != StatusOK {
		f.t.Fatalf("status %v, want ok", resp.Status)
	}
	return resp.Results[0]
}

func (f *accFixture) one(from NodeID, op Op) Result {
	f.t.Helper()
	resp := f.do(from, op)
	if resp.Status != StatusOK {
		f.t.Fatalf("status %v, want ok", resp.Status)
	}
	return resp.Results[0]
}

func (f *accFixture) prepare(b Ballot) Result {
	f.t.Helper()
	return f.one(b.Node, Op{Kind: OpPrepare, Key: "k", Ballot: b})
}

func (f *accFixture) accept(b Ballot, v Value) Result {
	f.t.Helper()
	return f.one(b.Node, Op{Kind: OpAccept, Key: "k", Ballot: b, Inc: accInc, Value: v})
}

// acceptNext accepts v at b and promises next in the same breath (the fast
// path's accept).
func (f *accFixture) acceptNext(b Ballot, v Value, next Ballot) Result {
	f.t.Helper()
	return f.one(b.Node, Op{Kind: OpAccept, Key: "k", Ballot: b, Inc: accInc, Value: v, Next: next})
}

func (f *accFixture) peek() Result {
	f.t.Helper()
	return f.one("observer", Op{Kind: OpPeek, Key: "k"})
}

// mustOK fails unless r was granted.
func mustOK(t testing.TB, what string, r Result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s refused (reason %d), want ok", what, r.Reason)
	}
}

// mustRefuse fails unless r was refused for the given reason.
func mustRefuse(t testing.TB, what string, r Result, why Reason) {
	t.Helper()
	if r.OK || r.Reason != why {
		t.Fatalf("%s: ok=%v reason %d, want refused with reason %d", what, r.OK, r.Reason, why)
	}
}

// bal is a ballot of incarnation 1 of node.
func bal(counter uint64, node NodeID) Ballot {
	return Ballot{Counter: counter, Incarnation: 1, Node: node}
}

// grantTo is a grant to incarnation 1 of holder whose lease period started
// with the write at ballot lease.
func grantTo(holder NodeID, epoch uint64, lease Ballot) Value {
	return Value{Held: true, Holder: holder, HolderInc: 1, Epoch: epoch, TTL: accTTL, Lease: lease}
}

func TestAcceptorPrepareRespectsPromise(t *testing.T) {
	// Every case starts from: v accepted at 3.p, then 5.p promised.
	v := grantTo("p", 30, bal(3, "p"))
	cases := []struct {
		name         string
		ballot       Ballot
		wantOK       bool
		wantPromised Ballot
	}{
		{"lower counter is refused", bal(4, "q"), false, bal(5, "p")},
		{"same counter, lower incarnation is refused", Ballot{Counter: 5, Incarnation: 0, Node: "z"}, false, bal(5, "p")},
		{"same counter and incarnation, lower node is refused", bal(5, "o"), false, bal(5, "p")},
		{"equal to the promise, from another round, is refused", bal(5, "p"), false, bal(5, "p")},
		{"same counter, higher node is promised", bal(5, "q"), true, bal(5, "q")},
		{"higher counter is promised", bal(6, "q"), true, bal(6, "q")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLiveAcceptor(t)
			mustOK(t, "prepare 3.p", f.prepare(bal(3, "p")))
			mustOK(t, "accept 3.p", f.accept(bal(3, "p"), v))
			mustOK(t, "prepare 5.p", f.prepare(bal(5, "p")))
			f.clock.advance(time.Second)

			r := f.prepare(tc.ballot)
			if tc.wantOK {
				mustOK(t, "prepare", r)
			} else {
				mustRefuse(t, "prepare", r, ReasonPromised)
			}
			// Refused or not, the answer says what is here, so that a
			// proposer can learn the key's state without winning.
			if r.Promised != tc.wantPromised {
				t.Errorf("Promised = %v, want %v", r.Promised, tc.wantPromised)
			}
			if r.Accepted != bal(3, "p") || r.Value != v {
				t.Errorf("reports accepted %v %v, want 3.p %v", r.Accepted, r.Value, v)
			}
			if r.Remaining != accTTL-time.Second {
				t.Errorf("Remaining = %v, want %v", r.Remaining, accTTL-time.Second)
			}
			if r.MaxEpoch != 30 {
				t.Errorf("MaxEpoch = %d, want 30", r.MaxEpoch)
			}
			// The promise the acceptor keeps is the one it reported: an
			// accept just below it is refused, one at it is taken.
			if got := f.peek().Promised; got != tc.wantPromised {
				t.Errorf("promise kept = %v, want %v", got, tc.wantPromised)
			}
		})
	}
}

func TestAcceptorAcceptRespectsPromiseAndIncarnation(t *testing.T) {
	old := grantTo("p", 30, bal(3, "p"))
	next := grantTo("p", 30, bal(5, "p")) // a renewal
	cases := []struct {
		name   string
		op     Op
		wantOK bool
		why    Reason
	}{
		{"below the promise is refused",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(4, "q"), Inc: accInc, Value: grantTo("q", 31, bal(4, "q"))}, false, ReasonPromised},
		{"at the promise is accepted",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(5, "p"), Inc: accInc, Value: next}, true, ReasonNone},
		{"above the promise is accepted",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(9, "q"), Inc: accInc, Value: grantTo("q", 31, bal(9, "q"))}, true, ReasonNone},
		{"to an earlier incarnation is refused",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(9, "p"), Inc: accInc - 1, Value: next}, false, ReasonIncarnation},
		{"to a later incarnation is refused",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(9, "p"), Inc: accInc + 1, Value: next}, false, ReasonIncarnation},
		{"without an incarnation is refused",
			Op{Kind: OpAccept, Key: "k", Ballot: bal(9, "p"), Value: next}, false, ReasonIncarnation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLiveAcceptor(t)
			mustOK(t, "accept 3.p", f.accept(bal(3, "p"), old))
			mustOK(t, "prepare 5.p", f.prepare(bal(5, "p")))

			r := f.one(tc.op.Ballot.Node, tc.op)
			got := f.peek()
			if !tc.wantOK {
				mustRefuse(t, "accept", r, tc.why)
				if got.Accepted != bal(3, "p") || got.Value != old {
					t.Errorf("a refused accept changed the register to %v %v", got.Accepted, got.Value)
				}
				if tc.why == ReasonPromised && r.Promised != bal(5, "p") {
					t.Errorf("refusal names promise %v, want 5.p", r.Promised)
				}
				return
			}
			mustOK(t, "accept", r)
			if got.Accepted != tc.op.Ballot || got.Value != tc.op.Value {
				t.Errorf("register holds %v %v, want %v %v", got.Accepted, got.Value, tc.op.Ballot, tc.op.Value)
			}
		})
	}
}

func TestAcceptorAcceptPromisesNext(t *testing.T) {
	// The fast path: accepting at 3.p with Next 4.p promises 4.p at once,
	// so that nobody can slip a value in between the two ballots.
	f := newLiveAcceptor(t)
	r := f.acceptNext(bal(3, "p"), grantTo("p", 30, bal(3, "p")), bal(4, "p"))
	mustOK(t, "accept 3.p next 4.p", r)
	if r.Promised != bal(4, "p") {
		t.Fatalf("Promised = %v, want 4.p", r.Promised)
	}
	mustRefuse(t, "prepare 4.a after the promise of 4.p", f.prepare(bal(4, "a")), ReasonPromised)
	mustOK(t, "accept at the promised Next", f.accept(bal(4, "p"), grantTo("p", 30, bal(4, "p"))))
}

func TestAcceptorExclusionTimer(t *testing.T) {
	g := grantTo("p", 30, bal(1, "p"))
	renewal := grantTo("p", 30, bal(2, "p"))
	writeBack := grantTo("p", 30, bal(1, "p")) // same grant, written at a later ballot
	other := grantTo("q", 31, bal(1, "q"))     // another grant, learned only by a write-back
	cases := []struct {
		name  string
		steps func(f *accFixture)
		want  time.Duration // Remaining reported by a later prepare
	}{
		{"a grant starts the timer for TTL", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(3 * time.Second)
		}, accTTL - 3*time.Second},
		{"the timer ends after TTL on the acceptor's clock", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(accTTL)
		}, 0},
		{"a renewal runs it for a full TTL again", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(3 * time.Second)
			mustOK(f.t, "renewal", f.accept(bal(2, "p"), renewal))
			f.clock.advance(time.Second)
		}, accTTL - time.Second},
		{"a write-back of the same grant keeps the timer", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(3 * time.Second)
			mustOK(f.t, "write-back", f.accept(bal(2, "r"), writeBack))
			f.clock.advance(500 * time.Millisecond)
		}, accTTL - 3500*time.Millisecond},
		{"a write-back of another grant starts no timer", func(f *accFixture) {
			mustOK(f.t, "write-back", f.accept(bal(2, "r"), other))
		}, 0},
		{"a write-back of another grant stops the old grant's timer", func(f *accFixture) {
			// A grant of a later epoch is only chosen once no earlier
			// lease is live, so the old timer protects nothing.
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(time.Second)
			mustOK(f.t, "write-back", f.accept(bal(2, "r"), grantTo("q", 31, bal(1, "q"))))
		}, 0},
		{"a duplicate accept does not extend it", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(3 * time.Second)
			mustOK(f.t, "duplicate", f.accept(bal(1, "p"), g))
			f.clock.advance(time.Second)
		}, accTTL - 4*time.Second},
		{"a free value ends it", func(f *accFixture) {
			mustOK(f.t, "grant", f.accept(bal(1, "p"), g))
			f.clock.advance(time.Second)
			mustOK(f.t, "release", f.accept(bal(2, "p"), Value{Epoch: 30}))
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLiveAcceptor(t)
			tc.steps(f)
			r := f.prepare(bal(100, "s"))
			mustOK(t, "prepare", r)
			if r.Remaining != tc.want {
				t.Errorf("Remaining = %v, want %v", r.Remaining, tc.want)
			}
		})
	}
}

func TestAcceptorIfFreeRefusedWhileAnotherHolderIsLive(t *testing.T) {
	// p holds the key: granted at 1.p, and 2.p promised for its renewal.
	setup := func(t *testing.T) *accFixture {
		f := newLiveAcceptor(t)
		mustOK(t, "grant", f.acceptNext(bal(1, "p"), grantTo("p", 30, bal(1, "p")), bal(2, "p")))
		f.clock.advance(time.Second)
		return f
	}
	cases := []struct {
		name   string
		wait   time.Duration // before the prepare
		ballot Ballot
		ifFree bool
		wantOK bool
	}{
		{"another node is refused", 0, bal(5, "q"), true, false},
		{"the holder's own node and incarnation is promised", 0, bal(5, "p"), true, true},
		{"the holder's node in a later incarnation is refused", 0, Ballot{Counter: 5, Incarnation: 2, Node: "p"}, true, false},
		{"a prepare without IfFree is promised", 0, bal(5, "q"), false, true},
		{"another node is promised once the lease ran out", accTTL, bal(5, "q"), true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			f.clock.advance(tc.wait)
			r := f.one(tc.ballot.Node, Op{Kind: OpPrepare, Key: "k", Ballot: tc.ballot, IfFree: tc.ifFree})
			if tc.wantOK {
				mustOK(t, "prepare", r)
				if f.peek().Promised != tc.ballot {
					t.Errorf("promise is %v, want %v", f.peek().Promised, tc.ballot)
				}
				return
			}
			mustRefuse(t, "prepare", r, ReasonHeld)
			// The refusal names the holder and how long it holds here.
			if r.Value.Holder != "p" || r.Value.Epoch != 30 || r.Remaining != accTTL-time.Second {
				t.Errorf("refusal reports %v remaining %v, want p's grant and %v", r.Value, r.Remaining, accTTL-time.Second)
			}
			// Nothing was promised: the holder's renewal at its promised
			// ballot still goes through in one round trip.
			if got := f.peek().Promised; got != bal(2, "p") {
				t.Errorf("promise moved to %v, want 2.p", got)
			}
			mustOK(t, "holder's renewal", f.accept(bal(2, "p"), grantTo("p", 30, bal(2, "p"))))
		})
	}
}

func TestAcceptorRefusesInvalidOperations(t *testing.T) {
	held := grantTo("p", 30, bal(1, "p"))
	tooLong := held
	tooLong.TTL = accMaxTTL + time.Nanosecond
	noTTL := held
	noTTL.TTL = 0
	noHolder := held
	noHolder.Holder = ""
	cases := []struct {
		name string
		op   Op
	}{
		{"prepare of an empty key", Op{Kind: OpPrepare, Ballot: bal(1, "p")}},
		{"prepare at the zero ballot", Op{Kind: OpPrepare, Key: "k"}},
		{"accept of an empty key", Op{Kind: OpAccept, Ballot: bal(1, "p"), Inc: accInc, Value: held}},
		{"accept at the zero ballot", Op{Kind: OpAccept, Key: "k", Inc: accInc, Value: held}},
		{"accept of a TTL above MaxTTL", Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: tooLong}},
		{"accept of a held value without TTL", Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: noTTL}},
		{"accept of a held value without holder", Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: noHolder}},
		{"peek of an empty key", Op{Kind: OpPeek}},
		{"an unknown kind of operation", Op{Kind: 99, Key: "k", Ballot: bal(1, "p")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLiveAcceptor(t)
			// A valid prepare rides in the same batch: a bad operation is
			// refused on its own and disturbs nothing else.
			resp := f.do("p", tc.op, Op{Kind: OpPrepare, Key: "other", Ballot: bal(1, "p")})
			if resp.Status != StatusOK {
				t.Fatalf("status %v, want ok", resp.Status)
			}
			mustRefuse(t, tc.name, resp.Results[0], ReasonInvalid)
			mustOK(t, "the valid neighbour", resp.Results[1])
			if got := f.peek(); got.Promised != (Ballot{}) || got.Accepted != (Ballot{}) {
				t.Errorf("a refused operation left promise %v accepted %v", got.Promised, got.Accepted)
			}
		})
	}
	t.Run("a TTL of exactly MaxTTL is accepted", func(t *testing.T) {
		f := newLiveAcceptor(t)
		v := held
		v.TTL = accMaxTTL
		mustOK(t, "accept", f.accept(bal(1, "p"), v))
	})
}

func TestAcceptorRefusesOtherConfiguration(t *testing.T) {
	f := newLiveAcceptor(t)
	resp := f.a.HandleRequest(&Request{Config: f.m.ID + 1, From: "p", To: "a",
		Ops: []Op{{ID: 1, Kind: OpPrepare, Key: "k", Ballot: bal(1, "p")}}})
	if resp.Status != StatusWrongConfig {
		t.Fatalf("status %v, want %v", resp.Status, StatusWrongConfig)
	}
	if resp.Config != f.m.ID || len(resp.Results) != 0 {
		t.Errorf("answer carries config %d and %d results, want %d and none", resp.Config, len(resp.Results), f.m.ID)
	}
	if f.peek().Promised != (Ballot{}) {
		t.Errorf("a prepare of another configuration was promised")
	}
	cu := f.a.HandleCatchUp(&CatchUpRequest{Config: f.m.ID + 1, From: "b", To: "a", Buckets: 1})
	if cu.Status != StatusWrongConfig || len(cu.Entries) != 0 {
		t.Errorf("catch-up of another configuration: status %v, %d entries", cu.Status, len(cu.Entries))
	}
	if got := f.a.Stats().WrongConfig; got != 2 {
		t.Errorf("WrongConfig = %d, want 2", got)
	}
}

func TestAcceptorQuarantinedAnswersNoVote(t *testing.T) {
	f := newAccFixture(t)
	f.clock.advance(accQuarantine - time.Nanosecond)
	resp := f.do("p",
		Op{Kind: OpPrepare, Key: "k", Ballot: bal(1, "p")},
		Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: grantTo("p", 1, bal(1, "p"))},
		Op{Kind: OpPeek, Key: "k"})
	if resp.Status != StatusRecovering {
		t.Fatalf("status %v, want %v", resp.Status, StatusRecovering)
	}
	if len(resp.Results) != 3 {
		t.Fatalf("%d results, want one per operation", len(resp.Results))
	}
	for i, r := range resp.Results {
		mustRefuse(t, fmt.Sprintf("operation %d", i), r, ReasonNoVote)
	}
	if resp.Inc != accInc {
		t.Errorf("Inc = %d, want %d: the proposer learns the new incarnation from any answer", resp.Inc, accInc)
	}
	if f.a.Keys() != 0 {
		t.Errorf("a quarantined acceptor created %d registers", f.a.Keys())
	}
	cu := f.a.HandleCatchUp(&CatchUpRequest{Config: f.m.ID, From: "b", To: "a", Buckets: 1})
	if cu.Status != StatusRecovering || len(cu.Entries) != 0 {
		t.Errorf("catch-up from a quarantined acceptor: status %v, %d entries", cu.Status, len(cu.Entries))
	}
}

// A restarted acceptor learns the other voters' lease horizons at its
// start, not only once its quarantine is over: the voter that knows a
// lease longer than this life's MaxTTL may restart itself meanwhile and
// forget it (soak seed 706611 with 3 voters: n1 restarted under a lowered
// TTL, n2 that had accepted its 1 s lease with it restarted 220 ms later,
// and n1 voted 250 ms after its start while the lease ran on).
func TestAcceptorQuarantinedLearnsHorizonsAtItsStart(t *testing.T) {
	f := newAccFixture(t)
	start := f.clock.Now()
	long := 40 * accQuarantine
	asked := map[NodeID]bool{}
	for _, r := range f.a.Ready().CatchUps {
		asked[r.To] = true
		if r.To == "b" { // b knows the longer lease; c does not answer
			f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: "b", To: "a", Status: StatusOK, Bucket: r.Bucket, Horizon: long})
		}
	}
	if !asked["b"] || !asked["c"] {
		t.Fatalf("asked %v at its start, want b and c", asked)
	}
	// c is asked again, b not.
	f.clock.advance(accRetry)
	f.a.Tick()
	var again []NodeID
	for _, r := range f.a.Ready().CatchUps {
		again = append(again, r.To)
	}
	if !slices.Equal(again, []NodeID{"c"}) {
		t.Errorf("asked %v again after the retry interval, want [c]", again)
	}
	// b restarts and forgets; the catch-up after the quarantine hears
	// nothing longer, and the acceptor still waits for b's lease.
	f.clock.advance(accQuarantine)
	f.a.Tick()
	for _, r := range f.a.Ready().CatchUps {
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: r.To, To: "a", Status: StatusOK, Bucket: r.Bucket})
	}
	if got := f.a.Recovery().LiveFrom; got < start+long {
		t.Errorf("may vote from %v, before the %v lease b reported at its start could end (%v)", got, long, start+long)
	}
	if f.a.State() == Live {
		t.Errorf("live %v after its start, within the %v lease b reported", f.clock.Now()-start, long)
	}
}

func TestAcceptorQuarantineEndsOnItsOwnClock(t *testing.T) {
	f := newAccFixture(t)
	start := f.clock.Now()
	// Quarantined, it asks only for the others' lease horizons (no
	// bucket); once both answered, its next tick is the quarantine's end.
	for _, r := range f.a.Ready().CatchUps {
		if r.Buckets != 0 || r.Bucket != horizonBucket {
			t.Fatalf("asked for registers during quarantine: %+v", r)
		}
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: r.To, To: "a", Status: StatusOK, Bucket: r.Bucket})
	}
	if at, ok := f.a.NextTick(); !ok || at != start+accQuarantine {
		t.Fatalf("NextTick = %v %v, want %v", at, ok, start+accQuarantine)
	}
	f.clock.advance(accQuarantine - time.Nanosecond)
	f.a.Tick()
	if f.a.State() != Quarantined {
		t.Fatalf("state %v a nanosecond before the quarantine ends", f.a.State())
	}
	if rd := f.a.Ready(); len(rd.CatchUps) != 0 {
		t.Fatalf("asked again during quarantine, all having answered: %v", rd.CatchUps)
	}
	f.clock.advance(time.Nanosecond)
	f.a.Tick()
	if f.a.State() != CatchingUp {
		t.Fatalf("state %v when the quarantine ends, want %v", f.a.State(), CatchingUp)
	}
	// It asks every other voter, never itself, for the first bucket.
	var to []NodeID
	for _, r := range f.a.Ready().CatchUps {
		if r.Config != f.m.ID || r.From != "a" || r.Bucket != 0 || r.Buckets != 2 {
			t.Errorf("catch-up request %+v", r)
		}
		to = append(to, r.To)
	}
	if !slices.Equal(to, []NodeID{"b", "c"}) {
		t.Errorf("asked %v, want [b c]", to)
	}
	// Still no vote while catching up.
	if resp := f.do("p", Op{Kind: OpPrepare, Key: "k", Ballot: bal(1, "p")}); resp.Status != StatusRecovering {
		t.Errorf("status %v while catching up, want %v", resp.Status, StatusRecovering)
	}
	// A peer that does not answer is asked again after RetryInterval, for
	// the same bucket.
	f.clock.advance(accRetry)
	f.a.Tick()
	if n := len(f.a.Ready().CatchUps); n != 2 {
		t.Errorf("%d catch-up requests after the retry interval, want 2", n)
	}
}

// answerCatchUp answers every catch-up request of f's acceptor addressed to
// one of peers with an empty bucket, until those peers are done.
func answerCatchUp(f *accFixture, reqs []CatchUpRequest, peers ...NodeID) []CatchUpRequest {
	var rest []CatchUpRequest
	for len(reqs) > 0 {
		req := reqs[0]
		reqs = reqs[1:]
		if !slices.Contains(peers, req.To) {
			rest = append(rest, req)
			continue
		}
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: req.To, To: "a", Inc: 1,
			Status: StatusOK, Bucket: req.Bucket})
		reqs = append(reqs, f.a.Ready().CatchUps...)
	}
	return rest
}

func TestAcceptorGoesLiveAfterMajorityOfOthersCaughtUp(t *testing.T) {
	cases := []struct {
		voters []NodeID
		notYet []NodeID // done, yet not enough
		enough NodeID   // the one that makes a majority of the configuration
	}{
		// 3 voters: a majority is 2, and only the others count, so both.
		{[]NodeID{"a", "b", "c"}, []NodeID{"b"}, "c"},
		// 5 voters: 3 of the 4 others; e is never heard from.
		{[]NodeID{"a", "b", "c", "d", "e"}, []NodeID{"b", "c"}, "d"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d voters", len(tc.voters)), func(t *testing.T) {
			f := newAccFixture(t, tc.voters...)
			f.clock.advance(accQuarantine)
			f.a.Tick()
			reqs := answerCatchUp(f, f.a.Ready().CatchUps, tc.notYet...)
			if f.a.State() != CatchingUp {
				t.Fatalf("state %v after %v caught up, want still catching up", f.a.State(), tc.notYet)
			}
			// An answer for a bucket it did not ask for counts for nothing.
			f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: tc.enough, To: "a", Status: StatusOK, Bucket: 1})
			// Nor does an answer of another configuration.
			f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID + 1, From: tc.enough, To: "a", Status: StatusOK, Bucket: 0})
			if f.a.State() != CatchingUp {
				t.Fatalf("state %v after stray answers, want still catching up", f.a.State())
			}
			answerCatchUp(f, reqs, tc.enough)
			if f.a.State() != Live || f.a.FloorOnly() {
				t.Fatalf("state %v floorOnly %v, want live with history", f.a.State(), f.a.FloorOnly())
			}
			if resp := f.do("p", Op{Kind: OpPrepare, Key: "k", Ballot: bal(1, "p")}); !resp.Results[0].OK {
				t.Errorf("a live acceptor refused a prepare: %+v", resp.Results[0])
			}
		})
	}
}

func TestAcceptorGoesLiveFloorOnlyWhenMajorityRecovering(t *testing.T) {
	recovering := func(f *accFixture, from NodeID) {
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: from, To: "a", Status: StatusRecovering})
	}
	t.Run("3 voters: both others recovering", func(t *testing.T) {
		f := newAccFixture(t)
		f.clock.advance(accQuarantine)
		f.a.Tick()
		recovering(f, "b")
		recovering(f, "c")
		if f.a.State() != Live || !f.a.FloorOnly() {
			t.Fatalf("state %v floorOnly %v, want live on the floor only", f.a.State(), f.a.FloorOnly())
		}
	})
	t.Run("3 voters: a majority recovering waits for every voter to answer", func(t *testing.T) {
		// a and b both lost their state: no set of two voters that a and
		// b both need can answer in full. But c, not heard yet, may be of
		// a newer configuration that a and b missed (they restarted with
		// an old voter list): only once c answers is this a full restart.
		f := newAccFixture(t)
		f.clock.advance(accQuarantine)
		f.a.Tick()
		recovering(f, "b")
		if f.a.State() != CatchingUp {
			t.Fatalf("state %v before c answered, want still catching up", f.a.State())
		}
		doneFrom(f, "c")
		if f.a.State() != Live || !f.a.FloorOnly() {
			t.Fatalf("state %v floorOnly %v, want live on the floor only", f.a.State(), f.a.FloorOnly())
		}
	})
	t.Run("5 voters: a majority recovering, every voter answered", func(t *testing.T) {
		f := newAccFixture(t, "a", "b", "c", "d", "e")
		f.clock.advance(accQuarantine)
		f.a.Tick()
		recovering(f, "b")
		recovering(f, "d")
		doneFrom(f, "e")
		if f.a.State() != CatchingUp {
			t.Fatalf("state %v before c answered, want still catching up", f.a.State())
		}
		doneFrom(f, "c")
		if f.a.State() != Live || !f.a.FloorOnly() {
			t.Fatalf("state %v floorOnly %v, want live on the floor only", f.a.State(), f.a.FloorOnly())
		}
	})
	t.Run("an answer of a newer configuration is adopted instead", func(t *testing.T) {
		f := newAccFixture(t)
		f.clock.advance(accQuarantine)
		f.a.Tick()
		recovering(f, "b")
		newer := f.m.Next([]NodeID{"a", "b", "c", "d"}, true, 0)
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: newer.ID, From: "c", To: "a", Status: StatusWrongConfig, Members: &newer})
		if !f.a.Membership().Equal(newer) || f.a.State() != CatchingUp {
			t.Fatalf("configuration %v state %v, want the newer one and a fresh catch-up", f.a.Membership(), f.a.State())
		}
	})
}

// doneFrom answers every bucket of a's catch-up from peer, empty.
func doneFrom(f *accFixture, peer NodeID) {
	for b := uint32(0); b < 2; b++ {
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.a.Membership().ID, From: peer, To: "a", Inc: 1, Status: StatusOK, Bucket: b})
	}
}

// How many others a restarted voter must catch up from: of n voters with
// majority q, n-q+1 (every accept majority less itself meets that many);
// while a change is pending, that many of the voters before it too, the
// removed one counting.
func TestAcceptorCatchUpNeeds(t *testing.T) {
	t.Run("4 voters: two others", func(t *testing.T) {
		f := newAccFixture(t, "a", "b", "c", "d")
		f.clock.advance(accQuarantine)
		f.a.Tick()
		doneFrom(f, "b")
		if f.a.State() == Live {
			t.Fatal("live after one other of four")
		}
		doneFrom(f, "c")
		if f.a.State() != Live || f.a.FloorOnly() {
			t.Fatalf("state %v floorOnly %v after two others of four, want live", f.a.State(), f.a.FloorOnly())
		}
	})
	t.Run("pending removal: the removed voter counts for the old voters", func(t *testing.T) {
		old := NewMembership(7, "a", "b", "c", "d", "e")
		cur := old.Next([]NodeID{"a", "b", "c", "d"}, true, 0)
		f := newAccFixtureOf(t, "a", cur)
		f.clock.advance(accQuarantine)
		f.a.Tick()
		asked := map[NodeID]bool{}
		for _, req := range f.a.Ready().CatchUps {
			asked[req.To] = true
		}
		if !asked["e"] {
			t.Fatalf("the removed voter e was not asked: %v", asked)
		}
		doneFrom(f, "b")
		doneFrom(f, "c")
		if f.a.State() == Live {
			t.Fatal("live on two others: enough for the four new voters, not for the five old ones")
		}
		doneFrom(f, "e")
		if f.a.State() != Live {
			t.Fatalf("state %v after three of the old voters and two of the new, want live", f.a.State())
		}
	})
}

func TestAcceptorCatchUpMerges(t *testing.T) {
	f := newAccFixture(t)
	f.clock.advance(accQuarantine)
	f.a.Tick()
	kb := grantTo("q", 31, bal(4, "q"))
	// b: promise 7.p, accepted 3.p, epoch 40 seen. c: promise 5.q,
	// accepted 4.q (higher), a grant of epoch 31. "m" only tells an epoch
	// through its value.
	entries := map[NodeID][]Entry{
		"b": {
			{Key: "k", Promise: bal(7, "p"), Accepted: bal(3, "p"), Value: grantTo("p", 30, bal(3, "p")), MaxEpoch: 40},
			{Key: "m", Accepted: bal(1, "p"), Value: Value{Epoch: 50}},
		},
		"c": {
			{Key: "k", Promise: bal(5, "q"), Accepted: bal(4, "q"), Value: kb, MaxEpoch: 31},
		},
	}
	for reqs := f.a.Ready().CatchUps; len(reqs) > 0; reqs = append(reqs[1:], f.a.Ready().CatchUps...) {
		req := reqs[0]
		var in []Entry
		for _, e := range entries[req.To] {
			if bucketOf(e.Key, req.Buckets) == req.Bucket {
				in = append(in, e)
			}
		}
		f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: req.To, To: "a", Status: StatusOK,
			Bucket: req.Bucket, Entries: in})
	}
	if f.a.State() != Live {
		t.Fatalf("state %v after both peers answered, want live", f.a.State())
	}
	got := f.peek()
	if got.Promised != bal(7, "p") {
		t.Errorf("promise %v, want the highest, 7.p", got.Promised)
	}
	if got.Accepted != bal(4, "q") || got.Value != kb {
		t.Errorf("accepted %v %v, want the highest ballot's value, 4.q %v", got.Accepted, got.Value, kb)
	}
	if got.MaxEpoch != 40 {
		t.Errorf("MaxEpoch %d, want the highest, 40", got.MaxEpoch)
	}
	if got.Remaining != 0 {
		t.Errorf("Remaining %v: a learned grant must run no timer here", got.Remaining)
	}
	m := f.one("observer", Op{Kind: OpPeek, Key: "m"})
	if m.MaxEpoch != 50 {
		t.Errorf("MaxEpoch of m is %d, want 50 (its value's epoch)", m.MaxEpoch)
	}
	mustRefuse(t, "prepare below the learned promise", f.prepare(bal(6, "z")), ReasonPromised)
	// No timer, so an acquire's IfFree prepare is not held off here: the
	// voters that accepted the grant time it.
	mustOK(t, "IfFree prepare above the promise",
		f.one("z", Op{Kind: OpPrepare, Key: "k", Ballot: bal(8, "z"), IfFree: true}))
}

func TestAcceptorCatchUpServesEachBucketOnce(t *testing.T) {
	f := newLiveAcceptor(t)
	keys := []string{"k", "l", "m", "n", "o", "p", "q"}
	for i, k := range keys {
		r := f.one("p", Op{Kind: OpAccept, Key: k, Ballot: bal(1, "p"), Inc: accInc, Value: Value{Epoch: uint64(i + 1)}})
		mustOK(t, "accept "+k, r)
	}
	var got []string
	for b := uint32(0); b < 3; b++ {
		resp := f.a.HandleCatchUp(&CatchUpRequest{Config: f.m.ID, From: "b", To: "a", Bucket: b, Buckets: 3})
		if resp.Status != StatusOK || resp.Bucket != b || resp.To != "b" || resp.Inc != accInc {
			t.Fatalf("bucket %d: %+v", b, resp)
		}
		for _, e := range resp.Entries {
			if bucketOf(e.Key, 3) != b {
				t.Errorf("key %q served in bucket %d", e.Key, b)
			}
			got = append(got, e.Key)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, keys) {
		t.Errorf("served %v, want every key once: %v", got, keys)
	}
}

// watchPrepare is the prepare of an acquire that waits: IfFree and Watch.
func watchPrepare(counter uint64, from NodeID) Op {
	return Op{Kind: OpPrepare, Key: "k", Ballot: bal(counter, from), IfFree: true, Watch: true}
}

// notified lists the proposers the acceptor's Ready tells that "k" is free.
func notified(t testing.TB, a *Acceptor) []NodeID {
	t.Helper()
	var to []NodeID
	for _, n := range a.Ready().Notifies {
		if !slices.Equal(n.Keys, []string{"k"}) || n.From != "a" || n.Config != 7 {
			t.Errorf("notify %+v", n)
		}
		to = append(to, n.To)
	}
	return to
}

// heldWithWatchers returns an acceptor where p holds "k" (granted at 1.p,
// 2.p promised) and w1, w2, w3 wait, in that order.
func heldWithWatchers(t testing.TB) *accFixture {
	f := newLiveAcceptor(t)
	mustOK(t, "grant", f.acceptNext(bal(1, "p"), grantTo("p", 30, bal(1, "p")), bal(2, "p")))
	for i, w := range []NodeID{"w1", "w2", "w3"} {
		mustRefuse(t, "watch of "+string(w), f.one(w, watchPrepare(uint64(3+i), w)), ReasonHeld)
	}
	if n := notified(t, f.a); len(n) != 0 {
		t.Fatalf("notified %v while the lease is live", n)
	}
	return f
}

// release frees "k" from p at its promised ballot 2.p.
func release(t testing.TB, f *accFixture) {
	t.Helper()
	mustOK(t, "release", f.accept(bal(2, "p"), Value{Epoch: 30}))
}

// A waiter joins the line at every voter its prepare reaches, whether the
// key is held there or not (it may be held at the others): every voter
// then has the same waiters, and tells the same one at a release. One
// that took the key would have left the line with its grant.
func TestAcceptorWatchQueuesEveryWaitingPrepare(t *testing.T) {
	f := newLiveAcceptor(t)
	mustOK(t, "watch prepare on a free key", f.one("w1", watchPrepare(1, "w1")))
	mustOK(t, "grant to another", f.acceptNext(bal(2, "p"), grantTo("p", 30, bal(2, "p")), bal(3, "p")))
	mustOK(t, "release", f.accept(bal(3, "p"), Value{Epoch: 30}))
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Errorf("notified %v, want [w1]: it waited here, on a key free here", n)
	}
	// Its own grant takes a waiter out of the line.
	f2 := newLiveAcceptor(t)
	mustOK(t, "watch prepare", f2.one("w1", watchPrepare(1, "w1")))
	mustOK(t, "grant to the waiter", f2.acceptNext(bal(1, "w1"), grantTo("w1", 30, bal(1, "w1")), bal(2, "w1")))
	mustOK(t, "release", f2.accept(bal(2, "w1"), Value{Epoch: 30}))
	if n := notified(t, f2.a); len(n) != 0 {
		t.Errorf("notified %v: the waiter took the key and left the line", n)
	}
}

func TestAcceptorReleaseNotifiesFirstWatcherOnly(t *testing.T) {
	f := heldWithWatchers(t)
	release(t, f)
	// FIFO hand-off: only the first in line is told, so that waiters take
	// turns instead of all fighting for the key.
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Fatalf("notified %v, want [w1]", n)
	}
	if n := notified(t, f.a); len(n) != 0 {
		t.Errorf("Ready repeats notifies: %v", n)
	}
}

func TestAcceptorHandoffPassesToNextWatcherAfterGrace(t *testing.T) {
	f := heldWithWatchers(t)
	release(t, f)
	notified(t, f.a) // w1
	// w1 does nothing. The next in line is told a grace later, not before.
	f.clock.advance(accGrace - time.Nanosecond)
	f.a.Tick()
	if n := notified(t, f.a); len(n) != 0 {
		t.Fatalf("notified %v before the hand-off grace ran out", n)
	}
	f.clock.advance(time.Nanosecond)
	f.a.Tick()
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w2"}) {
		t.Fatalf("notified %v after the grace, want [w2]", n)
	}
	// w2 takes the key within its grace: w3 is not told. (A prepare alone
	// does not end the hand-off: the key stays reserved for the waiters
	// until one of them is granted it, or the grace ends.)
	mustOK(t, "w2's prepare", f.one("w2", watchPrepare(10, "w2")))
	mustOK(t, "w2's grant", f.one("w2", Op{Kind: OpAccept, Key: "k", Ballot: bal(10, "w2"), Inc: accInc, Value: grantTo("w2", 31, bal(10, "w2"))}))
	f.clock.advance(accGrace)
	f.a.Tick()
	if n := notified(t, f.a); len(n) != 0 {
		t.Errorf("notified %v although w2 came for the key", n)
	}
}

// The waiter told first keeps its place in line when another waiter (told
// first by another voter) takes the key: it is told again at the next
// release, not sent to the back.
func TestAcceptorToldWaiterKeepsItsTurn(t *testing.T) {
	f := heldWithWatchers(t)
	release(t, f)
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Fatalf("notified %v, want [w1]", n)
	}
	mustOK(t, "w2's grant", f.one("w2", Op{Kind: OpAccept, Key: "k", Ballot: bal(10, "w2"), Inc: accInc,
		Value: grantTo("w2", 31, bal(10, "w2")), Next: bal(11, "w2")}))
	mustOK(t, "w2's release", f.one("w2", Op{Kind: OpAccept, Key: "k", Ballot: bal(11, "w2"), Inc: accInc, Value: Value{Epoch: 31}}))
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Fatalf("notified %v at w2's release, want [w1] again", n)
	}
	// w1 lets its grace pass with the key free here: it had its turn.
	f.clock.advance(accGrace)
	f.a.Tick()
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w3"}) {
		t.Fatalf("notified %v after w1's grace, want [w3]", n)
	}
}

// While the key is handed to the waiters, the node the register names as
// holder is not held back: a grant of an earlier round of its own acquire,
// written back by another node's read, is the key's value, and only that
// node can take it up or free it.
func TestAcceptorHandoffLetsTheRegistersHolderThrough(t *testing.T) {
	f := heldWithWatchers(t)
	release(t, f)
	mustOK(t, "a read's write-back of x's grant", f.accept(bal(20, "r"), grantTo("x", 31, bal(15, "x"))))
	mustOK(t, "x's prepare", f.one("x", Op{Kind: OpPrepare, Key: "k", Ballot: bal(21, "x"), IfFree: true}))
	mustRefuse(t, "y's prepare", f.one("y", Op{Kind: OpPrepare, Key: "k", Ballot: bal(22, "y"), IfFree: true}), ReasonHandoff)
}

func TestAcceptorHandoffRefusesOtherGrants(t *testing.T) {
	cases := []struct {
		name   string
		before func(f *accFixture)
		holder NodeID
		wantOK bool
	}{
		{"the releasing node barging in is refused", nil, "p", false},
		{"a node that was not waiting is refused", nil, "x", false},
		{"the waiter told is granted", nil, "w1", true},
		// Another acceptor may have told w2 first: any node that was
		// waiting may take the key, or two acceptors telling two waiters
		// would each refuse the other's grant until the grace ran out.
		{"another waiter in line is granted", nil, "w2", true},
		{"a node that started waiting after the hand-off is refused", func(f *accFixture) {
			mustRefuse(f.t, "x's watch prepare", f.one("x", Op{Kind: OpPrepare, Key: "k", Ballot: bal(10, "x"), Watch: true, IfFree: true}), ReasonHandoff)
		}, "x", false},
		{"anyone is granted after the grace", func(f *accFixture) { f.clock.advance(accGrace) }, "p", true},
		{"anyone is granted once the waiter came", func(f *accFixture) {
			mustOK(f.t, "w1's prepare", f.one("w1", watchPrepare(10, "w1")))
			mustOK(f.t, "w1's grant", f.one("w1", Op{Kind: OpAccept, Key: "k", Ballot: bal(10, "w1"), Inc: accInc, Value: grantTo("w1", 31, bal(10, "w1"))}))
			mustOK(f.t, "w1's release", f.one("w1", Op{Kind: OpAccept, Key: "k", Ballot: bal(11, "w1"), Inc: accInc, Value: Value{Epoch: 31}}))
			f.clock.advance(accGrace) // w2's hand-off, which that release started, ends
		}, "p", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := heldWithWatchers(t)
			release(t, f)
			if tc.before != nil {
				tc.before(f)
			}
			b := bal(20, tc.holder)
			r := f.one(tc.holder, Op{Kind: OpAccept, Key: "k", Ballot: b, Inc: accInc, Value: grantTo(tc.holder, 31, b)})
			if tc.wantOK {
				mustOK(t, "grant", r)
			} else {
				mustRefuse(t, "grant", r, ReasonHandoff)
			}
		})
	}
	t.Run("an acquire of a node that was not waiting promises nothing", func(t *testing.T) {
		f := heldWithWatchers(t)
		release(t, f)
		before := f.peek().Promised
		mustRefuse(t, "p's prepare", f.one("p", Op{Kind: OpPrepare, Key: "k", Ballot: bal(50, "p"), IfFree: true}), ReasonHandoff)
		if got := f.peek().Promised; got != before {
			t.Errorf("promise moved from %v to %v on a refused prepare", before, got)
		}
		mustOK(t, "a read's prepare (not an acquire)", f.one("r", Op{Kind: OpPrepare, Key: "k", Ballot: bal(51, "r")}))
	})
	t.Run("a write-back of the free value is not a grant", func(t *testing.T) {
		f := heldWithWatchers(t)
		release(t, f)
		mustOK(t, "read's write-back", f.accept(bal(20, "r"), Value{Epoch: 30}))
	})
}

func TestAcceptorLeaseExpiryNotifiesWatcher(t *testing.T) {
	// One waiter (several are TestAcceptorLeaseEndWakesWatchersInTurn).
	f := newLiveAcceptor(t)
	mustOK(t, "grant", f.acceptNext(bal(1, "p"), grantTo("p", 30, bal(1, "p")), bal(2, "p")))
	mustRefuse(t, "w1's watch", f.one("w1", watchPrepare(3, "w1")), ReasonHeld)
	// A renewal half way moves the end of the lease; the watcher waits on.
	f.clock.advance(accTTL / 2)
	mustOK(t, "renewal", f.acceptNext(bal(2, "p"), grantTo("p", 30, bal(2, "p")), bal(3, "p")))
	f.clock.advance(accTTL / 2)
	f.a.Tick()
	if n := notified(t, f.a); len(n) != 0 {
		t.Fatalf("notified %v when the first lease period ended, but it was renewed", n)
	}
	if at, ok := f.a.NextTick(); !ok || at != f.clock.Now()+accTTL/2 {
		t.Errorf("NextTick = %v %v, want the renewed lease's end %v", at, ok, f.clock.Now()+accTTL/2)
	}
	f.clock.advance(accTTL/2 - time.Nanosecond)
	f.a.Tick()
	if n := notified(t, f.a); len(n) != 0 {
		t.Fatalf("notified %v a nanosecond before the lease ends", n)
	}
	f.clock.advance(time.Nanosecond)
	f.a.Tick()
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Fatalf("notified %v when the lease ended, want [w1]", n)
	}
}

// TestAcceptorLeaseEndWakesWatchersInTurn: the FIFO hand-off holds when a
// lease ends by expiry rather than by a release. Every watch prepare queues
// its own expiry entry; only the first to fire may wake a waiter, so at a
// lease's end the first in line alone is told (not every waiter at once, the
// rush the hand-off prevents), and a hand-off started by a release shortly
// before the lease would have ended keeps its grace. (Found as a bug: each
// entry used to wake one more waiter.)
func TestAcceptorLeaseEndWakesWatchersInTurn(t *testing.T) {
	t.Run("expiry tells only the first waiter", func(t *testing.T) {
		f := heldWithWatchers(t) // p holds from t0 for accTTL; w1, w2, w3 wait
		f.clock.advance(accTTL)
		f.a.Tick()
		n := notified(t, f.a)
		// w1 comes for the key within its grace, as told.
		mustOK(t, "w1's prepare", f.one("w1", watchPrepare(10, "w1")))
		r := f.accept(bal(10, "w1"), grantTo("w1", 31, bal(10, "w1")))
		if !slices.Equal(n, []NodeID{"w1"}) || !r.OK {
			t.Errorf("at the lease's end: notified %v, want [w1]; then w1's grant ok=%v reason %d, want ok",
				n, r.OK, r.Reason)
		}
	})
	t.Run("the lease's end does not cut a hand-off's grace short", func(t *testing.T) {
		f := heldWithWatchers(t)
		// p releases a little before its timer here would have run out.
		f.clock.advance(accTTL - accGrace/2)
		release(t, f)
		if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
			t.Fatalf("release notified %v, want [w1]", n)
		}
		f.clock.advance(accGrace / 2) // the lease's old end; w1's grace still runs
		f.a.Tick()
		n := notified(t, f.a)
		mustOK(t, "w1's prepare", f.one("w1", watchPrepare(10, "w1")))
		r := f.accept(bal(10, "w1"), grantTo("w1", 31, bal(10, "w1")))
		if len(n) != 0 || !r.OK {
			t.Errorf("within w1's grace: notified %v, want nobody; then w1's grant ok=%v reason %d, want ok",
				n, r.OK, r.Reason)
		}
	})
}

func TestAcceptorNewGrantLeavesWatchers(t *testing.T) {
	// w1 is told, takes the key: it waits no more, and when it releases,
	// w2 is next.
	f := heldWithWatchers(t)
	release(t, f)
	notified(t, f.a)
	mustOK(t, "w1's prepare", f.one("w1", watchPrepare(10, "w1")))
	mustOK(t, "w1's grant", f.acceptNext(bal(10, "w1"), grantTo("w1", 31, bal(10, "w1")), bal(11, "w1")))
	mustOK(t, "w1's release", f.accept(bal(11, "w1"), Value{Epoch: 31}))
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w2"}) {
		t.Fatalf("notified %v after w1's release, want [w2]", n)
	}
}

// A prepare equal to the acceptor's promise is answered only when it is a
// copy of the prepare that made the promise (the same round); any other
// prepare at that ballot is a proposer using one ballot twice, and is
// refused (design.md R5). A ballot promised through an accept's Next is
// accepted at, never prepared.
func TestAcceptorEqualPrepareOnlyAsDuplicate(t *testing.T) {
	f := newLiveAcceptor(t)
	b := bal(5, "p")
	mustOK(t, "first prepare", f.raw("p", Op{ID: 7, Kind: OpPrepare, Key: "k", Ballot: b}))
	mustOK(t, "a duplicate of it (same round)", f.raw("p", Op{ID: 7, Kind: OpPrepare, Key: "k", Ballot: b}))
	mustRefuse(t, "another round at the same ballot", f.raw("p", Op{ID: 8, Kind: OpPrepare, Key: "k", Ballot: b}), ReasonPromised)

	next := bal(6, "p")
	mustOK(t, "accept promising the next ballot", f.acceptNext(b, grantTo("p", 1, b), next))
	mustRefuse(t, "a prepare at the ballot promised by Next", f.raw("p", Op{ID: 9, Kind: OpPrepare, Key: "k", Ballot: next}), ReasonPromised)
	mustOK(t, "an accept at the ballot promised by Next", f.accept(next, grantTo("p", 1, b)))
}

// A waiter that leaves (its acquire ended, or it declines a key it was told
// of) leaves the acceptor's line: the next waiter is told at once, not a
// grace later (design.md R30).
func TestAcceptorUnwatchPassesTheKeyOnAtOnce(t *testing.T) {
	f := heldWithWatchers(t) // w1, w2, w3 wait
	mustOK(t, "w2 leaves the line", f.one("w2", Op{Kind: OpUnwatch, Key: "k"}))
	release(t, f)
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w1"}) {
		t.Fatalf("notified %v, want [w1]", n)
	}
	mustOK(t, "w1 declines", f.one("w1", Op{Kind: OpUnwatch, Key: "k"}))
	if n := notified(t, f.a); !slices.Equal(n, []NodeID{"w3"}) {
		t.Fatalf("after w1 declined, notified %v, want [w3] at once (w2 left)", n)
	}
	mustOK(t, "an unwatch of a key never seen", f.one("w1", Op{Kind: OpUnwatch, Key: "other"}))
}

// A recovering acceptor says what it waits for: its quarantine's end, then
// the voters that have not answered its catch-up.
func TestAcceptorRecoveryReportsWhatItWaitsFor(t *testing.T) {
	f := newAccFixture(t, "a", "b", "c")
	r := f.a.Recovery()
	if r.LiveFrom != f.clock.Now()+accQuarantine || len(r.Waiting) != 0 {
		t.Fatalf("quarantined: %+v, want LiveFrom = start + quarantine %v, nobody asked yet", r, accQuarantine)
	}
	f.clock.advance(accQuarantine)
	f.a.Tick()
	if r := f.a.Recovery(); !slices.Equal(r.Waiting, []NodeID{"b", "c"}) {
		t.Fatalf("catching up: waiting for %v, want [b c]", r.Waiting)
	}
	f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: "b", To: "a", Status: StatusRecovering})
	if r := f.a.Recovery(); !slices.Equal(r.Waiting, []NodeID{"c"}) || !slices.Equal(r.Recovering, []NodeID{"b"}) {
		t.Fatalf("after b said it recovers: %+v, want waiting [c], recovering [b]", r)
	}
}

// A register reports at least the acceptor's epoch floor, however the floor
// rose after the register was made: by a catch-up answer that came after
// another had made it, or by a settled configuration's floor. A proposer
// takes its next epoch above what a majority reports, so a register that
// reported less let voters that all joined after the floor rose grant a
// token below an earlier one (soak seed 201622 with 3 voters).
func TestAcceptorRegistersReportTheEpochFloor(t *testing.T) {
	f := newAccFixture(t)
	f.clock.advance(accQuarantine)
	f.a.Tick()
	// b's answer makes k's register (epoch 40); c's answer, later, raises
	// the floor to 900.
	for reqs := f.a.Ready().CatchUps; len(reqs) > 0; reqs = append(reqs[1:], f.a.Ready().CatchUps...) {
		req := reqs[0]
		resp := &CatchUpResponse{Config: f.m.ID, From: req.To, To: "a", Status: StatusOK, Bucket: req.Bucket}
		switch req.To {
		case "b":
			if bucketOf("k", req.Buckets) == req.Bucket {
				resp.Entries = []Entry{{Key: "k", Promise: bal(7, "p"), Accepted: bal(3, "p"),
					Value: grantTo("p", 30, bal(3, "p")), MaxEpoch: 40}}
			}
		case "c":
			resp.EpochFloor = 900
		}
		f.a.HandleCatchUpResponse(resp)
	}
	if f.a.State() != Live {
		t.Fatalf("state %v after both peers answered, want live", f.a.State())
	}
	if got := f.peek().MaxEpoch; got < 900 {
		t.Errorf("after catch-up: k reports epoch %d, below the floor 900 a voter reported", got)
	}
	// A settled configuration raises the floor again.
	m := f.m.Next(f.m.Voters, false, 0)
	m.EpochFloor = 2000
	if !f.a.Adopt(m) {
		t.Fatalf("the acceptor did not adopt configuration %d", m.ID)
	}
	f.m = m
	if got := f.peek().MaxEpoch; got < 2000 {
		t.Errorf("after adopting a configuration with epoch floor 2000: k reports epoch %d", got)
	}
	if got := f.one("z", Op{Kind: OpPrepare, Key: "k", Ballot: bal(20, "z")}).MaxEpoch; got < 2000 {
		t.Errorf("a prepare hears epoch %d, below the floor 2000", got)
	}
}

// adopt moves f's acceptor to m, which must be newer.
func (f *accFixture) adopt(m Membership) {
	f.t.Helper()
	if !f.a.Adopt(m) {
		f.t.Fatalf("configuration %d not adopted", m.ID)
	}
	f.m = m
}

// While a change is pending a voter drops no register, even one every
// voter agreed to forget (see acceptor_registers.go); once the change is
// settled it does.
func TestAcceptorForgetsNothingWhileAChangeIsPending(t *testing.T) {
	f := newLiveAcceptor(t)
	b := bal(5, "p")
	mustOK(t, "prepare", f.prepare(b))
	mustOK(t, "accept free", f.accept(b, Value{Epoch: 9}))
	pending := f.m.Next([]NodeID{"a", "b"}, true, 0) // removes c
	f.adopt(pending)
	mustOK(t, "forget while pending", f.one("p", Op{Kind: OpForget, Key: "k", Ballot: b}))
	if f.a.regs["k"] == nil {
		t.Fatalf("k was dropped while the removal of c was pending")
	}
	f.adopt(pending.Next(pending.Voters, false, 0))
	mustOK(t, "forget once settled", f.one("p", Op{Kind: OpForget, Key: "k", Ballot: b}))
	if f.a.regs["k"] != nil {
		t.Fatalf("k was kept after the change was settled")
	}
	if _, e := f.a.Floors(); e < 9 {
		t.Fatalf("epoch floor %d after dropping k at epoch 9", e)
	}
}

// A settled configuration's epoch floor (the epochs of keys the voters
// before it dropped) holds for the registers a voter made before it knew
// it: a voter that joined while the change was pending made them from a
// floor of 0.
func TestAcceptorSettledEpochFloorRaisesItsRegisters(t *testing.T) {
	f := newLiveAcceptor(t)
	mustOK(t, "prepare", f.prepare(bal(5, "p")))
	if got := f.peek().MaxEpoch; got != 0 {
		t.Fatalf("a new register reports epoch %d, want 0", got)
	}
	next := f.m.Next(f.m.Voters, false, 0)
	next.EpochFloor = 1000
	f.adopt(next)
	if got := f.peek().MaxEpoch; got < 1000 {
		t.Fatalf("after a configuration with epoch floor 1000 the register reports epoch %d", got)
	}
}

// A sweep looks at a bounded stretch of the registers, and while what is
// over MaxRegisters is in use (live leases) sweeps come a retry interval
// apart, not an eighth of one: walking 100,000 held registers at every
// sweep kept voters too busy to answer renewals (bench renewal at 100,000
// leases lost most of them). A free register behind the held ones is still
// found, a few sweeps later.
func TestAcceptorSweepOverHeldRegistersIsBounded(t *testing.T) {
	clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
	m := NewMembership(7, "a", "b", "c")
	cfg := newAccConfig("a", m, clock)
	cfg.MaxRegisters = 10
	a, err := NewAcceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := makeLive(&accFixture{t: t, id: "a", a: a, clock: clock, m: m})
	// 2,000 held keys (of a's bucket or not), then one free key of a's
	// bucket, last in line.
	const held = 2000
	for i := range held {
		k := fmt.Sprintf("h%d", i)
		mustOK(t, "grant "+k, f.one("p", Op{Kind: OpAccept, Key: k, Ballot: bal(1, "p"), Inc: accInc,
			Value: grantTo("p", uint64(i+1), bal(1, "p"))}))
	}
	var free string
	for i := 0; free == ""; i++ {
		if k := fmt.Sprintf("f%d", i); bucketOf(k, 3) == 0 {
			free = k
		}
	}
	mustOK(t, "free "+free, f.one("p", Op{Kind: OpAccept, Key: free, Ballot: bal(1, "p"), Inc: accInc, Value: Value{Epoch: 9999}}))
	f.clock.advance(time.Second)
	first := a.SweepCandidates(8)
	if slices.Contains(first, free) {
		t.Fatalf("the first sweep reached the key behind %d held ones: it looked at all of them", held)
	}
	at, ok := a.NextTick()
	if !ok || at < f.clock.now+cfg.RetryInterval {
		t.Errorf("after a sweep that found nothing, the next is due in %v, want a retry interval (%v)", at-f.clock.now, cfg.RetryInterval)
	}
	for sweeps := 1; !slices.Contains(first, free); sweeps++ {
		if sweeps > 2*held/minSweepLook+2 {
			t.Fatalf("no sweep in %d found the free key", sweeps)
		}
		f.clock.advance(cfg.RetryInterval)
		first = a.SweepCandidates(8)
	}
}

// The registers are kept in a list by last use, linked through the
// registers: a sweep over the cap offers the ones used longest ago, a
// register used again goes to the back, a dropped one leaves the list, and
// the list always holds exactly the registers there are.
func TestAcceptorRegistersByLastUse(t *testing.T) {
	clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
	m := NewMembership(7, "a", "b", "c")
	cfg := newAccConfig("a", m, clock)
	cfg.MaxRegisters, cfg.RegisterIdle = 2, time.Hour
	a, err := NewAcceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := makeLive(&accFixture{t: t, id: "a", a: a, clock: clock, m: m})
	var keys []string // of a's bucket: a sweep of a offers only those
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("k%d", i); bucketOf(k, 3) == 0 {
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		mustOK(t, "free "+k, f.one("p", Op{Kind: OpAccept, Key: k, Ballot: bal(1, "p"), Inc: accInc, Value: Value{Epoch: uint64(i + 1)}}))
		f.clock.advance(time.Millisecond)
	}
	checkLRU := func(when string) {
		t.Helper()
		n := 0
		var prev *register
		for r := a.oldest; r != nil; prev, r = r, r.newer {
			if r.older != prev || a.regs[r.key] != r || (prev != nil && r.usedAt < prev.usedAt) {
				t.Fatalf("%s: the list is broken at %q", when, r.key)
			}
			n++
		}
		if a.newest != prev || n != len(a.regs) {
			t.Fatalf("%s: the list holds %d registers, the acceptor %d", when, n, len(a.regs))
		}
	}
	checkLRU("after the writes")
	mustOK(t, "prepare "+keys[0], f.one("p", Op{ID: 9, Kind: OpPrepare, Key: keys[0], Ballot: bal(2, "p")})) // used again: to the back
	f.clock.advance(time.Millisecond)
	checkLRU("after a prepare")
	got := a.SweepCandidates(2)
	if want := keys[1:3]; !slices.Equal(got, want) {
		t.Fatalf("sweep over the cap offers %v, want the two used longest ago, %v", got, want)
	}
	checkLRU("after a sweep")
	mustOK(t, "forget "+keys[1], f.one("p", Op{Kind: OpForget, Key: keys[1], Ballot: bal(1, "p")}))
	if a.regs[keys[1]] != nil {
		t.Fatalf("%s was not dropped", keys[1])
	}
	checkLRU("after a drop")
	f.clock.advance(cfg.RetryInterval)
	if got, want := a.SweepCandidates(1), keys[3:4]; !slices.Equal(got, want) {
		t.Fatalf("the next sweep offers %v, want %v (the swept ones went to the back)", got, want)
	}
}

// A register keeps a line of waiters only while someone waits or a hand-off
// runs: a waiter that takes the key leaves nothing behind (a node holding
// 100,000 leases, each taken by a waiting acquire, kept a line per
// register before).
func TestAcceptorLetsGoOfEmptyLines(t *testing.T) {
	f := makeLive(newAccFixture(t, "a", "b", "c"))
	b := bal(1, "w")
	mustOK(t, "waiting prepare", f.one("w", Op{ID: 1, Kind: OpPrepare, Key: "k", Ballot: b, Watch: true, IfFree: true}))
	if got := f.a.regs["k"].waiting(); !slices.Equal(got, []NodeID{"w"}) {
		t.Fatalf("after a waiting prepare the line is %v, want [w]", got)
	}
	mustOK(t, "grant", f.one("w", Op{ID: 2, Kind: OpAccept, Key: "k", Ballot: b, Inc: accInc, Value: grantTo("w", 1, b)}))
	if l := f.a.regs["k"].line; l != nil {
		t.Fatalf("after the waiter's grant the register keeps a line %+v", *l)
	}
}

// A request of many operations (a renewal batch) is answered exactly as the
// same operations one request at a time: the look-ahead over a batch's
// registers (Acceptor.warm) only reads. The batch drops a register and makes
// it again, and peeks at keys no register holds, within one look-ahead.
func TestAcceptorBatchAnswersAsOneByOne(t *testing.T) {
	var ops []Op
	add := func(op Op) { op.ID = uint64(len(ops) + 1); ops = append(ops, op) }
	b1, b2, b3, b4 := bal(1, "p"), bal(2, "p"), bal(3, "p"), bal(4, "p")
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		add(Op{Kind: OpAccept, Key: k, Ballot: b1, Inc: accInc, Value: grantTo("p", uint64(i+1), b1), Next: b2})
	}
	for i := range 10 {
		add(Op{Kind: OpPeek, Key: fmt.Sprintf("u%02d", i)})
		add(Op{Kind: OpPrepare, Key: fmt.Sprintf("k%02d", 10+i), Ballot: bal(9, "q"), IfFree: true})
	}
	add(Op{Kind: OpAccept, Key: "k05", Ballot: b2, Inc: accInc, Value: Value{Epoch: 6}, Next: b3})
	add(Op{Kind: OpForget, Key: "k05", Ballot: b2})
	add(Op{Kind: OpAccept, Key: "k05", Ballot: b4, Inc: accInc, Value: grantTo("p", 7, b4)})
	add(Op{Kind: OpPeek, Key: "k05"})

	batch, single := newLiveAcceptor(t), newLiveAcceptor(t)
	resp := batch.a.HandleRequest(&Request{Config: batch.m.ID, From: "p", To: batch.id, Ops: slices.Clone(ops)})
	if resp.Status != StatusOK || len(resp.Results) != len(ops) {
		t.Fatalf("batch: status %v, %d results for %d operations", resp.Status, len(resp.Results), len(ops))
	}
	dropped := false
	for i, op := range ops {
		one := single.a.HandleRequest(&Request{Config: single.m.ID, From: "p", To: single.id, Ops: []Op{op}})
		if !reflect.DeepEqual(one.Results[0], resp.Results[i]) {
			t.Fatalf("operation %d (%v %s): one by one %+v, in the batch %+v", i, op.Kind, op.Key, one.Results[0], resp.Results[i])
		}
		if op.Kind == OpForget && single.a.regs["k05"] == nil {
			dropped = true
		}
	}
	if !dropped {
		t.Fatalf("the forget did not drop k05: the batch no longer makes a register again after a drop")
	}
	if len(batch.a.regs) != len(single.a.regs) {
		t.Fatalf("the batch left %d registers, one by one %d", len(batch.a.regs), len(single.a.regs))
	}
	for k, r := range single.a.regs {
		q := batch.a.regs[k]
		if q == nil || q.value != r.value || q.promise != r.promise || q.accepted != r.accepted || q.remaining(0) != r.remaining(0) {
			t.Fatalf("register %s: one by one %+v, after the batch %+v", k, r, q)
		}
	}
	if batch.a.Stats() != single.a.Stats() {
		t.Fatalf("stats: one by one %+v, after the batch %+v", single.a.Stats(), batch.a.Stats())
	}
}

// An accept of a lease longer than MaxTTL is refused, and its length kept
// as a horizon (hearLease): a live acceptor tells voters restarting
// meanwhile of it, and a quarantined one waits it out itself. Nothing is
// learned from an accept that is malformed otherwise, or longer than any
// node may grant.
func TestAcceptorKeepsTheLengthOfLeasesItRefuses(t *testing.T) {
	long := 3 * accMaxTTL
	longer := func(ttl time.Duration) Value {
		v := grantTo("p", 30, bal(1, "p"))
		v.TTL = ttl
		return v
	}
	t.Run("live", func(t *testing.T) {
		f := newLiveAcceptor(t)
		r := f.do("p", Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: longer(long)}).Results[0]
		if r.OK || r.Reason != ReasonInvalid {
			t.Fatalf("accept of a %v lease above MaxTTL %v: %+v, want refused as invalid", long, accMaxTTL, r)
		}
		if h := f.a.Horizon(); h != long {
			t.Errorf("horizon %v after refusing a %v lease, want %v", h, long, long)
		}
		// Reported while such a lease could run, then no longer.
		f.clock.advance(2*f.a.stretch(long) + time.Nanosecond)
		if h := f.a.Horizon(); h != accMaxTTL {
			t.Errorf("horizon %v long after, want MaxTTL %v", h, accMaxTTL)
		}
	})
	t.Run("quarantined", func(t *testing.T) {
		f := newAccFixture(t)
		start := f.clock.Now()
		resp := f.do("p", Op{Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: longer(long)})
		if resp.Status != StatusRecovering {
			t.Fatalf("status %v while quarantined", resp.Status)
		}
		if got := f.a.Recovery().LiveFrom; got < start+long {
			t.Errorf("may vote from %v after its start, before a %v lease it heard of could end", got-start, long)
		}
	})
	t.Run("ignored", func(t *testing.T) {
		noHolder := longer(long)
		noHolder.Holder = ""
		for name, op := range map[string]Op{
			"longer than any node grants": {Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: longer(maxHeardTTL + time.Second)},
			"without a holder":            {Kind: OpAccept, Key: "k", Ballot: bal(1, "p"), Inc: accInc, Value: noHolder},
			"of an empty key":             {Kind: OpAccept, Ballot: bal(1, "p"), Inc: accInc, Value: longer(long)},
			"a prepare":                   {Kind: OpPrepare, Key: "k", Ballot: bal(1, "p"), Value: longer(long)},
		} {
			f := newLiveAcceptor(t)
			f.do("p", op)
			if h := f.a.Horizon(); h != accMaxTTL {
				t.Errorf("%s: horizon %v, want MaxTTL %v", name, h, accMaxTTL)
			}
			q := newAccFixture(t)
			start := q.clock.Now()
			q.do("p", op)
			if got := q.a.Recovery().LiveFrom; got != start+accQuarantine {
				t.Errorf("%s: quarantined, may vote from %v after its start, want its own quarantine %v", name, got-start, accQuarantine)
			}
		}
	})
}

// A write-back of a grant longer than MaxTTL (a read's, at its own ballot,
// the grant's Lease kept) starts no timer, and is taken, its length heard
// as a horizon all the same (design.md R37): a roll that lowered MaxTTL
// leaves voters holding an ended grant of the old TTL, and refused, no
// read of the key finished. The grant itself, a renewal or a move of it is
// still refused; with the rule broken (refuse-long-write-backs), so is the
// write-back.
func TestAcceptorTakesAWriteBackOfALongerLease(t *testing.T) {
	long := 3 * accMaxTTL
	grant := grantTo("p", 30, bal(1, "p"))
	grant.TTL = long
	writeBack := Op{Kind: OpAccept, Key: "k", Ballot: bal(2, "q"), Inc: accInc, Value: grant}
	f := newLiveAcceptor(t)
	if r := f.do("q", writeBack).Results[0]; !r.OK {
		t.Fatalf("write-back of a %v grant above MaxTTL %v: %+v, want taken", long, accMaxTTL, r)
	}
	if left := f.a.keyState("k", f.clock.Now()).Remaining; left != 0 {
		t.Errorf("the write-back started a timer: %v left", left)
	}
	if h := f.a.Horizon(); h != long {
		t.Errorf("horizon %v after a write-back of a %v grant, want %v", h, long, long)
	}
	moved := writeBack
	moved.Ballot, moved.Migrate = bal(3, "q"), true
	renewal := Op{Kind: OpAccept, Key: "k", Ballot: bal(4, "p"), Inc: accInc, Value: grant}
	renewal.Value.Lease = renewal.Ballot
	for name, op := range map[string]Op{"a move": moved, "a renewal": renewal} {
		if r := f.do("p", op).Results[0]; r.OK || r.Reason != ReasonInvalid {
			t.Errorf("%s of a %v grant: %+v, want refused as invalid", name, long, r)
		}
	}
	b := newLiveAcceptor(t)
	b.a.breakWith(refuseLongWriteBacks)
	if r := b.do("q", writeBack).Results[0]; r.OK || r.Reason != ReasonInvalid {
		t.Errorf("with refuse-long-write-backs, the write-back: %+v, want refused as invalid", r)
	}
}

// A running node's word that it holds a lease longer than this acceptor's
// MaxTTL (SetPeerTTL) is a horizon: reported to restarting voters, waited
// out after a restart, and still reported a while after the word is taken
// back.
func TestAcceptorWaitsOutTheLeasesPeersHold(t *testing.T) {
	long := 3 * accMaxTTL
	t.Run("quarantined", func(t *testing.T) {
		f := newAccFixture(t)
		start := f.clock.Now()
		f.a.SetPeerTTL(long)
		if got := f.a.Recovery().LiveFrom; got < start+long {
			t.Errorf("may vote from %v after its start, before a %v lease a peer holds could end", got-start, long)
		}
	})
	t.Run("live", func(t *testing.T) {
		f := newLiveAcceptor(t)
		f.a.SetPeerTTL(long)
		if h := f.a.Horizon(); h != long {
			t.Fatalf("horizon %v while a peer holds a %v lease", h, long)
		}
		f.a.SetPeerTTL(0)
		if h := f.a.Horizon(); h != long {
			t.Errorf("horizon %v just after the peer's word was taken back, want %v while such a lease could run", h, long)
		}
		f.clock.advance(2*f.a.stretch(long) + time.Nanosecond)
		if h := f.a.Horizon(); h != accMaxTTL {
			t.Errorf("horizon %v long after, want MaxTTL %v", h, accMaxTTL)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		f := newAccFixture(t)
		start := f.clock.Now()
		f.a.SetPeerTTL(maxHeardTTL * 2)
		if got := f.a.Recovery().LiveFrom; got != start+maxHeardTTL {
			t.Errorf("a peer's word of a %v lease keeps it out until %v after its start, want %v", 2*maxHeardTTL, got-start, maxHeardTTL)
		}
	})
}
