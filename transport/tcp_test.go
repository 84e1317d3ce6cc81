package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTCPRoundTrip(t *testing.T) {
	noGoroutineLeak(t)
	var gotFrom atomic.Value
	server := newTCP(t, "server", handlerFuncs{request: func(from string, body []byte) ([]byte, error) {
		gotFrom.Store(from)
		return append([]byte("re: "), body...), nil
	}}, nil)
	client := newTCP(t, "client", echo, nil)

	if strings.HasSuffix(server.Addr(), ":0") {
		t.Fatalf("Addr() = %s, want the real port", server.Addr())
	}
	for _, body := range [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte{0}, 100)} {
		reply := mustCall(t, client, server.Addr(), body)
		if want := append([]byte("re: "), body...); !bytes.Equal(reply, want) {
			t.Fatalf("reply %q, want %q", reply, want)
		}
	}
	if from := gotFrom.Load(); from != "client" {
		t.Fatalf("handler saw from=%v, want client", from)
	}
}

func TestTCPConcurrentCallsShareOneConnection(t *testing.T) {
	noGoroutineLeak(t)
	server := newTCP(t, "server", echo, nil)
	client := newTCP(t, "client", echo, nil)

	const workers, perWorker = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				body := fmt.Appendf(nil, "worker %d call %d", w, i)
				reply, err := client.Call(context.Background(), "", server.Addr(), body)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(reply, body) {
					errs <- fmt.Errorf("sent %q, got reply %q", body, reply)
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
	if s := client.Stats(); s.OutboundConns != 1 || s.Dials != 1 {
		t.Fatalf("client stats %+v, want one connection dialed once", s)
	}
	if s := server.Stats(); s.InboundConns != 1 {
		t.Fatalf("server stats %+v, want one inbound connection", s)
	}
}

func TestTCPConnsPerPeer(t *testing.T) {
	noGoroutineLeak(t)
	server := newTCP(t, "server", echo, nil)
	client := newTCP(t, "client", echo, func(c *TCPConfig) { c.ConnsPerPeer = 3 })
	for i := range 9 {
		mustCall(t, client, server.Addr(), []byte{byte(i)})
	}
	if s := client.Stats(); s.OutboundConns != 3 {
		t.Fatalf("client has %d connections, want 3", s.OutboundConns)
	}
}

func TestTCPSend(t *testing.T) {
	noGoroutineLeak(t)
	const n = 200
	got := make(chan string, n)
	server := newTCP(t, "server", handlerFuncs{message: func(from string, body []byte) {
		got <- from + ":" + string(body)
	}}, nil)
	client := newTCP(t, "client", echo, nil)

	for i := range n {
		if err := client.Send("", server.Addr(), fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	seen := make(map[string]bool)
	timeout := time.After(5 * time.Second)
	for len(seen) < n {
		select {
		case m := <-got:
			seen[m] = true
		case <-timeout:
			t.Fatalf("received %d of %d messages", len(seen), n)
		}
	}
	for i := range n {
		if m := fmt.Sprintf("client:m%d", i); !seen[m] {
			t.Fatalf("message %q missing", m)
		}
	}
}

func TestTCPFrameSizeLimit(t *testing.T) {
	noGoroutineLeak(t)
	server := newTCP(t, "server", echo, nil)
	client := newTCP(t, "client", echo, nil)
	maxBody := DefaultMaxFrameSize - frameHeaderSize

	big := bytes.Repeat([]byte("0123456789abcdef"), maxBody/16+1)[:maxBody]
	if reply := mustCall(t, client, server.Addr(), big); !bytes.Equal(reply, big) {
		t.Fatalf("a body of exactly the maximum (%d bytes) did not round-trip", maxBody)
	}
	over := append(big, 'x')
	if _, err := client.Call(callCtx(t), "", server.Addr(), over); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Call with %d bytes: err %v, want ErrFrameTooLarge", len(over), err)
	}
	if err := client.Send("", server.Addr(), over); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Send with %d bytes: err %v, want ErrFrameTooLarge", len(over), err)
	}
	// Refusing locally must not disturb the connection.
	mustCall(t, client, server.Addr(), []byte("still fine"))
	if s := client.Stats(); s.Dials != 1 {
		t.Fatalf("client dialed %d times, want 1", s.Dials)
	}
}

func TestTCPReplyTooLarge(t *testing.T) {
	noGoroutineLeak(t)
	log := newErrorLog()
	server := newTCP(t, "server", handlerFuncs{request: func(string, []byte) ([]byte, error) {
		return make([]byte, minFrameSize), nil
	}}, func(c *TCPConfig) { c.MaxFrameSize = minFrameSize; c.OnError = log.record })
	client := newTCP(t, "client", echo, nil)

	_, err := client.Call(callCtx(t), "", server.Addr(), nil)
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "frame too large") {
		t.Fatalf("err %v, want a RemoteError about the reply's size", err)
	}
	log.waitFor(t, ErrFrameTooLarge)
}

