package transport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

func helloFrame(version byte, name string) []byte {
	body := append([]byte{version}, name...)
	return appendFrame(nil, frameHello, 0, body)
}

func validHello() []byte { return helloFrame(helloV1, "mallory") }

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestTCPRefusesBadInput sends each kind of bad input on a raw connection
// and checks that the server closes that connection, reports it through
// OnError, and keeps serving a well-behaved client on its existing
// connection and on new ones.
func TestTCPRefusesBadInput(t *testing.T) {
	cases := []struct {
		name       string
		send       []byte
		closeWrite bool    // half-close after sending
		want       []error // every one must be wrapped by the reported error
		afterHello bool    // the report names the peer rather than its address
	}{
		{name: "http request", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), want: []error{ErrHandshake, ErrFrameTooLarge}},
		{name: "length shorter than header", send: []byte{0, 0, 0, 5, 1, 2, 3, 4, 5}, want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "no hello", want: []error{ErrHandshake, ErrTimeout}},
		{name: "half a hello then silence", send: validHello()[:7], want: []error{ErrHandshake, ErrTimeout}},
		{name: "hello of another version", send: helloFrame(0, "mallory"), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "hello without a name", send: helloFrame(helloV1, ""), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "hello with a control character", send: helloFrame(helloV1, "bad\nname"), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "hello with invalid UTF-8", send: helloFrame(helloV1, "\xff\xfe"), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "hello too long", send: helloFrame(helloV1, string(make([]byte, 300))), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "request before hello", send: appendFrame(nil, frameRequest, 1, []byte("x")), want: []error{ErrHandshake, ErrMalformedFrame}},
		{name: "unknown frame type", send: concat(validHello(), rawFrame(9, 77, 1, nil)), want: []error{ErrMalformedFrame}, afterHello: true},
		{name: "reply sent by a dialer", send: concat(validHello(), appendFrame(nil, frameReply, 1, nil)), want: []error{ErrMalformedFrame}, afterHello: true},
		{name: "second hello", send: concat(validHello(), validHello()), want: []error{ErrMalformedFrame}, afterHello: true},
		{name: "short frame after hello", send: concat(validHello(), []byte{0, 0, 0, 2, 2, 0}), want: []error{ErrMalformedFrame}, afterHello: true},
		{name: "oversized length prefix", send: concat(validHello(), []byte{0xff, 0xff, 0xff, 0xff}), want: []error{ErrFrameTooLarge}, afterHello: true},
		{name: "length just over the maximum", send: concat(validHello(), rawFrame(minFrameSize+1, frameRequest, 1, nil)), want: []error{ErrFrameTooLarge}, afterHello: true},
		{name: "truncated frame", send: concat(validHello(), rawFrame(100, frameRequest, 1, []byte("short"))), closeWrite: true, want: []error{io.ErrUnexpectedEOF}, afterHello: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noGoroutineLeak(t)
			log := newErrorLog()
			// A short handshake timeout for the cases that wait for it;
			// the others must not race it on a loaded machine.
			handshake := 10 * time.Second
			if slices.Contains(tc.want, ErrTimeout) {
				handshake = 100 * time.Millisecond
			}
			server := newTCP(t, "server", echo, func(c *TCPConfig) {
				c.MaxFrameSize = minFrameSize
				c.HandshakeTimeout = handshake
				c.OnError = log.record
			})
			good := newTCP(t, "good", echo, nil)
			mustCall(t, good, server.Addr(), []byte("before"))

			raw, err := net.Dial("tcp", server.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if _, err := raw.Write(tc.send); err != nil {
				t.Fatalf("write: %v", err)
			}
			if tc.closeWrite {
				_ = raw.(*net.TCPConn).CloseWrite()
			}
			waitClosedByPeer(t, raw)

			e := log.waitFor(t, tc.want...)
			t.Logf("OnError(%q, %v)", e.peer, e.err)
			wantPeer := raw.LocalAddr().String()
			if tc.afterHello {
				wantPeer = "mallory"
			}
			if e.peer != wantPeer {
				t.Fatalf("OnError peer %q, want %q", e.peer, wantPeer)
			}
			mustCall(t, good, server.Addr(), []byte("after"))
			if s := good.Stats(); s.Dials != 1 {
				t.Fatalf("the good client had to redial (%d dials): its connection was disturbed", s.Dials)
			}
			mustCall(t, newTCP(t, "newcomer", echo, nil), server.Addr(), []byte("new connection"))
		})
	}
}

