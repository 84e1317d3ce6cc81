package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame decoder with an
// arbitrary frame size limit. The decoder must never panic, never return a
// frame longer than the limit, refuse only with the package's sentinels or
// a short read, and decode exactly what appendFrame would have encoded.
//
//	go test -fuzz=FuzzReadFrame ./transport/
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, frameHello, 0, appendHello(nil, helloV1, "node-1", nil)), uint32(DefaultMaxFrameSize))
	f.Add(appendFrame(nil, frameHello, 0, appendHello(nil, helloV2, "node-1", []byte{0x95, 1, 2, 3, 4, 5})), uint32(DefaultMaxFrameSize))
	f.Add(appendFrame(appendFrame(nil, frameRequest, 1, []byte("ballot")), frameReply, 1, nil), uint32(64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2}, uint32(1024))
	f.Add(rawFrame(9, 0, 0, nil), uint32(16))
	f.Fuzz(func(t *testing.T, data []byte, limit uint32) {
		maxFrame := int(limit%(1<<20)) + frameHeaderSize // keep the limit small enough to exercise
		r := bufio.NewReader(bytes.NewReader(data))
		var scratch [lengthPrefixSize + frameHeaderSize]byte
		var consumed int
		for {
			h, body, err := readFrame(r, &scratch, maxFrame)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrMalformedFrame) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if frameHeaderSize+len(body) > maxFrame {
				t.Fatalf("decoded a frame of %d bytes over a limit of %d", frameHeaderSize+len(body), maxFrame)
			}
			if h.typ < frameHello || h.typ > frameMessage || h.bodyLen != len(body) {
				t.Fatalf("decoded header %+v with a %d-byte body", h, len(body))
			}
			enc := appendFrame(nil, h.typ, h.id, body)
			if !bytes.Equal(enc, data[consumed:consumed+len(enc)]) {
				t.Fatalf("re-encoding differs from the input at offset %d", consumed)
			}
			consumed += len(enc)
			if h.typ == frameHello {
				hl, err := parseHello(body) // must not panic either
				if err == nil && !bytes.Equal(appendHello(nil, hl.version, hl.name, hl.payload), body) {
					t.Fatalf("re-encoding the hello %+v differs from %q", hl, body)
				}
			}
		}
	})
}
