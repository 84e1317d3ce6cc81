package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// goResult is what one Go's done received, and how often it was called.
type goResult struct {
	mu    sync.Mutex
	calls int
	reply []byte
	err   error
	done  chan struct{} // closed at the first call
}

func newGoResult() *goResult { return &goResult{done: make(chan struct{})} }

func (r *goResult) record(reply []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 {
		r.reply, r.err = reply, err
		close(r.done)
	}
}

// wait waits for done's first call and returns what it received.
func (r *goResult) wait(t *testing.T) ([]byte, error) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("done was not called")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reply, r.err
}

func (r *goResult) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// Go delivers each reply to its own done, once, with no goroutine of the
// caller waiting; many calls in flight on one connection each get theirs.
func TestTCPGoDeliversEachReplyOnce(t *testing.T) {
	noGoroutineLeak(t)
	server := newTCP(t, "server", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		return append([]byte("re: "), body...), nil
	}}, nil)
	client := newTCP(t, "client", echo, nil)
	const n = 50
	results := make([]*goResult, n)
	for i := range results {
		results[i] = newGoResult()
		if err := client.Go("", server.Addr(), fmt.Appendf(nil, "call %d", i), 5*time.Second, results[i].record); err != nil {
			t.Fatalf("Go %d: %v", i, err)
		}
	}
	for i, r := range results {
		reply, err := r.wait(t)
		if want := fmt.Appendf(nil, "re: call %d", i); err != nil || !bytes.Equal(reply, want) {
			t.Fatalf("call %d: reply %q, err %v; want %q", i, reply, err, want)
		}
	}
	// Their timers are stopped: none fires later with a second result.
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if c := r.count(); c != 1 {
			t.Fatalf("call %d: done called %d times", i, c)
		}
	}
}

// A Go whose reply does not come within its timeout gets
// context.DeadlineExceeded, once; the late reply is dropped, and the
// connection serves the next calls.
func TestTCPGoTimesOut(t *testing.T) {
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

	slow := newGoResult()
	if err := client.Go("", server.Addr(), []byte("slow"), 20*time.Millisecond, slow.record); err != nil {
		t.Fatal(err)
	}
	if _, err := slow.wait(t); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	close(release)
	next := newGoResult()
	if err := client.Go("", server.Addr(), []byte("next"), 5*time.Second, next.record); err != nil {
		t.Fatal(err)
	}
	if reply, err := next.wait(t); err != nil || string(reply) != "next" {
		t.Fatalf("next call: reply %q, err %v", reply, err)
	}
	if c := slow.count(); c != 1 {
		t.Fatalf("the timed-out call's done was called %d times", c)
	}
}

// Closing the transport fails a Go in flight with ErrClosed; a Go after
// Close returns ErrClosed and never calls done.
func TestTCPGoAndClose(t *testing.T) {
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

	pending := newGoResult()
	if err := client.Go("", server.Addr(), []byte("pending"), time.Minute, pending.record); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pending.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending Go: err %v, want ErrClosed", err)
	}
	after := newGoResult()
	if err := client.Go("", server.Addr(), nil, time.Minute, after.record); !errors.Is(err, ErrClosed) {
		t.Fatalf("Go after Close: err %v, want ErrClosed", err)
	}
	if c := after.count(); c != 0 {
		t.Fatalf("done of a Go that returned an error was called %d times", c)
	}
}

// A Go to an address nobody listens at reports ErrUnreachable, through
// done or at once.
func TestTCPGoUnreachable(t *testing.T) {
	noGoroutineLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	client := newTCP(t, "client", echo, nil)
	r := newGoResult()
	err = client.Go("", addr, []byte("x"), 5*time.Second, r.record)
	if err == nil {
		_, err = r.wait(t)
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
}

// The in-memory transport's Go reports what its Call would, through done.
func TestMemGo(t *testing.T) {
	network := NewNetwork(1)
	a, err := network.Listen("a", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := network.Listen("b", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		return append([]byte("re: "), body...), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ok := newGoResult()
	if err := a.Go("b", "b", []byte("hi"), 5*time.Second, ok.record); err != nil {
		t.Fatal(err)
	}
	if reply, err := ok.wait(t); err != nil || string(reply) != "re: hi" {
		t.Fatalf("reply %q, err %v", reply, err)
	}
	gone := newGoResult()
	if err := a.Go("nobody", "nobody", []byte("hi"), 5*time.Second, gone.record); err != nil {
		t.Fatal(err)
	}
	if _, err := gone.wait(t); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
}

// A Transport without Go of its own (one a user wrote, say) still serves
// Go: the package function makes the call on a goroutine and reports
// through done, once.
func TestGoFallsBackToCall(t *testing.T) {
	network := NewNetwork(1)
	srv, err := network.Listen("server", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		return append([]byte("re: "), body...), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := network.Listen("client", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var plain Transport = callOnly{cli}
	if _, ok := plain.(Async); ok {
		t.Fatal("callOnly implements Async: the test would not test the fallback")
	}
	got := make(chan string, 2)
	body := []byte("hello")
	if err := Go(plain, "server", srv.Addr(), body, time.Second, func(reply []byte, err error) {
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(reply)
	}); err != nil {
		t.Fatal(err)
	}
	copy(body, "XXXXX") // the caller may reuse body once Go returns
	select {
	case r := <-got:
		if r != "re: hello" {
			t.Fatalf("reply %q, want %q", r, "re: hello")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("done never called")
	}
	select {
	case r := <-got:
		t.Fatalf("done called twice (second: %q)", r)
	default:
	}
}

// callOnly hides every method of a Transport but the interface's.
type callOnly struct{ Transport }
