package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memNode is a MemTransport whose handler counts what it receives.
type memNode struct {
	*MemTransport
	requests atomic.Int64
	messages chan string
}

func listenMem(t *testing.T, n *Network, name string) *memNode {
	t.Helper()
	node := &memNode{messages: make(chan string, 1000)}
	m, err := n.Listen(name, handlerFuncs{
		request: func(from string, body []byte) ([]byte, error) {
			node.requests.Add(1)
			switch string(body) {
			case "fail":
				return nil, errors.New("no such ballot")
			case "reject":
				return nil, fmt.Errorf("stranger %s: %w", from, ErrRejectPeer)
			}
			return []byte(name + " got " + string(body) + " from " + from), nil
		},
		message: func(from string, body []byte) { node.messages <- from + ":" + string(body) },
	})
	if err != nil {
		t.Fatal(err)
	}
	node.MemTransport = m
	t.Cleanup(func() { _ = m.Close() })
	return node
}

// expectLost checks that a call from → to gets no answer before its
// deadline.
func expectLost(t *testing.T, from Transport, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if reply, err := from.Call(ctx, "", to, []byte("ping")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call %s → %s: reply %q, err %v; want it lost (deadline exceeded)", from.Addr(), to, reply, err)
	}
}

func expectMessage(t *testing.T, n *memNode, want string) {
	t.Helper()
	select {
	case got := <-n.messages:
		if got != want {
			t.Fatalf("%s received %q, want %q", n.Addr(), got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s received nothing, want %q", n.Addr(), want)
	}
}

// quiesce waits until every frame sent has been delivered or dropped.
func quiesce(t *testing.T, n *Network) NetworkStats {
	t.Helper()
	var s NetworkStats
	eventually(t, "no frame is in flight", func() bool {
		s = n.Stats()
		return s.Sent+s.Duplicated == s.Delivered+s.Dropped
	})
	return s
}

func TestMemRoundTrip(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(1)
	a, b := listenMem(t, n, "a"), listenMem(t, n, "b")
	if b.Addr() != "b" {
		t.Fatalf("Addr() = %q", b.Addr())
	}
	if reply := mustCall(t, a, "b", []byte("hi")); string(reply) != "b got hi from a" {
		t.Fatalf("reply %q", reply)
	}
	if err := a.Send("", "b", []byte("note")); err != nil {
		t.Fatal(err)
	}
	expectMessage(t, b, "a:note")

	var re *RemoteError
	if _, err := a.Call(callCtx(t), "", "b", []byte("fail")); !errors.As(err, &re) || re.Message != "no such ballot" || re.Addr != "b" {
		t.Fatalf("err %v, want RemoteError from b", err)
	}
	if _, err := a.Call(callCtx(t), "", "b", []byte("reject")); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("err %v, want ErrConnClosed", err)
	}
	if _, err := a.Call(callCtx(t), "", "nobody", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call to an unknown node: err %v, want ErrUnreachable", err)
	}
	if err := a.Send("", "nobody", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to an unknown node: err %v, want ErrUnreachable", err)
	}
	if _, err := n.Listen("a", echo); err == nil {
		t.Fatal("Listen accepted a name in use")
	}
	if s := quiesce(t, n); s.Sent != 7 || s.Delivered != 7 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want 7 frames sent and delivered", s)
	}
}

func TestMemCloseAndRestart(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(1)
	a := listenMem(t, n, "a")
	entered, release := make(chan struct{}), make(chan struct{})
	b, err := n.Listen("b", handlerFuncs{request: func(_ string, body []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release
		return body, nil
	}})
	if err != nil {
		t.Fatal(err)
	}

	// A call pending on a transport that closes fails with ErrClosed.
	errc := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), "", "b", []byte("slow"))
		errc <- err
	}()
	<-entered
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending call: err %v, want ErrClosed", err)
	}
	if _, err := a.Call(callCtx(t), "", "b", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on a closed transport: err %v, want ErrClosed", err)
	}
	if err := a.Send("", "b", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send on a closed transport: err %v, want ErrClosed", err)
	}
	close(release)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// A closed node is refused like a port nobody listens on; its name
	// can be listened on again.
	c := listenMem(t, n, "c")
	if _, err := c.Call(callCtx(t), "", "b", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call to a closed node: err %v, want ErrUnreachable", err)
	}
	listenMem(t, n, "b")
	if reply := mustCall(t, c, "b", []byte("again")); string(reply) != "b got again from c" {
		t.Fatalf("reply %q", reply)
	}
}

func TestMemPartition(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(1)
	a, b, c := listenMem(t, n, "a"), listenMem(t, n, "b"), listenMem(t, n, "c")

	n.Partition([]string{"a", "b"}, []string{"c"})
	mustCall(t, a, "b", []byte("x"))
	mustCall(t, b, "a", []byte("x"))
	expectLost(t, a, "c")
	expectLost(t, c, "a")
	expectLost(t, c, "b")
	if c.requests.Load() != 0 {
		t.Fatal("a request crossed the partition")
	}

	// Nodes named in no group are together in a group of their own.
	n.Partition([]string{"a"})
	mustCall(t, b, "c", []byte("x"))
	expectLost(t, b, "a")

	n.Heal()
	mustCall(t, a, "c", []byte("x"))
	mustCall(t, c, "a", []byte("x"))
}

