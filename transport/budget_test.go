package transport

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestBudgetOrderAndDeadline(t *testing.T) {
	b := newBudget(100)
	never := make(chan struct{})
	if !b.acquire(60, time.Now().Add(time.Second), never) {
		t.Fatal("60 of 100 refused")
	}
	if b.tryAcquire(50) {
		t.Fatal("50 more fit in 100")
	}
	// A waiter that does not fit gives up at its deadline.
	if b.acquire(50, time.Now().Add(20*time.Millisecond), never) {
		t.Fatal("50 more granted")
	}
	// Waiters are served in order: 30 would fit, but waits behind 70.
	got := make(chan int, 2)
	var wg sync.WaitGroup
	for _, n := range []int{70, 30} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.acquire(n, time.Now().Add(5*time.Second), never) {
				got <- n
			}
		}()
		waitUntil(t, "the waiter queued", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.waiters) > 0 && b.waiters[len(b.waiters)-1].n == int64(n)
		})
	}
	select {
	case n := <-got:
		t.Fatalf("%d granted ahead of its turn", n)
	default:
	}
	b.release(60)
	wg.Wait()
	if len(got) != 2 || b.inUse() != 100 || b.peak.Load() != 100 || b.refused.Load() != 2 {
		t.Fatalf("%d granted, in use %d, peak %d, refused %d", len(got), b.inUse(), b.peak.Load(), b.refused.Load())
	}
}

// waitUntil polls cond with a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// Frames held by handlers take room in MaxBytesInFlight: with it full, a
// further frame is not read, and when its FrameTimeout runs out its
// connection is closed with ErrBudget. Once the handlers return, frames
// are served again.
func TestTCPBytesInFlightBudget(t *testing.T) {
	noGoroutineLeak(t)
	const frame = 64 << 10
	log := newErrorLog()
	gate := make(chan struct{})
	slow := handlerFuncs{request: func(from string, body []byte) ([]byte, error) {
		if len(body) == frame {
			<-gate
		}
		return []byte("ok"), nil
	}}
	server := newTCP(t, "server", slow, func(c *TCPConfig) {
		c.MaxFrameSize = frame + frameHeaderSize
		c.MaxBytesInFlight = 4 * frame
		c.FrameTimeout = 300 * time.Millisecond
		c.OnError = log.record
	})
	body := make([]byte, frame)
	for i := range 5 {
		c := dialRaw(t, server.Addr())
		c.Write(helloFrame(helloV1, fmt.Sprintf("flood-%d", i)))
		c.Write(rawFrame(frameHeaderSize+frame, frameRequest, 1, body))
	}
	e := log.waitFor(t, ErrBudget)
	t.Logf("OnError(%q, %v)", e.peer, e.err)
	st := server.Stats()
	if st.BytesInFlight != 4*frame || st.PeakBytesInFlight != 4*frame || st.BudgetRefusals != 1 {
		t.Fatalf("%d bytes in flight, peak %d (budget %d), %d refusals", st.BytesInFlight, st.PeakBytesInFlight, 4*frame, st.BudgetRefusals)
	}
	close(gate)
	waitUntil(t, "the handlers to return", func() bool { return server.Stats().BytesInFlight == 0 })
	client := newTCP(t, "client", echo, nil)
	if reply := mustCall(t, client, server.Addr(), []byte("after")); string(reply) != "ok" {
		t.Fatalf("reply %q", reply)
	}
	if !errors.Is(e.err, ErrBudget) {
		t.Fatal(e.err)
	}
}