// waitClosedByPeer reads until the peer closes the connection.
func waitClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	if isTimeout(err) {
		t.Fatal("the server did not close the connection")
	}
}

// fakeListener accepts one connection, checks the hello, reads one
// request, answers it with whatever respond returns and closes.
func fakeListener(t *testing.T, respond func(id uint64) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var scratch [lengthPrefixSize + frameHeaderSize]byte
		if h, _, err := readFrame(br, &scratch, DefaultMaxFrameSize); err != nil || h.typ != frameHello {
			return
		}
		h, _, err := readFrame(br, &scratch, DefaultMaxFrameSize)
		if err != nil || h.typ != frameRequest {
			return
		}
		_, _ = c.Write(respond(h.id)) // then hang up: the client reads what came first
	}()
	return ln.Addr().String()
}

// TestTCPRefusesBadReplies covers the dialer's side: a listener that
// answers with nonsense gets its connection closed and the call fails.
func TestTCPRefusesBadReplies(t *testing.T) {
	cases := []struct {
		name    string
		respond func(id uint64) []byte
		want    []error
	}{
		{"request from a listener", func(id uint64) []byte { return appendFrame(nil, frameRequest, id, nil) }, []error{ErrConnClosed, ErrMalformedFrame}},
		{"unknown frame type", func(id uint64) []byte { return rawFrame(9, 0, id, nil) }, []error{ErrConnClosed, ErrMalformedFrame}},
		{"oversized length prefix", func(uint64) []byte { return []byte{0x7f, 0xff, 0xff, 0xff} }, []error{ErrConnClosed, ErrFrameTooLarge}},
		{"truncated reply", func(id uint64) []byte { return rawFrame(50, frameReply, id, []byte("abc")) }, []error{ErrConnClosed, io.ErrUnexpectedEOF}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noGoroutineLeak(t)
			addr := fakeListener(t, tc.respond)
			log := newErrorLog()
			client := newTCP(t, "client", echo, func(c *TCPConfig) { c.OnError = log.record })
			_, err := client.Call(callCtx(t), "", addr, []byte("q"))
			if !wrapsAll(err, tc.want) {
				t.Fatalf("err %v, want it to wrap %v", err, tc.want)
			}
			if e := log.waitFor(t, tc.want[1:]...); e.peer != addr {
				t.Fatalf("OnError peer %q, want %q", e.peer, addr)
			}
		})
	}
}

func TestTCPIgnoresReplyToUnknownID(t *testing.T) {
	noGoroutineLeak(t)
	addr := fakeListener(t, func(id uint64) []byte {
		return concat(
			appendFrame(nil, frameReply, id+1000, []byte("stray")),
			appendFrame(nil, frameError, id+2000, []byte("stray error")),
			appendFrame(nil, frameReply, id, []byte("mine")),
		)
	})
	client := newTCP(t, "client", echo, nil)
	if reply := mustCall(t, client, addr, []byte("q")); string(reply) != "mine" {
		t.Fatalf("reply %q, want mine", reply)
	}
}

// TestTCPMatchesRepliesOutOfOrder has a listener answer a batch of
// requests in reverse order: each caller must still get its own reply.
func TestTCPMatchesRepliesOutOfOrder(t *testing.T) {
	noGoroutineLeak(t)
	const calls = 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { ln.Close(); <-done }()
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var scratch [lengthPrefixSize + frameHeaderSize]byte
		var out []byte
		var ids []uint64
		var bodies [][]byte
		for len(ids) < calls {
			h, body, err := readFrame(br, &scratch, DefaultMaxFrameSize)
			if err != nil {
				return
			}
			if h.typ == frameRequest {
				ids, bodies = append(ids, h.id), append(bodies, body)
			}
		}
		for i := len(ids) - 1; i >= 0; i-- {
			out = appendFrame(out, frameReply, ids[i], append([]byte("re "), bodies[i]...))
		}
		_, _ = c.Write(out)
		_, _ = io.Copy(io.Discard, c)
	}()

	client := newTCP(t, "client", echo, nil)
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			body := fmt.Sprintf("call %d", i)
			reply, err := client.Call(callCtx(t), "", ln.Addr().String(), []byte(body))
			if err == nil && string(reply) != "re "+body {
				err = fmt.Errorf("call %q got reply %q", body, reply)
			}
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	client.Close() // ends the fake listener's io.Copy
}
