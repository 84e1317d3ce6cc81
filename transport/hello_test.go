package transport

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
)

// helloSeen records what CheckHello was given.
type helloSeen struct {
	mu   sync.Mutex
	seen []helloCheck
}

type helloCheck struct {
	peer    string
	version int
	payload []byte
}

// check returns a CheckHello that records each hello and refuses with
// refuse, if set.
func (s *helloSeen) check(refuse error) func(string, int, []byte) error {
	return func(peer string, version int, payload []byte) error {
		s.mu.Lock()
		s.seen = append(s.seen, helloCheck{peer, version, bytes.Clone(payload)})
		s.mu.Unlock()
		return refuse
	}
}

func (s *helloSeen) all() []helloCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]helloCheck(nil), s.seen...)
}

// Two nodes of hello version 2 each judge the other's payload once per
// connection: the listener the dialer's hello, the dialer the listener's
// answer.
func TestHelloPayloadsBothWays(t *testing.T) {
	var dialer, listener helloSeen
	srv := newTCP(t, "srv", echo, func(c *TCPConfig) {
		c.Hello = []byte("srv-settings")
		c.CheckHello = listener.check(nil)
	})
	cli := newTCP(t, "cli", echo, func(c *TCPConfig) {
		c.Hello = []byte("cli-settings")
		c.CheckHello = dialer.check(nil)
	})
	if _, err := cli.Call(callCtx(t), "srv", srv.Addr(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := listener.all(); len(got) != 1 || got[0].peer != "cli" || got[0].version != 2 || string(got[0].payload) != "cli-settings" {
		t.Errorf("the listener judged %+v", got)
	}
	if got := dialer.all(); len(got) != 1 || got[0].peer != "srv" || got[0].version != 2 || string(got[0].payload) != "srv-settings" {
		t.Errorf("the dialer judged %+v", got)
	}
}

// A listener that refuses the dialer's hello answers with its own first and
// handles nothing the dialer sent; both sides report the refusal.
func TestHelloRefusedByListener(t *testing.T) {
	refusal := errors.New("your settings are wrong")
	var dialer helloSeen
	handled := make(chan []byte, 1)
	srvErrs, cliErrs := newErrorLog(), newErrorLog()
	srv := newTCP(t, "srv", handlerFuncs{request: func(_ string, b []byte) ([]byte, error) {
		handled <- b
		return b, nil
	}}, func(c *TCPConfig) {
		c.Hello = []byte("srv")
		c.CheckHello = func(string, int, []byte) error { return refusal }
		c.OnError = srvErrs.record
	})
	cli := newTCP(t, "cli", echo, func(c *TCPConfig) {
		c.CheckHello = dialer.check(nil)
		c.OnError = cliErrs.record
	})
	_, err := cli.Call(callCtx(t), "srv", srv.Addr(), []byte("x"))
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("the call returned %v, want ErrConnClosed", err)
	}
	if e := srvErrs.waitFor(t, ErrHandshake, refusal); e.peer != "cli" {
		t.Errorf("the listener reported the refusal of %q", e.peer)
	}
	// (The call may have been tried on a second connection: a dialed
	// connection that failed before the request was queued on it.)
	if got := dialer.all(); len(got) == 0 || slices.ContainsFunc(got, func(c helloCheck) bool { return string(c.payload) != "srv" }) {
		t.Errorf("the dialer did not get the listener's answer before the close: %+v", got)
	}
	select {
	case b := <-handled:
		t.Errorf("the listener handled %q from a dialer it refused", b)
	default:
	}
}

// A dialer that refuses the listener's answer fails the calls queued on the
// connection with its reason.
func TestHelloRefusedByDialer(t *testing.T) {
	refusal := errors.New("the listener's settings are wrong")
	cliErrs := newErrorLog()
	srv := newTCP(t, "srv", echo, func(c *TCPConfig) { c.Hello = []byte("srv") })
	cli := newTCP(t, "cli", echo, func(c *TCPConfig) {
		c.CheckHello = func(string, int, []byte) error { return refusal }
		c.OnError = cliErrs.record
	})
	_, err := cli.Call(callCtx(t), "srv", srv.Addr(), []byte("x"))
	if !errors.Is(err, ErrConnClosed) || !errors.Is(err, refusal) || !errors.Is(err, ErrHandshake) {
		t.Fatalf("the call returned %v, want the refusal", err)
	}
	cliErrs.waitFor(t, ErrHandshake, refusal)
}

// A dialer told that its peer predates version 2 sends the first hello; the
// listener takes it, judges it with no payload, and answers nothing.
func TestHelloVersion1StillConnects(t *testing.T) {
	var listener helloSeen
	srv := newTCP(t, "srv", echo, func(c *TCPConfig) {
		c.Hello = []byte("srv")
		c.CheckHello = listener.check(nil)
	})
	cli := newTCP(t, "cli", echo, func(c *TCPConfig) {
		c.Hello = []byte("cli")
		c.HelloVersion = func(node string) int { return 1 }
		c.CheckHello = func(string, int, []byte) error { t.Error("judged an answer to a version-1 hello"); return nil }
	})
	if got := mustCall(t, cli, srv.Addr(), []byte("x")); string(got) != "x" {
		t.Fatalf("reply %q", got)
	}
	if got := listener.all(); len(got) != 1 || got[0].version != 1 || got[0].payload != nil || got[0].peer != "cli" {
		t.Errorf("the listener judged %+v", got)
	}
}

// A listener that predates version 2 refuses a version-2 hello by closing
// the connection: the dialer's call fails and OnError says what happened.
func TestHelloVersion2ToOldListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var scratch [lengthPrefixSize + frameHeaderSize]byte
		_, body, err := readFrame(bufio.NewReader(c), &scratch, DefaultMaxFrameSize)
		if err == nil && body[0] != helloV1 {
			c.Close() // what a listener of version 1 does
		}
	}()
	cliErrs := newErrorLog()
	cli := newTCP(t, "cli", echo, func(c *TCPConfig) {
		c.Hello = []byte("cli")
		c.OnError = cliErrs.record
	})
	if _, err := cli.Call(callCtx(t), "old", ln.Addr().String(), []byte("x")); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("the call returned %v, want ErrConnClosed", err)
	}
	cliErrs.waitFor(t, ErrHandshake)
}