func TestMemCut(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(1)
	a, b := listenMem(t, n, "a"), listenMem(t, n, "b")
	n.Cut("a", "b")

	expectLost(t, a, "b")
	if b.requests.Load() != 0 {
		t.Fatal("a's request crossed the cut")
	}
	// b's request reaches a, but a's reply to it is lost.
	expectLost(t, b, "a")
	if a.requests.Load() != 1 {
		t.Fatalf("a handled %d requests, want 1", a.requests.Load())
	}
	if err := b.Send("", "a", []byte("up")); err != nil {
		t.Fatal(err)
	}
	expectMessage(t, a, "b:up")
	if err := a.Send("", "b", []byte("down")); err != nil {
		t.Fatal(err)
	}

	n.Heal()
	mustCall(t, a, "b", []byte("x"))
	if err := a.Send("", "b", []byte("healed")); err != nil {
		t.Fatal(err)
	}
	expectMessage(t, b, "a:healed") // "down" was lost, not delayed
}

func TestMemDrops(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(42)
	a, b := listenMem(t, n, "a"), listenMem(t, n, "b")

	n.SetDropRate(1)
	expectLost(t, a, "b")

	n.SetDropRate(0.5)
	const sends = 1000
	for i := range sends {
		if err := a.Send("", "b", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	s := quiesce(t, n)
	delivered := s.Delivered
	if delivered < sends*4/10 || delivered > sends*6/10 {
		t.Fatalf("%d of %d messages delivered at drop rate 0.5", delivered, sends)
	}
	if got := len(b.messages); uint64(got) != delivered {
		t.Fatalf("handler saw %d messages, stats say %d delivered", got, delivered)
	}

	n.SetDropRate(0)
	mustCall(t, a, "b", []byte("x"))
}

func TestMemDropsAreReproducible(t *testing.T) {
	noGoroutineLeak(t)
	run := func() []string {
		n := NewNetwork(7)
		n.SetDropRate(0.3)
		a := listenMem(t, n, "a")
		b := listenMem(t, n, "b")
		for i := range 100 {
			if err := a.Send("", "b", fmt.Appendf(nil, "%02d", i)); err != nil {
				t.Fatal(err)
			}
		}
		s := quiesce(t, n)
		got := make([]string, 0, s.Delivered)
		for range s.Delivered {
			got = append(got, <-b.messages)
		}
		slices.Sort(got)
		return got
	}
	first, second := run(), run()
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("same seed, different losses:\n%v\n%v", first, second)
	}
}

func TestMemDelayAndReorder(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(3)
	a, b := listenMem(t, n, "a"), listenMem(t, n, "b")
	n.SetDelay(20*time.Millisecond, 30*time.Millisecond)

	start := time.Now()
	mustCall(t, a, "b", []byte("x"))
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("a call with two delayed frames took %v, want at least 40ms", took)
	}

	n.SetDelay(0, 5*time.Millisecond)
	const sends = 50
	for i := range sends {
		if err := a.Send("", "b", fmt.Appendf(nil, "%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for range sends {
		select {
		case m := <-b.messages:
			order = append(order, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("received %d of %d delayed messages", len(order), sends)
		}
	}
	inversions := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Fatal("random delays did not reorder any of 50 messages")
	}

	// Closing a node loses the frames still in flight to it.
	n.SetDelay(time.Hour, time.Hour)
	if err := a.Send("", "b", []byte("never")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if s := quiesce(t, n); s.Dropped != 1 {
		t.Fatalf("stats %+v, want the in-flight frame dropped", s)
	}
}

func TestMemDuplicates(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(5)
	a, b := listenMem(t, n, "a"), listenMem(t, n, "b")
	n.SetDuplicateRate(1)

	if err := a.Send("", "b", []byte("twice")); err != nil {
		t.Fatal(err)
	}
	expectMessage(t, b, "a:twice")
	expectMessage(t, b, "a:twice")

	if reply := mustCall(t, a, "b", []byte("x")); string(reply) != "b got x from a" {
		t.Fatalf("reply %q", reply)
	}
	quiesce(t, n)
	if got := b.requests.Load(); got != 2 {
		t.Fatalf("handler ran %d times for a duplicated request, want 2", got)
	}
}

func TestMemConcurrentCalls(t *testing.T) {
	noGoroutineLeak(t)
	n := NewNetwork(9)
	nodes := []*memNode{listenMem(t, n, "a"), listenMem(t, n, "b"), listenMem(t, n, "c")}
	n.SetDelay(0, time.Millisecond)
	var wg sync.WaitGroup
	for _, from := range nodes {
		for _, to := range nodes {
			wg.Go(func() {
				for i := range 50 {
					body := fmt.Sprintf("%d", i)
					reply, err := from.Call(context.Background(), "", to.Addr(), []byte(body))
					if want := to.Addr() + " got " + body + " from " + from.Addr(); err != nil || string(reply) != want {
						t.Errorf("reply %q, err %v; want %q", reply, err, want)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}
