package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// handlerFuncs adapts two functions to Handler; nil ones echo or ignore.
type handlerFuncs struct {
	request func(from string, body []byte) ([]byte, error)
	message func(from string, body []byte)
}

func (h handlerFuncs) HandleRequest(from string, body []byte) ([]byte, error) {
	if h.request == nil {
		return body, nil
	}
	return h.request(from, body)
}

func (h handlerFuncs) HandleMessage(from string, body []byte) {
	if h.message != nil {
		h.message(from, body)
	}
}

var echo = handlerFuncs{}

// errorLog collects OnError reports and lets a test wait for one.
type errorLog struct {
	mu      sync.Mutex
	entries []errorEntry
	changed chan struct{} // closed and replaced on every report
}

type errorEntry struct {
	peer string
	err  error
}

func newErrorLog() *errorLog { return &errorLog{changed: make(chan struct{})} }

func (l *errorLog) record(peer string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, errorEntry{peer, err})
	close(l.changed)
	l.changed = make(chan struct{})
}

// waitFor waits until some report's error wraps every target, and returns it.
func (l *errorLog) waitFor(t *testing.T, targets ...error) errorEntry {
	t.Helper()
	return l.waitUntil(t, fmt.Sprintf("wrapping %v", targets), func(err error) bool { return wrapsAll(err, targets) })
}

// waitUntil waits until some report's error satisfies match, and returns it.
func (l *errorLog) waitUntil(t *testing.T, what string, match func(error) bool) errorEntry {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, e := range l.entries {
			if match(e.err) {
				l.mu.Unlock()
				return e
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no OnError report %s; got %v", what, l.all())
		}
	}
}

func (l *errorLog) all() []errorEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]errorEntry(nil), l.entries...)
}

func wrapsAll(err error, targets []error) bool {
	for _, target := range targets {
		if !errors.Is(err, target) {
			return false
		}
	}
	return true
}

// newTCP starts a loopback transport that is closed when the test ends.
func newTCP(t testing.TB, name string, h Handler, adjust func(*TCPConfig)) *TCP {
	t.Helper()
	cfg := DefaultLocalTCPConfig()
	cfg.Name = name
	cfg.Handler = h
	if adjust != nil {
		adjust(&cfg)
	}
	tr, err := NewTCP(cfg)
	if err != nil {
		t.Fatalf("NewTCP(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// eventually polls cond until it holds or the deadline passes. It is for
// conditions that have no event to wait on (goroutine counts, connection
// counts updated by other goroutines).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// noGoroutineLeak records the goroutine count and, at cleanup, waits for it
// to come back down.
func noGoroutineLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		var now int
		eventually(t, "goroutines are back to the count before the test", func() bool {
			now = runtime.NumGoroutine()
			return now <= before
		})
	})
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustCall makes a call that must succeed and returns the reply.
func mustCall(t testing.TB, tr Transport, addr string, body []byte) []byte {
	t.Helper()
	reply, err := tr.Call(callCtx(t), "", addr, body)
	if err != nil {
		t.Fatalf("Call(%s, %q): %v", addr, body, err)
	}
	return reply
}
