package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// next waits for a state on ch that satisfies want, failing the test if
// the channel closes or limit passes first; it returns the states seen on
// the way.
func next[T any](t *testing.T, ch <-chan T, limit time.Duration, what string, want func(T) bool) (T, []T) {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var seen []T
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("the stream closed while waiting for %s (saw %+v)", what, seen)
			}
			seen = append(seen, v)
			if want(v) {
				return v, seen
			}
		case <-timer.C:
			var zero T
			t.Fatalf("no %s within %v (saw %+v)", what, limit, seen)
			return zero, seen
		}
	}
}

// Watch starts from the key's state now, then shows each change, in order:
// a grant with its value, a new value, the release, the next grant.
func TestWatchShowsEveryChange(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := c.nodes[0].Acquire(ctx, "job", WithValue([]byte("one")))
	if err != nil {
		t.Fatal(err)
	}
	states, err := c.nodes[3].Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := next(t, states, 5*time.Second, "the first state", func(Holder) bool { return true })
	if !h.Held || h.Node != "node0" || h.Token != first.Token() || string(h.Value) != "one" || h.TimeLeft <= 0 {
		t.Fatalf("first state %+v: want the current holder, node0 with %q", h, "one")
	}
	if err := first.SetValue(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	h, _ = next(t, states, 5*time.Second, "the new value", func(Holder) bool { return true })
	if !h.Held || h.Token != first.Token() || string(h.Value) != "two" {
		t.Fatalf("after SetValue: %+v", h)
	}
	first.Release(ctx)
	h, _ = next(t, states, 5*time.Second, "the release", func(Holder) bool { return true })
	if h.Held {
		t.Fatalf("after the release: %+v", h)
	}
	second, err := c.nodes[1].Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// The next grant, and before it, perhaps, what the acquire did on the
	// way: a round answered too late (under load) leaves node1 a grant
	// that the acquire takes over with a new token, or frees
	// (TestObserveSeesEveryLeaderInOrder).
	h, seen := next(t, states, 5*time.Second, "the next grant", func(h Holder) bool { return h.Held && h.Token == second.Token() })
	for i, s := range seen {
		if s.Token <= first.Token() || s.Token > second.Token() || (i > 0 && s.Token < seen[i-1].Token) || (s.Held && s.Node != "node1") {
			t.Fatalf("after the release: %+v on the way to node1's grant %d", seen, second.Token())
		}
	}
	if h.Node != "node1" || h.Token <= first.Token() || h.Value != nil {
		t.Fatalf("after the next grant: %+v (token %d)", h, second.Token())
	}
	second.Release(ctx)
}

// A holder that dies without releasing: the watcher sees the key freed
// once its lease has run out at the voters, and never before the holder's
// deadline.
func TestWatchSeesExpiry(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.nodes[3].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	states, err := c.nodes[0].Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next(t, states, 5*time.Second, "the holder", func(h Holder) bool { return h.Held && h.Token == l.Token() })
	c.nodes[3].Shutdown() // no release: the lease runs out
	var deadline time.Time
	select {
	case <-l.Done():
		deadline = l.Deadline()
	case <-ctx.Done():
		t.Fatal("the lease did not end at Shutdown")
	}
	next(t, states, 10*time.Second, "the key freed", func(h Holder) bool { return !h.Held })
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("freed at %v, before the holder's deadline %v", now, deadline)
	}
}

// A reader that does not read is sent the latest state once it does, not
// a queue of old ones; and many watches of one key on one node share one
// observation.
func TestWatchCoalesces(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow, err := c.nodes[2].Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	also, err := c.nodes[2].Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next(t, also, 5*time.Second, "the first state", func(h Holder) bool { return !h.Held })
	var last uint64
	for i := range 5 {
		l, err := c.nodes[i%2].Acquire(ctx, "k", WithValue([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		next(t, also, 5*time.Second, "each grant", func(h Holder) bool { return h.Held && h.Token == last })
		l.Release(ctx)
		next(t, also, 5*time.Second, "each release", func(h Holder) bool { return !h.Held })
	}
	// The slow reader gets the state now: the key free after the last
	// grant, and nothing older after it.
	_, seen := next(t, slow, 5*time.Second, "the latest state", func(h Holder) bool { return !h.Held && h.Token == last })
	if len(seen) > 1 {
		t.Errorf("a reader that fell behind was sent %d states (%+v), not the latest", len(seen), seen)
	}
	var observing int
	c.nodes[2].drive(func(n *quorum.Node) { observing = n.Proposer().Observing() })
	if observing != 1 {
		t.Errorf("two watches of one key observe %d keys", observing)
	}
}

// What watching costs the voters: with watchers on every non-voting node,
// each change of the key (a grant, a release) costs one push per voter per
// watching node, whatever the number of watches there; renewals cost
// nothing. The figures are logged.
func TestWatchCostPerChange(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 2})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds = 5
	changes := 2 * rounds
	var streams []<-chan Holder
	run := func() {
		for i := range rounds {
			l, err := c.nodes[i%3].Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range streams {
				next(t, s, 5*time.Second, "the grant", func(h Holder) bool { return h.Held && h.Token == l.Token() })
			}
			l.Release(ctx)
			for _, s := range streams {
				next(t, s, 5*time.Second, "the release", func(h Holder) bool { return !h.Held })
			}
		}
	}
	sent := func() (n uint64) {
		for _, v := range c.nodes[:3] {
			n += counter(v, "messages.sent")
		}
		return n
	}
	s0 := sent()
	run() // without watches: what the changes cost by themselves
	unwatched := float64(sent()-s0) / float64(changes)

	watching := c.nodes[3:]
	for _, m := range watching {
		for range 3 { // three watches per node share one observation
			s, err := m.Watch(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			next(t, s, 5*time.Second, "the first state", func(Holder) bool { return true })
			streams = append(streams, s)
		}
	}
	pushes := func() (n uint64) {
		for _, v := range c.nodes[:3] {
			n += counter(v, "observe.pushes")
		}
		return n
	}
	p0, s1 := pushes(), sent()
	run()
	watched := float64(sent()-s1) / float64(changes)
	perChange := float64(pushes()-p0) / float64(changes)
	if bound := float64(3 * len(watching)); perChange > bound {
		t.Errorf("%.1f pushes per change; one per voter per watching node is %v", perChange, bound)
	}
	t.Logf("figures: %d changes watched by %d watches on %d nodes: %.1f pushes per change from the 3 voters (%.1f per voter per watching node); the voters sent %.1f messages per change unwatched, %.1f watched",
		changes, len(streams), len(watching), perChange, perChange/float64(3*len(watching)), unwatched, watched)
}
