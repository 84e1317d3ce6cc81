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
// dialer sends is a hello whose body is a protocol version byte followed by
// the dialer's node name. Requests and one-way messages flow from dialer to
// listener only; replies and error replies flow back on the same connection
// and carry the id of the request they answer.
const (
	frameHello   byte = 1 // dialer → listener, first frame only: version, name
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
	// protocolVersion is sent in every hello; a listener refuses others.
	protocolVersion byte = 1
	// maxNameLen bounds node names so that a hello always fits a small frame.
	maxNameLen = 255
	// minFrameSize is the smallest MaxFrameSize allowed: a hello with the
	// longest name must fit.
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

// appendHello appends the body of a hello frame.
func appendHello(dst []byte, name string) []byte {
	dst = append(dst, protocolVersion)
	return append(dst, name...)
}

// parseHello checks a hello body and returns the peer's node name.
func parseHello(body []byte) (string, error) {
	if len(body) < 1 {
		return "", fmt.Errorf("%w: empty hello", ErrMalformedFrame)
	}
	if body[0] != protocolVersion {
		return "", fmt.Errorf("%w: protocol version %d, want %d", ErrMalformedFrame, body[0], protocolVersion)
	}
	name := string(body[1:])
	if err := checkName(name); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformedFrame, err)
	}
	return name, nil
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
