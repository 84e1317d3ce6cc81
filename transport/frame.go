package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Wire format. Every frame is
//
//	length  uint32, big endian: the number of bytes that follow (N)
//	type    1 byte:  frameHello .. frameMessage
//	id      uint64, big endian: request id (0 for hello and one-way messages)
//	body    N-9 bytes
//
// N must satisfy frameHeaderSize <= N <= MaxFrameSize. The first frame a
// dialer sends is a hello (see helloV1 and helloV2 for its body); a
// listener answers a hello of version 2 or later with its own, the first
// frame it sends. Requests and one-way messages flow from dialer to
// listener only; replies and error replies flow back on the same connection
// and carry the id of the request they answer.
const (
	frameHello   byte = 1 // first frame of the dialer, and of a listener answering a version-2 hello
	frameRequest byte = 2 // dialer → listener: a Call, answered by reply or error
	frameReply   byte = 3 // listener → dialer: the handler's reply
	frameError   byte = 4 // listener → dialer: the handler's error text
	frameMessage byte = 5 // dialer → listener: a one-way Send
)

const (
	// lengthPrefixSize is the size of the big-endian length that starts a frame.
	lengthPrefixSize = 4
	// frameHeaderSize is the part of N taken by the type byte and the id.
	frameHeaderSize = 1 + 8
	// maxNameLen bounds node names so that a hello always fits a small frame.
	maxNameLen = 255
	// maxHelloBody bounds a hello's body: a version-2 hello with the longest
	// name and payload.
	maxHelloBody = 2 + maxNameLen + MaxHelloPayload
	// minFrameSize is the smallest MaxFrameSize allowed: a hello with the
	// longest name and payload must fit.
	minFrameSize = 1024
	// maxFrameSizeLimit keeps N well inside the uint32 length prefix and
	// inside int on 32-bit platforms.
	maxFrameSizeLimit = 1 << 30
	// readChunk bounds how much memory a frame's body may claim before its
	// bytes have actually arrived: a peer announcing a large frame and then
	// trickling bytes holds at most what it has sent plus one chunk.
	readChunk = 64 << 10
)

// frameHeader is a decoded frame header; the body follows on the reader.
type frameHeader struct {
	typ     byte
	id      uint64
	bodyLen int
}

// appendFrame appends one encoded frame to dst. The caller has checked that
// the frame fits MaxFrameSize.
func appendFrame(dst []byte, typ byte, id uint64, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(frameHeaderSize+len(body)))
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint64(dst, id)
	return append(dst, body...)
}

// readFrameHeader reads and checks the length prefix, type and id of the
// next frame. It never reads the body, so an oversized or unknown frame is
// refused without consuming (or allocating for) what follows. scratch avoids
// an allocation per frame.
func readFrameHeader(r *bufio.Reader, scratch *[lengthPrefixSize + frameHeaderSize]byte, maxFrame int) (frameHeader, error) {
	if _, err := io.ReadFull(r, scratch[:lengthPrefixSize]); err != nil {
		return frameHeader{}, err
	}
	n := binary.BigEndian.Uint32(scratch[:lengthPrefixSize])
	if uint64(n) > uint64(maxFrame) {
		return frameHeader{}, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	if n < frameHeaderSize {
		return frameHeader{}, fmt.Errorf("%w: length %d is shorter than the %d-byte header", ErrMalformedFrame, n, frameHeaderSize)
	}
	if _, err := io.ReadFull(r, scratch[lengthPrefixSize:]); err != nil {
		return frameHeader{}, noEOF(err)
	}
	h := frameHeader{
		typ:     scratch[lengthPrefixSize],
		id:      binary.BigEndian.Uint64(scratch[lengthPrefixSize+1:]),
		bodyLen: int(n) - frameHeaderSize,
	}
	if h.typ < frameHello || h.typ > frameMessage {
		return frameHeader{}, fmt.Errorf("%w: unknown frame type %d", ErrMalformedFrame, h.typ)
	}
	return h, nil
}

// readBody reads a body of n bytes, n already checked against MaxFrameSize.
// Memory grows with the bytes received, not with the announced length.
func readBody(r io.Reader, n int) ([]byte, error) {
	if n <= readChunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, noEOF(err)
		}
		return b, nil
	}
	b := make([]byte, 0, readChunk)
	for len(b) < n {
		step := min(n-len(b), max(len(b), readChunk))
		if cap(b)-len(b) < step {
			nb := make([]byte, len(b), len(b)+step)
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+m]
		if err != nil {
			return nil, noEOF(err)
		}
	}
	return b, nil
}

