package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// Lease values are bytes: any bytes survive every codec they travel in
// (the hand-written ballot messages and the go-msgpack catch-ups), up to
// the limit and not beyond.
func TestValuesAreBytes(t *testing.T) {
	data := "\x00\xff\xfe" + strings.Repeat("é", 10) + "\x80"
	v := sampleValue(true)
	v.Data = data
	req := &quorum.Request{Config: 1, From: "a", To: "b", Ops: []quorum.Op{{ID: 1, Kind: quorum.OpAccept, Key: "k", Value: v}}}
	got, err := testLimits.DecodeRequest(EncodeRequest(req))
	if err != nil || got.Ops[0].Value.Data != data {
		t.Fatalf("request: %v, data %q", err, got.Ops[0].Value.Data)
	}
	body, err := Encode(KindCatchUpReply, &quorum.CatchUpResponse{From: "b", Entries: []quorum.Entry{{Key: "k", Value: v}}})
	if err != nil {
		t.Fatal(err)
	}
	cu, err := testLimits.DecodeCatchUpReply(body)
	if err != nil || cu.Entries[0].Value.Data != data {
		t.Fatalf("catch-up: %v, data %q", err, cu.Entries[0].Value.Data)
	}

	lim := testLimits
	lim.MaxValueLen = len(data) - 1
	if _, err := lim.DecodeRequest(EncodeRequest(req)); !errors.Is(err, ErrValueTooLarge) || !errors.Is(err, ErrMalformed) {
		t.Errorf("a value over the limit in a request: %v", err)
	}
	if _, err := lim.DecodeCatchUpReply(body); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("a value over the limit in a catch-up: %v", err)
	}
}

// A node of an earlier version is sent exactly what it was sent before
// version 3: no Data, no Observe, no Changes, no Lives — not a longer
// struct it would refuse (version 1) or skip, dropping the value
// (version 2).
func TestEarlierVersionsSeeNoValues(t *testing.T) {
	v := sampleValueData()
	plain := v
	plain.Data = ""
	req := &quorum.Request{Config: 1, From: "a", To: "b", Ops: []quorum.Op{
		{ID: 1, Kind: quorum.OpAccept, Key: "k", Value: v},
		{ID: 2, Kind: quorum.OpPeek, Key: "k", Observe: time.Minute},
	}}
	old := &quorum.Request{Config: 1, From: "a", To: "b", Ops: []quorum.Op{
		{ID: 1, Kind: quorum.OpAccept, Key: "k", Value: plain},
		{ID: 2, Kind: quorum.OpPeek, Key: "k"},
	}}
	for _, ver := range []int{Version1, Version2} {
		if !bytes.Equal(EncodeRequestFor(req, ver), EncodeRequest(old)) {
			t.Errorf("a request for version %d is not what that version knows", ver)
		}
	}
	resp := &quorum.Response{Config: 1, From: "b", Inc: 1, Results: []quorum.Result{{ID: 1, OK: true, Value: v}},
		Lives: []quorum.Life{{Node: "a", Inc: 3}}}
	oldResp := &quorum.Response{Config: 1, From: "b", Inc: 1, Results: []quorum.Result{{ID: 1, OK: true, Value: plain}}}
	if !bytes.Equal(EncodeResponseFor(resp, Version2), EncodeResponse(oldResp)) {
		t.Error("a response for version 2 carries what that version does not know")
	}
	if !bytes.Equal(EncodeRequestFor(req, Version3), EncodeRequest(req)) {
		t.Error("a request for version 3 leaves something out")
	}
}

// A node's word of the leases it holds (Meta.Holding) comes through, and a
// negative one is refused as malformed, not taken.
func TestMetaHolding(t *testing.T) {
	m := Meta{RPC: "10.0.0.1:7947", Holding: 1500 * time.Millisecond}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeMeta(b); err != nil || got.Holding != m.Holding {
		t.Fatalf("decoded %v, %v; want holding %v", got.Holding, err, m.Holding)
	}
	m.Holding = -time.Second
	if b, err = m.Encode(); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMeta(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a negative holding decoded with %v, want ErrMalformed", err)
	}
}