func TestTCPRemoteError(t *testing.T) {
	noGoroutineLeak(t)
	server := newTCP(t, "server", handlerFuncs{request: func(string, []byte) ([]byte, error) {
		return nil, errors.New("ballot too low")
	}}, nil)
	client := newTCP(t, "client", echo, nil)

	_, err := client.Call(callCtx(t), "", server.Addr(), []byte("prepare"))
	var re *RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("err %v (%T), want *RemoteError", err, err)
	}
	if re.Message != "ballot too low" || re.Addr != server.Addr() {
		t.Fatalf("RemoteError %+v", re)
	}
	// A remote error leaves the connection up.
	_, _ = client.Call(callCtx(t), "", server.Addr(), nil)
	if s := client.Stats(); s.Dials != 1 {
		t.Fatalf("client dialed %d times, want 1", s.Dials)
	}
}

func TestTCPHandlerRejectsPeer(t *testing.T) {
	noGoroutineLeak(t)
	log := newErrorLog()
	server := newTCP(t, "server", handlerFuncs{request: func(from string, body []byte) ([]byte, error) {
		if string(body) == "evil" {
			return nil, fmt.Errorf("unknown voter %q: %w", from, ErrRejectPeer)
		}
		return body, nil
	}}, func(c *TCPConfig) { c.OnError = log.record })
	client := newTCP(t, "client", echo, nil)

	mustCall(t, client, server.Addr(), []byte("good"))
	_, err := client.Call(callCtx(t), "", server.Addr(), []byte("evil"))
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("err %v, want ErrConnClosed", err)
	}
	if e := log.waitFor(t, ErrRejectPeer); e.peer != "client" {
		t.Fatalf("OnError peer %q, want the peer's name", e.peer)
	}
	// The next call redials.
	mustCall(t, client, server.Addr(), []byte("good again"))
	if s := client.Stats(); s.Dials != 2 {
		t.Fatalf("client dialed %d times, want 2", s.Dials)
	}
	if s := server.Stats(); s.Rejected != 1 {
		t.Fatalf("server rejected %d connections, want 1", s.Rejected)
	}
}

func TestTCPPeerRestart(t *testing.T) {
	noGoroutineLeak(t)
	first := newTCP(t, "server", echo, nil)
	addr := first.Addr()
	client := newTCP(t, "client", echo, nil)
	mustCall(t, client, addr, []byte("before"))

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the client notices the closed connection", func() bool {
		return client.Stats().OutboundConns == 0
	})
	if _, err := client.Call(callCtx(t), "", addr, []byte("down")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call to a stopped server: err %v, want ErrUnreachable", err)
	}

	newTCP(t, "server", echo, func(c *TCPConfig) { c.BindAddr = addr })
	if reply := mustCall(t, client, addr, []byte("after")); string(reply) != "after" {
		t.Fatalf("reply %q", reply)
	}
}

func TestTCPUnreachable(t *testing.T) {
	noGoroutineLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	client := newTCP(t, "client", echo, nil)
	if _, err := client.Call(callCtx(t), "", addr, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
	// Send does not wait for the connection: it succeeds (the message is
	// lost with the failed dial) or, when the dial has failed already,
	// says the peer is unreachable. Nothing else.
	if err := client.Send("", addr, nil); err != nil && !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Send to an unreachable peer: %v, want nil or ErrUnreachable", err)
	}
}

