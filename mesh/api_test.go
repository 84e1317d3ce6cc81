package mesh

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
)

// A node that leaves releases its leases first: a waiter elsewhere gets the
// key at once, not after the lease's TTL.
func TestLeaveHandsOverAtOnce(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leaver, waiter := c.nodes[3], c.nodes[0]
	l, err := leaver.Acquire(ctx, "shift")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := waiter.Acquire(ctx, "shift"); err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- time.Now()
	}()
	waitFor(t, 5*time.Second, "the waiter to wait", func() bool {
		waiter.nodeMu.Lock()
		defer waiter.nodeMu.Unlock()
		return len(waiter.waiters) > 0
	})
	start := time.Now()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("the leaver's lease ended with %v, want ErrReleased", l.Err())
	}
	took := (<-got).Sub(start)
	t.Logf("hand-over on leave: %v (TTL %v)", took, leaver.cfg.Timing.TTL)
	if took >= leaver.cfg.Timing.TTL {
		t.Fatalf("the waiter got the key after %v: it waited for the lease to expire", took)
	}
	if _, err := leaver.Acquire(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after leave: %v, want ErrClosed", err)
	}
}

// BootstrapExpect voters form one configuration once they all see each other,
// and a node without voters learns it from them.
func TestBootstrapExpect(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 0, proposers: 4, tweak: func(cfg *Config) {
		if cfg.Name != "node3" {
			cfg.BootstrapExpect = 3
		}
		cfg.Voters = nil
	}})
	waitFor(t, 10*time.Second, "a configuration everywhere", func() bool {
		for _, m := range c.nodes {
			if len(m.Status().Voters) != 3 {
				return false
			}
		}
		return true
	})
	id := c.nodes[0].Status().ConfigID
	for _, m := range c.nodes {
		st := m.Status()
		if st.ConfigID != id || strings.Join(st.Voters, ",") != "node0,node1,node2" {
			t.Fatalf("%s: configuration %d %v", m.Name(), st.ConfigID, st.Voters)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.nodes[3].Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("the non-voter cannot acquire: %v", err)
	}
	l.Release(ctx)
}

// Invalid keys, options and configurations get errors callers can tell apart.
func TestErrorsAreDistinct(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1})
	m := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"", strings.Repeat("k", 513), "\xff"} {
		if _, err := m.Acquire(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("key %q: %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := m.Acquire(ctx, "k", WithTTL(time.Millisecond)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("tiny TTL: %v, want ErrInvalidOption", err)
	}
	bad := DefaultLocalConfig()
	bad.Name = "x"
	bad.Voters = []string{"x"}
	bad.BootstrapExpect = 3
	if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Voters and BootstrapExpect: %v", err)
	}
	bad = DefaultLocalConfig()
	bad.Voters = []string{"x"}
	bad.Timing.Drift = 0.5
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("drift 0.5: %v", err)
	}
	l, err := m.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil || l.Release(ctx) != nil {
		t.Fatalf("release twice: %v", err)
	}
	for _, e := range []error{ErrLocked, ErrNoQuorum, ErrLeaseLost, ErrClosed, ErrInvalidKey, ErrReleased} {
		for _, f := range []error{ErrLocked, ErrNoQuorum, ErrLeaseLost, ErrClosed, ErrInvalidKey, ErrReleased} {
			if (e == f) != errors.Is(e, f) {
				t.Errorf("errors.Is(%v, %v) = %v", e, f, errors.Is(e, f))
			}
		}
	}
	m.Shutdown()
	if _, err := m.Acquire(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("after shutdown: %v, want ErrClosed", err)
	}
}

// Metrics go to the user's sink, labelled with the node, each under its
// family's name with the family's label (an acquire's outcome, a
// refusal's reason).
func TestMetricsReachTheSink(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	c := newCluster(t, clusterOpts{voters: 1, tweak: func(cfg *Config) { cfg.MetricSink = sink }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	c.nodes[0].incr("transport.refused.plaintext", 1)
	c.nodes[0].incr("limit.idle", 1)
	seen := map[string]bool{}
	for _, iv := range sink.Data() {
		iv.RLock()
		for name := range iv.Counters {
			seen[name] = true
		}
		for name := range iv.Samples {
			seen[name] = true
		}
		for name := range iv.Gauges {
			seen[name] = true
		}
		iv.RUnlock()
	}
	for _, want := range []string{"lockmesh.leases.granted;node=node0", "lockmesh.acquire.latency;node=node0;outcome=granted",
		"lockmesh.leases.held;node=node0", "lockmesh.transport.refused;node=node0;reason=plaintext", "lockmesh.limit.hits;node=node0;limit=idle"} {
		if !seen[want] {
			t.Errorf("metric %s not reported; got %v", want, seen)
		}
	}
}

// Without a majority, Acquire says so when ctx ends: ErrNoQuorum, not only
// the deadline; Holder too.
func TestNoQuorumIsReported(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	c.net.Partition([]string{"node0"}, []string{"node1", "node2"})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.nodes[0].Acquire(ctx, "k")
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire without a majority: %v, want ErrNoQuorum and the deadline", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := c.nodes[0].Holder(ctx2, "k"); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("holder without a majority: %v, want ErrNoQuorum", err)
	}
	c.net.Heal()
	// And a wait that ends on a held key says who holds it.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	l, err := c.nodes[1].Acquire(ctx3, "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx4, cancel4 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel4()
	_, err = c.nodes[0].Acquire(ctx4, "k")
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Holder != "node1" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting on a held key: %v, want the deadline and a LockedError naming node1", err)
	}
	l.Release(ctx3)
}

// Leave ends the acquires still waiting on the node (ErrClosed), and no
// lease outlives it: the key they waited for is free for others at once.
func TestLeaveEndsWaitingAcquires(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[1].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	leaver := c.nodes[3]
	got := make(chan error, 1)
	go func() {
		_, err := leaver.Acquire(ctx, "k")
		got <- err
	}()
	waitFor(t, 5*time.Second, "the acquire to wait", func() bool { return leaver.Status().Proposer.Rounds > 0 })
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a waiting acquire on a node that left: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting acquire did not end")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Within half the TTL: a grant to the node that left would hold the
	// key for a whole TTL. (A departed waiter costs at most the hand-off
	// grace, 100ms here: the voters hand the key to the waiters in line.)
	half, cancelHalf := context.WithTimeout(ctx, c.nodes[2].cfg.Timing.TTL/2)
	defer cancelHalf()
	l2, err := c.nodes[2].Acquire(half, "k")
	if err != nil {
		t.Fatalf("the key is not free after the release: %v", err)
	}
	l2.Release(ctx)
}
