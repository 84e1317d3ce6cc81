package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The agent's API over a real socket, with fakes for what the mesh does not
// have yet (elections, listing locks): the protocol, the connection-tied
// candidacy and the exit statuses are ready for the real thing.

type fakeElection struct {
	feed     []leaderInfo   // what Observe sends
	resigned chan string    // names resigned
	won      chan *fakeLead // candidacies won
}

func (f *fakeElection) Campaign(ctx context.Context, name, value string, ttl time.Duration) (leadership, error) {
	l := &fakeLead{info: leaderInfo{Name: name, Node: "fake", Value: value, Token: 7}, done: make(chan struct{}), f: f}
	f.won <- l
	return l, nil
}

func (f *fakeElection) Observe(ctx context.Context, name string) (<-chan leaderInfo, error) {
	ch := make(chan leaderInfo)
	go func() {
		defer close(ch)
		for _, l := range f.feed {
			select {
			case ch <- l:
			case <-ctx.Done():
				return
			}
		}
		<-ctx.Done()
	}()
	return ch, nil
}

type fakeLead struct {
	info leaderInfo
	f    *fakeElection
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func (l *fakeLead) Leader() leaderInfo    { return l.info }
func (l *fakeLead) Done() <-chan struct{} { return l.done }
func (l *fakeLead) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
func (l *fakeLead) end(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	})
}
func (l *fakeLead) Resign(context.Context) error {
	l.end(errors.New("resigned"))
	l.f.resigned <- l.info.Name
	return nil
}

type fakeLocks []mesh.Holder

func (f fakeLocks) Locks(ctx context.Context, prefix string) ([]mesh.Holder, error) { return f, nil }

// apiFixture serves an apiServer with the given elections and locks (nil:
// not supported) on a socket, and returns its path.
func apiFixture(t *testing.T, elect electionAPI, locks locksAPI) string {
	path := filepath.Join(t.TempDir(), "api.sock")
	ln, err := listenSocket(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := &apiServer{node: "fake", cfg: mesh.DefaultConfig(), elect: elect, locks: locks, conns: make(map[*apiConn]struct{})}
	go s.serve(ln)
	t.Cleanup(func() {
		ln.Close()
		s.close()
	})
	return path
}

func dialT(t *testing.T, path string) *client {
	t.Helper()
	cl, err := dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.close)
	return cl
}

func TestAPIElections(t *testing.T) {
	f := &fakeElection{resigned: make(chan string, 4), won: make(chan *fakeLead, 4),
		feed: []leaderInfo{{Name: "e"}, {Name: "e", Node: "n1", Value: "v1", Token: 3}}}
	path := apiFixture(t, f, nil)
	ctx := context.Background()

	// A candidacy lives as long as its connection.
	cl := dialT(t, path)
	r, err := cl.call(ctx, request{Op: opCampaign, Name: "e", Value: "me"})
	if err != nil || r.Leader == nil || r.Leader.Value != "me" || r.Leader.Token != 7 {
		t.Fatalf("campaign: %+v, %v", r.Leader, err)
	}
	recv(t, f.won)
	if _, err := cl.call(ctx, request{Op: opCampaign, Name: "e2", Value: "me"}); exitCodeOf(codeOf(err)) != exitUsage {
		t.Errorf("a second campaign on one connection: %v, want a usage error", err)
	}
	cl.close()
	if got := recv(t, f.resigned); got != "e" {
		t.Errorf("closing the connection resigned %q", got)
	}

	// Losing leadership ends campaign with exitLost.
	cl = dialT(t, path)
	go func() {
		select {
		case l := <-f.won:
			l.end(errors.New("taken over"))
		case <-time.After(10 * time.Second):
		}
	}()
	err = campaign(ctx, cl, request{Op: opCampaign, Name: "e", Value: "me"}, leaderPrinter{})
	var e *exitErr
	if !errors.As(err, &e) || e.code != exitLost {
		t.Errorf("campaign after a loss: %v, want exit %d", err, exitLost)
	}

	// Interrupted, a leader resigns and exits 0.
	cl = dialT(t, path)
	if _, err := cl.call(ctx, request{Op: opCampaign, Name: "e3", Value: "me"}); err != nil {
		t.Fatal(err)
	}
	recv(t, f.won)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := lead(cctx, cl, "e3"); err != nil {
		t.Errorf("interrupted leader: %v", err)
	}
	if got := recv(t, f.resigned); got != "e3" {
		t.Errorf("resigned %q", got)
	}

	// Observers get every change as an event.
	cl = dialT(t, path)
	if _, err := cl.call(ctx, request{Op: opObserve, Name: "e"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range f.feed {
		if ev := recv(t, cl.events); ev.Event != "leader" || *ev.Leader != want {
			t.Errorf("event %+v, want leader %+v", ev, want)
		}
	}
}

// recv receives from ch, or fails the test after 10 seconds.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
	}
	var zero T
	return zero
}

func codeOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func TestAPILocks(t *testing.T) {
	want := fakeLocks{{Key: "a/1", Held: true, Node: "n", Token: 5, Value: []byte("v\x00"), TimeLeft: time.Second}}
	cl := dialT(t, apiFixture(t, nil, want))
	r, err := cl.call(context.Background(), request{Op: opLocks, Key: "a/"})
	if err != nil || len(r.Locks) != 1 || !reflect.DeepEqual(r.Locks[0], want[0]) {
		t.Errorf("locks: %+v, %v", r.Locks, err)
	}
}

// TestAPINotYet: an agent without elections and lock listing (a server
// built without them) says so, and the commands exit 65.
func TestAPINotYet(t *testing.T) {
	cl := dialT(t, apiFixture(t, nil, nil))
	for _, op := range []string{opCampaign, opObserve, opLocks} {
		_, err := cl.call(context.Background(), request{Op: op, Name: "e"})
		if code := codeOf(err); code != codeUnsupported || exitCodeOf(code) != exitUnsupported {
			t.Errorf("%s: %v, want code %s (exit %d)", op, err, codeUnsupported, exitUnsupported)
		}
	}
}

// TestAPIRefusals: another protocol version, an unknown operation, and a
// line that does not parse (which ends the connection).
func TestAPIRefusals(t *testing.T) {
	path := apiFixture(t, nil, nil)
	cl := dialT(t, path)
	if _, err := cl.call(context.Background(), request{Op: "frobnicate"}); codeOf(err) != codeUsage {
		t.Errorf("unknown op: %v", err)
	}
	if _, err := cl.call(context.Background(), request{Op: opRelease}); codeOf(err) != codeNotHeld {
		t.Errorf("release with no lease: %v", err)
	}

	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sc := bufio.NewScanner(nc)
	var hello reply
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &hello) != nil || hello.Event != "hello" || hello.V != apiVersion {
		t.Fatalf("hello: %q", sc.Text())
	}
	for _, tc := range []struct{ line, code string }{
		{`{"v":2,"id":1,"op":"status"}`, codeVersion},
		{`{"v":1,"id":2,"op":`, codeUsage},
	} {
		nc.Write([]byte(tc.line + "\n"))
		var r reply
		if !sc.Scan() || json.Unmarshal(sc.Bytes(), &r) != nil || r.Error == nil || r.Error.Code != tc.code {
			t.Errorf("%s: answered %q, want code %s", tc.line, sc.Text(), tc.code)
		}
	}
	if sc.Scan() {
		t.Errorf("the connection stayed open after an unreadable line: %q", sc.Text())
	}
}

// TestAPIHungClientLosesLease: a client of the socket protocol takes a
// lock with a heartbeat window of 1 s, then stops sending (its connection
// left open). The agent releases the lease and tells it "lost"; a waiter
// gets the key no later than the window plus a round trip after the hung
// client's last request was sent.
func TestAPIHungClientLosesLease(t *testing.T) {
	m, cfg := startMesh(t)
	path := filepath.Join(t.TempDir(), "api.sock")
	ln, err := listenSocket(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := newAPIServer(m, cfg)
	go s.serve(ln)
	t.Cleanup(func() {
		ln.Close()
		s.close()
	})
	hung, waiter := dialT(t, path), dialT(t, path)
	ctx := context.Background()
	const window = time.Second
	if _, err := hung.call(ctx, request{Op: opAcquire, Key: "ndjson-hung", Heartbeat: int64(window)}); err != nil {
		t.Fatal(err)
	}
	lastSent := time.Now()
	if _, err := hung.call(ctx, request{Op: opLease}); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.call(ctx, request{Op: opAcquire, Key: "ndjson-hung", Timeout: int64(20 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(lastSent)
	t.Logf("granted %v after the hung client's last request (heartbeat window %v)", took.Round(time.Millisecond), window)
	if took < window || took > window+750*time.Millisecond {
		t.Errorf("granted %v after the last request, want between %v and %v", took, window, window+750*time.Millisecond)
	}
	ev := recv(t, hung.events)
	if ev.Event != "lost" || !strings.Contains(ev.Message, "no request for 1s") {
		t.Errorf("the hung client was told %+v", ev)
	}
}
