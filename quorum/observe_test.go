package quorum

import (
	"math/rand"
	"testing"
	"time"
)

// newTestVoter is a node that votes at once: the one voter of a
// configuration that added this very incarnation.
func newTestVoter(t *testing.T, id NodeID) (*Node, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Hour, wall: testWallBase}
	m := NewMembership(ClusterID([]NodeID{id}), id)
	m.Joined = []Joined{{ID: id, Inc: 7}}
	n, err := NewNode(NodeConfig{ID: id, Incarnation: 7, Membership: m, Clock: clock, Rand: rand.New(rand.NewSource(1)),
		RoundTimeout: scRoundTimeout, Drift: scDrift, MaxTTL: scTTL, Quarantine: scQuarantine})
	if err != nil {
		t.Fatal(err)
	}
	if st := n.Voting(); st.Acceptor != Live {
		t.Fatalf("the test voter is %v", st.Acceptor)
	}
	return n, clock
}

// request steps one request at n and returns the answer it gives, and
// the notifications it sends meanwhile.
func request(n *Node, req *Request) (*Response, []Notify) {
	n.Step(&Message{Kind: MsgRequest, From: req.From, To: req.To, Ref: 1, Request: req})
	var resp *Response
	var notes []Notify
	for _, msg := range n.Ready().Messages {
		switch {
		case msg.Kind == MsgResponse && msg.Ref == 1:
			resp = msg.Response
		case msg.Kind == MsgNotify:
			notes = append(notes, *msg.Notify)
		}
	}
	return resp, notes
}

// A node whose protocol cannot carry values (Request.NoData) cannot write
// a grant back without the value a voter holds for it; it can still write
// its own grants and free keys.
func TestNoDataWritesCannotDropValues(t *testing.T) {
	n, _ := newTestVoter(t, "v")
	cfg := n.Membership().ID
	b := func(c uint64) Ballot { return Ballot{Counter: c, Incarnation: 1, Node: "p"} }
	grant := Value{Held: true, Holder: "h", HolderInc: 3, Epoch: 10, TTL: scTTL, Lease: b(1), Data: "10.0.0.1"}
	accept := func(ballot Ballot, v Value, noData bool) Result {
		resp, _ := request(n, &Request{Config: cfg, From: "p", To: "v", NoData: noData,
			Ops: []Op{{ID: 1, Kind: OpAccept, Key: "k", Ballot: ballot, Inc: 7, Value: v}}})
		return resp.Results[0]
	}
	if r := accept(b(1), grant, false); !r.OK {
		t.Fatalf("the grant: %+v", r)
	}
	stripped := grant
	stripped.Data = ""
	if r := accept(b(2), stripped, true); r.OK || r.Reason != ReasonInvalid {
		t.Fatalf("an old node's write-back without the value: %+v, want refused", r)
	}
	if st := n.Acceptor().keyState("k", 0); st.Value.Data != "10.0.0.1" {
		t.Fatalf("the value was dropped: %v", st.Value)
	}
	if r := accept(b(3), stripped, false); !r.OK {
		t.Errorf("the same write from a node of version 3 (an update that clears the value): %+v", r)
	}
	other := Value{Held: true, Holder: "p", HolderInc: 1, Epoch: 11, TTL: scTTL, Lease: b(4)}
	if r := accept(b(4), other, true); !r.OK {
		t.Errorf("an old node's own grant: %+v", r)
	}
}

// A voter pushes an observed key's state to its observers when what a
// reader sees changes (a grant, a new value, a release) and when the
// lease's timer runs out there; not on a renewal, and not once the
// registration has run out.
func TestVoterPushesChanges(t *testing.T) {
	n, clock := newTestVoter(t, "v")
	cfg := n.Membership().ID
	b := func(c uint64) Ballot { return Ballot{Counter: c, Incarnation: 1, Node: "p"} }
	var sent []Notify
	pushes := func() []Change {
		for n.HasReady() {
			for _, msg := range n.Ready().Messages {
				if msg.Kind == MsgNotify {
					sent = append(sent, *msg.Notify)
				}
			}
		}
		var out []Change
		for _, nt := range sent {
			if nt.To == "o" {
				out = append(out, nt.Changes...)
			}
		}
		sent = nil
		return out
	}
	do := func(ops ...Op) {
		for i := range ops {
			ops[i].ID, ops[i].Inc = uint64(i+1), 7
		}
		_, notes := request(n, &Request{Config: cfg, From: "o", To: "v", Ops: ops})
		sent = append(sent, notes...)
	}
	do(Op{Kind: OpPeek, Key: "k", Observe: 10 * time.Second})
	if got := pushes(); len(got) != 0 {
		t.Fatalf("pushes at registration: %v", got)
	}
	grant := Value{Held: true, Holder: "h", HolderInc: 3, Epoch: 10, TTL: scTTL, Lease: b(1), Data: "a"}
	do(Op{Kind: OpAccept, Key: "k", Ballot: b(1), Value: grant})
	if got := pushes(); len(got) != 1 || got[0].Value != grant || got[0].Remaining != scTTL {
		t.Fatalf("after the grant: %v", got)
	}
	renewal := grant
	renewal.Lease = b(2)
	clock.now += 300 * time.Millisecond
	do(Op{Kind: OpAccept, Key: "k", Ballot: b(2), Value: renewal})
	if got := pushes(); len(got) != 0 {
		t.Fatalf("a renewal was pushed: %v", got)
	}
	update := renewal
	update.Data, update.Lease = "b", b(3)
	do(Op{Kind: OpAccept, Key: "k", Ballot: b(3), Value: update})
	if got := pushes(); len(got) != 1 || got[0].Value.Data != "b" {
		t.Fatalf("after a new value: %v", got)
	}
	// The timer runs out: pushed then, not before.
	end := clock.now + scTTL
	for {
		at, ok := n.NextTick()
		if !ok || at > end {
			t.Fatalf("no tick by the end of the lease's timer (next %v, %v)", at, ok)
		}
		clock.now = at
		n.Tick()
		got := pushes()
		if at < end {
			if len(got) != 0 {
				t.Fatalf("pushed at %v, before the timer's end %v: %v", at, end, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Remaining != 0 || !got[0].Value.Held {
			t.Fatalf("at the end of the timer: %v", got)
		}
		break
	}
	// The registration runs out: no more pushes.
	clock.now += 10 * time.Second
	n.Tick()
	do(Op{Kind: OpAccept, Key: "k", Ballot: b(4), Value: Value{Epoch: 10}})
	if got := pushes(); len(got) != 0 {
		t.Fatalf("pushed after the registration ran out: %v", got)
	}
	if keys, regs := n.Observed(); keys != 0 || regs != 0 {
		t.Errorf("still observed: %d keys, %d registrations", keys, regs)
	}
}
