package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A lease's value travels with its grant: Holder on another node reads it,
// a try that finds the key held names it, SetValue changes it through the
// voters, and a release clears it. A value over MaxValueSize is refused
// with a clear error.
func TestLeaseValue(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "svc/api", WithValue([]byte("10.0.0.1:8443")))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(l.Value()); got != "10.0.0.1:8443" {
		t.Errorf("Lease.Value = %q", got)
	}
	h, err := c.nodes[1].Holder(ctx, "svc/api")
	if err != nil || !h.Held || h.Node != "node0" || h.Token != l.Token() || string(h.Value) != "10.0.0.1:8443" {
		t.Fatalf("Holder on another node: %+v, %v", h, err)
	}
	_, err = c.nodes[2].TryAcquire(ctx, "svc/api")
	var locked *LockedError
	if !errors.As(err, &locked) || string(locked.Value) != "10.0.0.1:8443" {
		t.Fatalf("a try on a held key: %v (value %q)", err, locked.Value)
	}

	before := l.Deadline()
	if err := l.SetValue(ctx, []byte("10.0.0.9:8443")); err != nil {
		t.Fatalf("SetValue: %v", err)
	}
	if h, err := c.nodes[2].Holder(ctx, "svc/api"); err != nil || string(h.Value) != "10.0.0.9:8443" || h.Token != l.Token() {
		t.Fatalf("Holder after SetValue: %+v, %v", h, err)
	}
	if string(l.Value()) != "10.0.0.9:8443" {
		t.Errorf("Lease.Value after SetValue = %q", l.Value())
	}
	if !l.Deadline().After(before) {
		t.Errorf("SetValue renews: deadline %v, was %v", l.Deadline(), before)
	}

	big := bytes.Repeat([]byte("x"), 1025)
	if err := l.SetValue(ctx, big); !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), "MaxValueSize is 1024") {
		t.Errorf("SetValue of 1025 bytes: %v", err)
	}
	if _, err := c.nodes[1].Acquire(ctx, "other", WithValue(big)); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("WithValue of 1025 bytes: %v", err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.SetValue(ctx, []byte("late")); !errors.Is(err, ErrReleased) {
		t.Errorf("SetValue after Release: %v", err)
	}
	if h, err := c.nodes[1].Holder(ctx, "svc/api"); err != nil || h.Held || h.Value != nil {
		t.Fatalf("Holder after release: %+v, %v", h, err)
	}
	l2, err := c.nodes[1].Acquire(ctx, "svc/api", WithValue([]byte("second")))
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := c.nodes[0].Holder(ctx, "svc/api"); string(h.Value) != "second" || h.Token <= l.Token() {
		t.Errorf("a new grant carries its own value: %+v", h)
	}
	l2.Release(ctx)
}

// A lease lost to a partition: Done closes before the deadline, Release
// then says the lease was lost (ErrLeaseLost), and SetValue is refused.
func TestReleaseOfLostLeaseSaysSo(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[3].Acquire(ctx, "k", WithValue([]byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	c.net.Partition([]string{"node3"}, []string{"node0", "node1", "node2"})
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the lease of a node cut off from every voter was never reported lost")
	}
	c.net.Heal()
	if err := l.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Release of a lost lease: %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Release again: %v", err)
	}
	if err := l.SetValue(ctx, []byte("w")); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("SetValue on a lost lease: %v", err)
	}
}

// Granted is when the holder's clock started (before Acquire returned,
// and the deadline counts from it); Renewed fires each time the deadline
// moves.
func TestLeaseGrantTimeAndRenewals(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	called := time.Now()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	g := l.Granted()
	if g.Before(called) || g.After(returned) || !l.Deadline().After(g) {
		t.Errorf("Granted %v: want within the Acquire call [%v, %v], before the deadline %v", g, called, returned, l.Deadline())
	}
	if l.TTL() != c.nodes[0].cfg.Timing.TTL {
		t.Errorf("TTL %v", l.TTL())
	}
	for i := 0; i < 2; i++ {
		renewed := l.Renewed()
		d := l.Deadline()
		select {
		case <-renewed:
		case <-ctx.Done():
			t.Fatalf("renewal %d never came", i+1)
		}
		if !l.Deadline().After(d) {
			t.Errorf("Renewed fired but the deadline stayed at %v", d)
		}
	}
	if l.Granted() != g {
		t.Errorf("a renewal moved Granted")
	}
	end := l.Renewed()
	l.Release(ctx)
	select {
	case <-end:
	default:
		t.Error("Renewed's channel is not closed when the lease ends")
	}
}

// An Acquire whose ctx ends while another holds the key says so, typed:
// what it waited for, and that nothing was granted to it.
func TestAcquireCancelledSaysWhy(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	_, err = c.nodes[1].Acquire(short, "k")
	var ce *CancelledError
	var locked *LockedError
	switch {
	case !errors.As(err, &ce):
		t.Fatalf("Acquire ended by its ctx: %v (%T), want a *CancelledError", err, err)
	case !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &locked) || locked.Holder != "node0" || locked.Token != l.Token():
		t.Errorf("%v: want DeadlineExceeded, waiting for node0's token %d", err, l.Token())
	case ce.MayHaveBeenGranted():
		t.Errorf("%v: says a grant may have happened, with the key held all along", err)
	}
	l.Release(ctx)
}

// A grant that lands as the acquire's ctx ends is given back, and the
// error says so.
func TestCancelledGrantIsGivenBack(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1})
	m := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	err = m.cancelled("k", outcome{lease: l}, time.Now(), context.Canceled)
	var ce *CancelledError
	if !errors.As(err, &ce) || !ce.GaveBack || !ce.MayHaveBeenGranted() || !errors.Is(err, context.Canceled) {
		t.Fatalf("a grant raced in as ctx ended: %v", err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the grant was not given back")
	}
	if h, err := m.Holder(ctx, "k"); err != nil || h.Held {
		t.Fatalf("after giving the grant back: %+v, %v", h, err)
	}
}
