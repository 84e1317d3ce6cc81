package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []struct {
		typ  byte
		id   uint64
		body []byte
	}{
		{frameHello, 0, appendHello(nil, helloV1, "node-1", nil)},
		{frameRequest, 1, []byte("prepare")},
		{frameReply, 1<<64 - 1, nil},
		{frameError, 7, []byte("boom")},
		{frameMessage, 0, bytes.Repeat([]byte{0xab}, 3*readChunk+5)}, // read in growing chunks
	}
	var wire []byte
	for _, f := range frames {
		wire = appendFrame(wire, f.typ, f.id, f.body)
	}
	r := bufio.NewReader(bytes.NewReader(wire))
	var scratch [lengthPrefixSize + frameHeaderSize]byte
	for _, want := range frames {
		h, body, err := readFrame(r, &scratch, DefaultMaxFrameSize)
		if err != nil {
			t.Fatalf("readFrame: %v", err)
		}
		if h.typ != want.typ || h.id != want.id || !bytes.Equal(body, want.body) {
			t.Fatalf("read type %d id %d body %d bytes, want type %d id %d body %d bytes",
				h.typ, h.id, len(body), want.typ, want.id, len(want.body))
		}
	}
	if _, _, err := readFrame(r, &scratch, DefaultMaxFrameSize); err != io.EOF {
		t.Fatalf("after the last frame: err %v, want io.EOF", err)
	}
}

func TestReadFrameRefuses(t *testing.T) {
	const limit = 64
	cases := []struct {
		name string
		wire []byte
		want error
	}{
		{"length over the limit", rawFrame(limit+1, frameRequest, 1, make([]byte, limit+1-frameHeaderSize)), ErrFrameTooLarge},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		{"length below the header", rawFrame(8, frameRequest, 1, nil)[:12], ErrMalformedFrame},
		{"zero length", []byte{0, 0, 0, 0}, ErrMalformedFrame},
		{"type zero", rawFrame(9, 0, 1, nil), ErrMalformedFrame},
		{"type past the last", rawFrame(9, frameMessage+1, 1, nil), ErrMalformedFrame},
		{"cut in the length", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"cut in the header", rawFrame(20, frameRequest, 1, nil)[:8], io.ErrUnexpectedEOF},
		{"cut in the body", rawFrame(20, frameRequest, 1, []byte("abc")), io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var scratch [lengthPrefixSize + frameHeaderSize]byte
			_, _, err := readFrame(bufio.NewReader(bytes.NewReader(tc.wire)), &scratch, limit)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseHello(t *testing.T) {
	long := strings.Repeat("n", maxNameLen)
	payload := []byte{0x95, 1, 2, 3, 4, 5}
	cases := []struct {
		body    []byte
		version byte
		name    string // "" means refused
		payload []byte
	}{
		{appendHello(nil, helloV1, "node-1", payload), helloV1, "node-1", nil},
		{appendHello(nil, helloV1, "ñode ☃", nil), helloV1, "ñode ☃", nil},
		{appendHello(nil, helloV1, long, nil), helloV1, long, nil},
		{appendHello(nil, helloV1, long+"n", nil), 0, "", nil},
		{appendHello(nil, helloV2, "node-1", payload), helloV2, "node-1", payload},
		{appendHello(nil, helloV2, "node-1", nil), helloV2, "node-1", []byte{}},
		{appendHello(nil, helloV2, long, bytes.Repeat([]byte{7}, MaxHelloPayload)), helloV2, long, bytes.Repeat([]byte{7}, MaxHelloPayload)},
		{appendHello(nil, 7, "later", payload), 7, "later", payload}, // later versions keep the layout
		{appendHello(nil, helloV2, "node-1", bytes.Repeat([]byte{7}, MaxHelloPayload+1)), 0, "", nil},
		{appendHello(nil, helloV2, "", payload), 0, "", nil},
		{[]byte{helloV2, 9, 'a'}, 0, "", nil},
		{[]byte{helloV2}, 0, "", nil},
		{nil, 0, "", nil},
		{[]byte{helloV1}, 0, "", nil},
		{append([]byte{0}, "node"...), 0, "", nil},
		{append([]byte{helloV1}, "a\x00b"...), 0, "", nil},
		{append([]byte{helloV1}, "del\x7f"...), 0, "", nil},
		{append([]byte{helloV1}, 0xc3), 0, "", nil},
	}
	for _, tc := range cases {
		hl, err := parseHello(tc.body)
		if tc.name == "" {
			if err == nil || !errors.Is(err, ErrMalformedFrame) {
				t.Errorf("parseHello(%q) = %+v, %v; want ErrMalformedFrame", tc.body, hl, err)
			}
			continue
		}
		if err != nil || hl.version != tc.version || hl.name != tc.name || !bytes.Equal(hl.payload, tc.payload) || (tc.payload == nil) != (hl.payload == nil) {
			t.Errorf("parseHello(%q) = %+v, %v; want %d %q %q", tc.body, hl, err, tc.version, tc.name, tc.payload)
		}
	}
}
