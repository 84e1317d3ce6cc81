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
		{frameHello, 0, appendHello(nil, "node-1")},
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
	cases := []struct {
		body []byte
		name string // "" means refused
	}{
		{appendHello(nil, "node-1"), "node-1"},
		{appendHello(nil, "ñode ☃"), "ñode ☃"},
		{appendHello(nil, strings.Repeat("n", maxNameLen)), strings.Repeat("n", maxNameLen)},
		{appendHello(nil, strings.Repeat("n", maxNameLen+1)), ""},
		{nil, ""},
		{[]byte{protocolVersion}, ""},
		{append([]byte{protocolVersion + 1}, "node"...), ""},
		{append([]byte{protocolVersion}, "a\x00b"...), ""},
		{append([]byte{protocolVersion}, "del\x7f"...), ""},
		{append([]byte{protocolVersion}, 0xc3), ""},
	}
	for _, tc := range cases {
		name, err := parseHello(tc.body)
		if tc.name == "" {
			if err == nil || !errors.Is(err, ErrMalformedFrame) {
				t.Errorf("parseHello(%q) = %q, %v; want ErrMalformedFrame", tc.body, name, err)
			}
			continue
		}
		if err != nil || name != tc.name {
			t.Errorf("parseHello(%q) = %q, %v; want %q", tc.body, name, err, tc.name)
		}
	}
}
