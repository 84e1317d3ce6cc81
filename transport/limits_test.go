package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialRaw opens a plain connection to addr, closed when the test ends.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends one request on a raw connection (after its hello) and
// reads the reply.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, id uint64, body []byte) []byte {
	t.Helper()
	if _, err := c.Write(appendFrame(nil, frameRequest, id, body)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var scratch [lengthPrefixSize + frameHeaderSize]byte
	h, reply, err := readFrame(br, &scratch, DefaultMaxFrameSize)
	if err != nil || h.typ != frameReply || h.id != id {
		t.Fatalf("reply: %+v %v", h, err)
	}
	return reply
}

// A peer that starts a frame and then trickles it is cut off after
// FrameTimeout, however steadily it trickles; a whole frame that takes a
// while on the wire is not.
func TestTCPSlowFrameIsCutOff(t *testing.T) {
	cases := []struct {
		name  string
		start []byte // sent at once after the hello
		drip  []byte // then one byte per tick, forever
	}{
		{"body trickled", rawFrame(9+100, frameRequest, 1, []byte("x")), bytes.Repeat([]byte("y"), 1000)},
		// A header announcing a 256-byte request, a byte at a time.
		{"header trickled", []byte{0, 0}, append([]byte{1, 0, frameRequest, 0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 247)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noGoroutineLeak(t)
			log := newErrorLog()
			server := newTCP(t, "server", echo, func(c *TCPConfig) {
				c.FrameTimeout = 300 * time.Millisecond
				c.IdleTimeout = time.Hour // the trickle is never idle anyway
				c.OnError = log.record
			})
			raw := dialRaw(t, server.Addr())
			if _, err := raw.Write(concat(validHello(), tc.start)); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(50 * time.Millisecond) // the attacker's pace
				defer tick.Stop()
				for _, b := range tc.drip {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := raw.Write([]byte{b}); err != nil {
						return // cut off
					}
				}
			})
			start := time.Now()
			waitClosedByPeer(t, raw)
			close(stop)
			wg.Wait()
			e := log.waitFor(t, ErrSlowFrame, ErrTimeout)
			t.Logf("cut off after %v: OnError(%q, %v)", time.Since(start).Round(time.Millisecond), e.peer, e.err)
			if e.peer != "mallory" {
				t.Fatalf("OnError peer %q, want mallory", e.peer)
			}
			if server.Stats().Rejected == 0 {
				t.Fatal("the slow frame was not counted as a rejection")
			}
		})
	}
	t.Run("large frames in time are fine", func(t *testing.T) {
		noGoroutineLeak(t)
		short := func(c *TCPConfig) { c.FrameTimeout = 5 * time.Second }
		server := newTCP(t, "server", echo, short)
		client := newTCP(t, "client", echo, short)
		body := bytes.Repeat([]byte("z"), 1<<20) // arrives in many reads, both ways
		for range 3 {
			if reply := mustCall(t, client, server.Addr(), body); !bytes.Equal(reply, body) {
				t.Fatal("reply differs")
			}
		}
	})
}

// The dialer's side too: a listener trickling its reply is cut off, and
// the call fails instead of waiting on it.
func TestTCPSlowReplyIsCutOff(t *testing.T) {
	noGoroutineLeak(t)
	// A listener that answers the first request with the header of a
	// 100-byte reply, and then nothing, holding the connection open.
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
		readFrame(br, &scratch, DefaultMaxFrameSize) // hello
		h, _, err := readFrame(br, &scratch, DefaultMaxFrameSize)
		if err != nil {
			return
		}
		c.Write(rawFrame(9+100, frameReply, h.id, nil))
		io.Copy(io.Discard, c) // until the client hangs up
	}()
	addr := ln.Addr().String()
	log := newErrorLog()
	client := newTCP(t, "client", echo, func(c *TCPConfig) {
		c.FrameTimeout = 200 * time.Millisecond
		c.OnError = log.record
	})
	_, err = client.Call(callCtx(t), "", addr, []byte("q"))
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("err %v, want ErrConnClosed", err)
	}
	log.waitFor(t, ErrSlowFrame)
}