// readFrame reads one whole frame. The connection loops use readFrameHeader
// and readBody directly so they can decide about the body first; readFrame
// is their composition and what the fuzz test drives.
func readFrame(r *bufio.Reader, scratch *[lengthPrefixSize + frameHeaderSize]byte, maxFrame int) (frameHeader, []byte, error) {
	h, err := readFrameHeader(r, scratch, maxFrame)
	if err != nil {
		return frameHeader{}, nil, err
	}
	body, err := readBody(r, h.bodyLen)
	if err != nil {
		return frameHeader{}, nil, err
	}
	return h, body, nil
}

// noEOF turns a clean EOF inside a frame into io.ErrUnexpectedEOF: only
// between frames does EOF mean an orderly close.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Hello versions: the first byte of a hello's body.
const (
	// helloV1, the first: then the dialer's node name, nothing else. The
	// listener answers nothing. Every listener takes it.
	helloV1 byte = 1
	// helloV2: then the sender's node name, preceded by its length in one
	// byte, then its payload (TCPConfig.Hello, at most MaxHelloPayload
	// bytes). The listener answers with a hello of its own, of version 2,
	// before anything else. Later versions keep this layout and add only
	// to the payload, so a listener takes any version from 2 up. A listener
	// that predates version 2 refuses it: a dialer sends it only to peers
	// it knows to take it (TCPConfig.HelloVersion).
	helloV2 byte = 2
)

// MaxHelloPayload bounds TCPConfig.Hello and the payload taken from a
// peer's hello, in bytes.
const MaxHelloPayload = 256

// hello is a parsed hello body.
type hello struct {
	version byte
	name    string
	payload []byte // nil in a version-1 hello
}

// appendHello appends the body of a hello frame of the given version (the
// payload is left out of a version-1 hello).
func appendHello(dst []byte, version byte, name string, payload []byte) []byte {
	dst = append(dst, version)
	if version == helloV1 {
		return append(dst, name...)
	}
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	return append(dst, payload...)
}

// parseHello checks a hello body and returns what it says.
func parseHello(body []byte) (hello, error) {
	if len(body) < 1 {
		return hello{}, fmt.Errorf("%w: empty hello", ErrMalformedFrame)
	}
	h := hello{version: body[0]}
	switch {
	case h.version == helloV1:
		h.name = string(body[1:])
	case h.version >= helloV2:
		if len(body) < 2 || len(body) < 2+int(body[1]) {
			return hello{}, fmt.Errorf("%w: a hello of %d bytes cut short", ErrMalformedFrame, len(body))
		}
		n := int(body[1])
		h.name = string(body[2 : 2+n])
		h.payload = body[2+n:]
		if len(h.payload) > MaxHelloPayload {
			return hello{}, fmt.Errorf("%w: hello payload of %d bytes (limit %d)", ErrMalformedFrame, len(h.payload), MaxHelloPayload)
		}
	default:
		return hello{}, fmt.Errorf("%w: hello version %d", ErrMalformedFrame, h.version)
	}
	if err := checkName(h.name); err != nil {
		return hello{}, fmt.Errorf("%w: %w", ErrMalformedFrame, err)
	}
	return h, nil
}

// checkName is the rule for node names, applied both to our own name and to
// names arriving in hellos: 1 to maxNameLen bytes of UTF-8 without control
// characters, so that names are safe to log.
func checkName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen {
		return fmt.Errorf("node name of %d bytes, want 1 to %d", len(name), maxNameLen)
	}
	if !utf8.ValidString(name) {
		return errors.New("node name is not UTF-8")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("node name contains control character %#x", r)
		}
	}
	return nil
}
