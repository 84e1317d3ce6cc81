package meshtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/meshtest"
)

// The user's test of the package's documentation, as written there.
func TestJobStopsWhenItsLeaseIsLost(t *testing.T) {
	c := meshtest.New(t, 3)
	ctx := t.Context()
	j := startJob(ctx, c.Node(0))
	l := <-j.held
	c.LoseLease(l)
	if err := <-j.stopped; !errors.Is(err, mesh.ErrLeaseLost) {
		t.Fatalf("the job stopped with %v, want a lost lease", err)
	}
}

// New returns a cluster whose every node is ready, each on a data
// directory of its own, and every node a voter.
func TestNewIsReady(t *testing.T) {
	c := meshtest.New(t, 3)
	if c.Len() != 3 {
		t.Fatalf("Len %d", c.Len())
	}
	dirs := map[string]bool{}
	for i := range c.Len() {
		st := c.Node(i).Status()
		if !st.Ready || st.VotingState != mesh.Live || len(st.Voters) != 3 || st.Name != c.Name(i) {
			t.Errorf("%s: ready %v, %v, voters %v", c.Name(i), st.Ready, st.VotingState, st.Voters)
		}
		if st.DataDir == nil || dirs[st.DataDir.Path] {
			t.Errorf("%s: data directory %+v", c.Name(i), st.DataDir)
		} else {
			dirs[st.DataDir.Path] = true
		}
	}
}

// LoseLease ends the lease as lost at once, through the holder's node:
// the lease's channels and context say so, and the key goes to a waiter
// on another node under a higher token, without waiting for the voters'
// TTL.
func TestLoseLease(t *testing.T) {
	c := meshtest.New(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := c.Node(2).Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	done, lctx := l.Done(), l.Context()
	got := make(chan *mesh.Lease, 1)
	go func() {
		next, err := c.Node(0).Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- next
	}()
	start := time.Now()
	c.LoseLease(l)
	lost := time.Since(start)
	for name, ch := range map[string]<-chan struct{}{"Done": done, "Context().Done": lctx.Done()} {
		select {
		case <-ch:
		default:
			t.Errorf("%s open after LoseLease", name)
		}
	}
	if !errors.Is(context.Cause(lctx), mesh.ErrLeaseLost) {
		t.Errorf("context's cause %v", context.Cause(lctx))
	}
	next := <-got
	if next == nil {
		return
	}
	t.Logf("lost in %v; the waiter had the key %v after LoseLease began", lost, time.Since(start))
	if next.Token() <= l.Token() {
		t.Errorf("token %d after %d", next.Token(), l.Token())
	}
	// Without the clock's wake-up the node would act at its next renewal
	// (TTL/3 after the grant); without the clock, at the notice time.
	if lost > l.TTL()/4 {
		t.Errorf("LoseLease took %v: the node did not act on its clock at once", lost)
	}
}

// An isolated voter grants nothing and is not ready; the other two still
// grant; once healed, it is ready again and grants.
func TestIsolateAndHeal(t *testing.T) {
	c := meshtest.New(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c.Isolate(0)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.Node(0).TryAcquire(short, "a")
	cancelShort()
	if !errors.Is(err, mesh.ErrNoQuorum) {
		t.Errorf("an isolated voter's try: %v, want ErrNoQuorum", err)
	}
	if _, err := c.Node(1).TryAcquire(ctx, "b"); err != nil {
		t.Errorf("the other two voters: %v", err)
	}
	c.WaitReady() // the two that are not cut off
	c.Heal()
	c.WaitReady()
	if _, err := c.Node(0).TryAcquire(ctx, "a"); err != nil {
		t.Errorf("after Heal: %v", err)
	}
}

// A stopped holder's key is free again once the voters' TTL passes; the
// node restarts on its name and gossip address, ready.
func TestStopAndRestart(t *testing.T) {
	c := meshtest.New(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := c.Node(1).Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Node(1).Addr()
	c.Stop(1)
	next, err := c.Node(0).Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= l.Token() {
		t.Errorf("token %d after %d", next.Token(), l.Token())
	}
	start := time.Now()
	m := c.Restart(1)
	t.Logf("restarted, ready, in %v", time.Since(start))
	if m.Name() != "node1" || m.Addr() != addr || m != c.Node(1) {
		t.Errorf("restarted as %s at %s (was %s)", m.Name(), m.Addr(), addr)
	}
	if st := m.Status(); !st.Ready || st.VotingState != mesh.Live {
		t.Errorf("restarted: ready %v, %v: %s", st.Ready, st.VotingState, st.Waiting)
	}
	if _, err := m.TryAcquire(ctx, "k2"); err != nil {
		t.Error(err)
	}
}

// LoseLease fails the test, saying why, when the lease has ended already.
func TestLoseLeaseOfAnEndedLease(t *testing.T) {
	rec := &recordingTB{TB: t}
	c := meshtest.New(rec, 1)
	l, err := c.Node(0).Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.LoseLease(l)
	}()
	<-done
	if want := "has ended already"; !strings.Contains(rec.failure, want) {
		t.Errorf("LoseLease of a released lease failed with %q, want %q", rec.failure, want)
	}
}

// recordingTB records a Fatalf and ends the goroutine that called it, as
// testing.T does, without failing the test.
type recordingTB struct {
	testing.TB
	failure string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// How long Start takes to return a ready 3-node cluster (ms-to-ready, the
// median), with what Close takes besides.
func BenchmarkStart3(b *testing.B) {
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := meshtest.Start(3)
		if err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		c.Close()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-to-ready")
}