// A peer that sends requests without reading the replies stops being read
// once MaxInflightPerConn replies are unwritten, and is cut off when the
// replies make no progress; a peer that reads them only slows down.
func TestTCPInflightLimit(t *testing.T) {
	noGoroutineLeak(t)
	big := bytes.Repeat([]byte("r"), 256<<10)
	var handled atomic.Int64
	handler := handlerFuncs{request: func(from string, body []byte) ([]byte, error) {
		handled.Add(1)
		if string(body) == "big" {
			return big, nil
		}
		return body, nil
	}}

	t.Run("a peer that reads only slows down", func(t *testing.T) {
		// A generous WriteTimeout: a loaded machine must not fail this.
		server := newTCP(t, "server", handler, func(c *TCPConfig) { c.MaxInflightPerConn = 2 })
		client := newTCP(t, "client", echo, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for range 10 {
					if _, err := client.Call(callCtx(t), "", server.Addr(), []byte("big")); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})

	t.Run("a peer that does not read is cut off", func(t *testing.T) {
		log := newErrorLog()
		server := newTCP(t, "server", handler, func(c *TCPConfig) {
			c.MaxInflightPerConn = 2
			c.WriteTimeout = 200 * time.Millisecond
			c.OnError = log.record
		})
		before := handled.Load()
		raw := dialRaw(t, server.Addr())
		// Shrink our receive window so the kernel holds few replies for us.
		_ = raw.(*net.TCPConn).SetReadBuffer(4 << 10)
		const sent = 300
		var reqs []byte
		reqs = append(reqs, validHello()...)
		for i := range sent {
			reqs = appendFrame(reqs, frameRequest, uint64(i+1), []byte("big"))
		}
		go raw.Write(reqs) // small: fits the server's socket buffer; never read back
		e := log.waitFor(t, ErrInflightLimit)
		t.Logf("OnError(%q, %v)", e.peer, e.err)
		if e.peer != "mallory" {
			t.Fatalf("OnError peer %q, want mallory", e.peer)
		}
		// The server stopped reading: most requests were never handled.
		if n := handled.Load() - before; n >= sent/2 {
			t.Fatalf("the server handled %d of %d requests whose replies were never read", n, sent)
		}
		mustCall(t, newTCP(t, "after", echo, nil), server.Addr(), []byte("still serving"))
	})
}

// Connections beyond MaxConnsPerPeer from one name, or beyond
// MaxInboundConns in all, are closed at once; the ones within the limits
// keep working, and closing one makes room again.
func TestTCPConnectionLimits(t *testing.T) {
	t.Run("per peer", func(t *testing.T) {
		noGoroutineLeak(t)
		log := newErrorLog()
		server := newTCP(t, "server", echo, func(c *TCPConfig) { c.MaxConnsPerPeer = 2; c.OnError = log.record })
		var kept []net.Conn
		var readers []*bufio.Reader
		for range 2 {
			c := dialRaw(t, server.Addr())
			c.Write(validHello())
			br := bufio.NewReader(c)
			roundTrip(t, c, br, 1, []byte("in"))
			kept, readers = append(kept, c), append(readers, br)
		}
		extra := dialRaw(t, server.Addr())
		extra.Write(validHello())
		waitClosedByPeer(t, extra)
		e := log.waitFor(t, ErrConnLimit)
		t.Logf("OnError(%q, %v)", e.peer, e.err)
		if e.peer != "mallory" {
			t.Fatalf("OnError peer %q, want mallory", e.peer)
		}
		// Another name is not affected.
		mustCall(t, newTCP(t, "other", echo, nil), server.Addr(), []byte("other name"))
		for i, c := range kept {
			roundTrip(t, c, readers[i], 2, []byte("still in"))
		}
		kept[0].Close()
		eventually(t, "the server forgets the closed connection", func() bool { return server.Stats().InboundConns == 2 })
		again := dialRaw(t, server.Addr())
		again.Write(validHello())
		roundTrip(t, again, bufio.NewReader(again), 1, []byte("room again"))
	})
	t.Run("in all", func(t *testing.T) {
		noGoroutineLeak(t)
		log := newErrorLog()
		server := newTCP(t, "server", echo, func(c *TCPConfig) {
			c.MaxInboundConns = 2
			c.HandshakeTimeout = time.Hour // the two silent ones stay
			c.OnError = log.record
		})
		silent := []net.Conn{dialRaw(t, server.Addr()), dialRaw(t, server.Addr())}
		eventually(t, "both accepted", func() bool { return server.Stats().InboundConns == 2 })
		extra := dialRaw(t, server.Addr())
		waitClosedByPeer(t, extra)
		log.waitFor(t, ErrConnLimit)
		silent[0].Close()
		eventually(t, "room again", func() bool { return server.Stats().InboundConns == 1 })
		mustCall(t, newTCP(t, "client", echo, nil), server.Addr(), []byte("room again"))
	})
}

// An accepted connection closed for idling is reported with ErrIdle, which
// is not a rejection.
func TestTCPIdleCloseIsReported(t *testing.T) {
	noGoroutineLeak(t)
	log := newErrorLog()
	server := newTCP(t, "server", echo, func(c *TCPConfig) { c.IdleTimeout = 100 * time.Millisecond; c.OnError = log.record })
	raw := dialRaw(t, server.Addr())
	raw.Write(validHello())
	waitClosedByPeer(t, raw)
	e := log.waitFor(t, ErrIdle)
	if e.peer != "mallory" {
		t.Fatalf("OnError peer %q, want mallory", e.peer)
	}
	if s := server.Stats(); s.Rejected != 0 {
		t.Fatalf("an idle close counted as a rejection: %+v", s)
	}
}
