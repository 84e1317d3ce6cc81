package quorum

import (
	"testing"
	"time"
)

// A message's sender and addressee are its envelope's: every message a node
// makes carries them there, and Step takes the envelope's sender, whatever
// the payload says, for both halves to read.
func TestMessageEnvelopeNamesSenderAndAddressee(t *testing.T) {
	n, rd := acquiringNode(t)
	sent := 0
	for _, msg := range rd.Messages {
		if msg.Kind != MsgRequest && msg.Kind != MsgCatchUp {
			continue
		}
		sent++
		to := msg.To
		if msg.Kind == MsgRequest && msg.Request.To != to || msg.Kind == MsgCatchUp && msg.CatchUp.To != to {
			t.Errorf("a %v to %s whose payload is to someone else", msg.Kind, to)
		}
		if msg.From != "a" || to == "" || to == "a" {
			t.Errorf("a %v from %q to %q, want from a to another voter", msg.Kind, msg.From, to)
		}
	}
	if sent == 0 {
		t.Fatalf("no request or catch-up in %+v", rd.Messages)
	}
	n.Advance(rd)

	// A peek that asks to observe k, in a payload that names another
	// sender: the envelope's is the observer, and the answer goes to it.
	v, _ := newTestVoter(t, "v")
	req := &Request{Config: v.Membership().ID, From: "x", To: "v",
		Ops: []Op{{ID: 1, Kind: OpPeek, Key: "k", Observe: time.Second}}}
	v.Step(&Message{Kind: MsgRequest, From: "p", To: "v", Ref: 1, Request: req})
	if req.From != "p" {
		t.Errorf("the request's payload names %q as its sender after Step, want the envelope's p", req.From)
	}
	var resp *Message
	vrd := v.Ready()
	for i := range vrd.Messages {
		if vrd.Messages[i].Kind == MsgResponse {
			resp = &vrd.Messages[i]
		}
	}
	switch {
	case resp == nil:
		t.Fatalf("no answer to the peek")
	case resp.From != "v" || resp.To != "p" || resp.Ref != 1 || resp.Response.To != "p":
		t.Errorf("the answer is from %q to %q (payload to %q) under ref %d, want from v to p under 1",
			resp.From, resp.To, resp.Response.To, resp.Ref)
	}
	if keys, regs := v.Observed(); keys != 1 || regs != 1 {
		t.Errorf("v observes %d keys for %d observers, want k for p", keys, regs)
	}
	if k := v.obs.keys["k"]; k == nil || len(k.observers) != 1 || k.observers[0].id != "p" {
		t.Errorf("k's observers: %+v, want p", k)
	}
}