func TestTCPContextEnds(t *testing.T) {
	noGoroutineLeak(t)
	release := make(chan struct{})
	server := newTCP(t, "server", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		if string(body) == "slow" {
			<-release
		}
		return body, nil
	}}, nil)
	client := newTCP(t, "client", echo, nil)
	mustCall(t, client, server.Addr(), []byte("warm up"))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := client.Call(ctx, "", server.Addr(), []byte("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := client.Call(ctx, "", server.Addr(), []byte("never sent")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}

	// The late reply to "slow" arrives after its caller left; it must be
	// dropped, not handed to the next call on the connection.
	close(release)
	for i := range 20 {
		body := fmt.Appendf(nil, "next %d", i)
		if reply := mustCall(t, client, server.Addr(), body); !bytes.Equal(reply, body) {
			t.Fatalf("reply %q to %q", reply, body)
		}
	}
}

func TestTCPCloseFailsPendingCalls(t *testing.T) {
	noGoroutineLeak(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	server := newTCP(t, "server", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return body, nil
	}}, nil)
	defer close(release) // before server.Close in cleanup: it waits for the handler
	client := newTCP(t, "client", echo, nil)

	errc := make(chan error, 1)
	go func() {
		_, err := client.Call(context.Background(), "", server.Addr(), []byte("pending"))
		errc <- err
	}()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("call returned before its handler ran: %v", err)
	}
	if err := client.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("pending call: err %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending call did not return after Close")
	}
	if _, err := client.Call(context.Background(), "", server.Addr(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close: err %v, want ErrClosed", err)
	}
	if err := client.Send("", server.Addr(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: err %v, want ErrClosed", err)
	}
	if err := client.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestTCPCloseLeaksNoGoroutines(t *testing.T) {
	noGoroutineLeak(t)
	var nodes []*TCP
	for i := range 3 {
		nodes = append(nodes, newTCP(t, fmt.Sprintf("n%d", i), echo, func(c *TCPConfig) { c.ConnsPerPeer = 2 }))
	}
	for _, from := range nodes {
		for _, to := range nodes {
			mustCall(t, from, to.Addr(), []byte("x"))
			if err := from.Send("", to.Addr(), []byte("y")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A dial that is still in progress when Close runs must end too.
	blackhole := "10.255.255.1:9"
	_ = nodes[0].Send("", blackhole, []byte("lost"))
	for _, n := range nodes {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTCPIdleConnectionsClose(t *testing.T) {
	noGoroutineLeak(t)
	short := func(c *TCPConfig) { c.IdleTimeout = 50 * time.Millisecond }
	server := newTCP(t, "server", echo, short)
	client := newTCP(t, "client", echo, short)
	mustCall(t, client, server.Addr(), []byte("once"))
	eventually(t, "the server closes the idle connection", func() bool {
		return server.Stats().InboundConns == 0 && client.Stats().OutboundConns == 0
	})
	mustCall(t, client, server.Addr(), []byte("twice"))
	if s := client.Stats(); s.Dials != 2 {
		t.Fatalf("client dialed %d times, want 2", s.Dials)
	}
}

func TestTCPRetiresConnectionBeforeServerIdlesIt(t *testing.T) {
	noGoroutineLeak(t)
	// The server never idles connections out; the client retires its own
	// after half of its IdleTimeout, so the next call goes on a new one.
	server := newTCP(t, "server", echo, func(c *TCPConfig) { c.IdleTimeout = time.Hour })
	client := newTCP(t, "client", echo, func(c *TCPConfig) { c.IdleTimeout = 40 * time.Millisecond })
	mustCall(t, client, server.Addr(), []byte("once"))
	start := time.Now()
	eventually(t, "the connection has idled for half the idle timeout", func() bool {
		return time.Since(start) > 25*time.Millisecond
	})
	mustCall(t, client, server.Addr(), []byte("twice"))
	if s := client.Stats(); s.Dials != 2 {
		t.Fatalf("client dialed %d times, want 2", s.Dials)
	}
	eventually(t, "the retired connection closes", func() bool {
		return client.Stats().OutboundConns == 1 && server.Stats().InboundConns == 1
	})
}

func TestTCPStalledPeer(t *testing.T) {
	noGoroutineLeak(t)
	// A listener that accepts and never reads: the client's queue fills,
	// and the stuck write times out and closes the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	log := newErrorLog()
	client := newTCP(t, "client", echo, func(c *TCPConfig) {
		c.MaxFrameSize = 64 << 10
		c.MaxQueuedBytes = 256 << 10
		c.WriteTimeout = 100 * time.Millisecond
		c.OnError = log.record
	})
	// Keep sending until the kernel's buffers are full too and the
	// writer's deadline fires; the queue fills up on the way.
	body := make([]byte, 60<<10)
	var queueFull bool
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for len(log.all()) == 0 {
		err := client.Send("", ln.Addr().String(), body)
		switch {
		case errors.Is(err, ErrQueueFull):
			queueFull = true
			select { // the writer is busy: give it time to block or drain
			case <-tick.C:
			case <-deadline:
				t.Fatal("no write timeout reported")
			}
		case err != nil:
			t.Fatalf("Send: %v", err)
		}
	}
	if !queueFull {
		t.Fatal("Send never reported ErrQueueFull")
	}
	log.waitFor(t, ErrTimeout)
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("listener never accepted")
	}
}

// rawFrame encodes a frame with an arbitrary length field.
func rawFrame(length uint32, typ byte, id uint64, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, body...)
}

// A peer that stops answering (here: its handler never returns) costs a
// few timed-out calls, then the connection is given up and reported, and
// the next call dials a new one.
func TestSilentConnectionIsRedialed(t *testing.T) {
	block := make(chan struct{})
	var stuck atomic.Bool
	stuck.Store(true)
	server := newTCP(t, "server", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		if stuck.Load() {
			<-block
		}
		return body, nil
	}}, nil)
	defer close(block)
	log := newErrorLog()
	client := newTCP(t, "client", echo, func(c *TCPConfig) { c.OnError = log.record })
	for i := 0; i < silentTimeouts; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, err := client.Call(ctx, "", server.Addr(), []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: %v, want a timeout", i, err)
		}
		cancel()
	}
	log.waitFor(t, ErrUnresponsive)
	stuck.Store(false)
	if reply := mustCall(t, client, server.Addr(), []byte("y")); string(reply) != "y" {
		t.Fatalf("call on a new connection: %q", reply)
	}
}
