package quorum

import (
	"math/rand"
	"testing"
	"time"
)

// Advance takes back what a Ready handed out, the operations of its
// requests and the results of its responses included: a driver that kept
// them past Advance, instead of encoding or copying them, finds them gone.
func TestAdvanceTakesBackMessageBuffers(t *testing.T) {
	n, rd := acquiringNode(t)
	var req *Request
	for _, msg := range rd.Messages {
		if msg.Kind == MsgRequest && msg.To == "b" {
			req = msg.Request
		}
	}
	if req == nil || len(req.Ops) == 0 || req.Ops[0].Key != "k" {
		t.Fatalf("no request for k to b in %+v", rd.Messages)
	}
	kept := req.Ops
	n.Advance(rd)
	if req.Ops != nil || kept[0] != (Op{}) {
		t.Fatalf("after Advance the request still has %d operations, the kept slice %+v", len(req.Ops), kept[0])
	}

	v, _ := newTestVoter(t, "v")
	v.Step(&Message{Kind: MsgRequest, From: "p", To: "v", Ref: 1, Request: &Request{Config: v.Membership().ID, From: "p", To: "v",
		Ops: []Op{{ID: 1, Kind: OpPeek, Key: "k"}}}})
	rd = v.Ready()
	var resp *Response
	for _, msg := range rd.Messages {
		if msg.Kind == MsgResponse && msg.Ref == 1 {
			resp = msg.Response
		}
	}
	if resp == nil || len(resp.Results) != 1 || resp.Results[0].ID != 1 {
		t.Fatalf("no answer to the peek in %+v", rd.Messages)
	}
	results := resp.Results
	v.Advance(rd)
	if resp.Results != nil || results[0] != (Result{}) {
		t.Fatalf("after Advance the response still has %d results, the kept slice %+v", len(resp.Results), results[0])
	}
}

// acquiringNode is node a of a new mesh of a, b and c, fresh (it votes at
// once), that began an acquire of k, and the Ready that sends it.
func acquiringNode(t *testing.T) (*Node, Ready) {
	t.Helper()
	ids := []NodeID{"a", "b", "c"}
	clock := &fakeClock{now: time.Hour, wall: testWallBase}
	n, err := NewNode(NodeConfig{ID: "a", Incarnation: 1, Membership: NewMembership(ClusterID(ids), ids...),
		Clock: clock, Rand: rand.New(rand.NewSource(1)), RoundTimeout: scRoundTimeout, Drift: scDrift,
		MaxTTL: scTTL, Quarantine: scQuarantine})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Acquire("k", scOpts(false)); err != nil {
		t.Fatal(err)
	}
	return n, n.Ready()
}
