package mesh

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// skip moves c ahead by d at once: what every goroutine of the process sees
// after a pause of d.
func (c *nodeClock) skip(d time.Duration) { c.lead.ahead.Add(int64(d)) }

// resumedPast puts l, held by m, in the moment after a pause past its
// deadline, before m's goroutines have run: it holds m's node (no timer,
// no message, no renewal runs) and moves m's clock 10 ms past the
// deadline. It returns what lets the node go on (also run at the test's
// end).
func resumedPast(t *testing.T, m *Mesh, l *Lease) (resume func()) {
	t.Helper()
	m.nodeMu.Lock()
	var once sync.Once
	resume = func() { once.Do(m.nodeMu.Unlock) }
	t.Cleanup(resume) // before the cluster's shutdown, which needs the node
	l.mu.Lock()
	past := l.deadline - m.clock.Now() + 10*time.Millisecond
	l.mu.Unlock()
	m.clock.skip(past)
	return resume
}

// returnsAlone runs f and returns its error, or reports that f did not
// return within 5 s: it waited for the node, which the test holds.
func returnsAlone(t *testing.T, what string, f func() error) (err error, returned bool) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err, true
	case <-time.After(5 * time.Second):
		t.Errorf("%s waited for the node's timers to see that the deadline had passed", what)
		return nil, false
	}
}

// pausedHolder is a lease held by node3 (a node that does not vote: the
// clock moved ahead is only a holder's) of a mesh of 3 voters.
func pausedHolder(t *testing.T) (*cluster, *Lease) {
	t.Helper()
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.nodes[3].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

// A holder that resumes from a pause past its deadline, and checks before
// it writes, is told at once that the lease is lost, before the node's
// timer runs: Err wraps ErrLeaseLost, Done (taken before the pause or now)
// is closed, the context is cancelled with that cause, SetValue is
// refused, and the deadline stays where it was.
func TestLeasePastDeadlineEndsAtOnce(t *testing.T) {
	c, l := pausedHolder(t)
	m := c.nodes[3]
	doneBefore, ctxBefore := l.Done(), l.Context()
	resume := resumedPast(t, m, l)
	deadline := l.Deadline()

	if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Err past the deadline, before the timer: %v, want ErrLeaseLost", err)
	}
	for name, ch := range map[string]<-chan struct{}{
		"Done taken before": doneBefore, "Done": l.Done(),
		"Context taken before": ctxBefore.Done(), "Context": l.Context().Done(),
	} {
		select {
		case <-ch:
		default:
			t.Errorf("%s: open past the deadline", name)
		}
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("the context's cause: %v, want ErrLeaseLost", cause)
	}
	if err, ok := returnsAlone(t, "SetValue", func() error {
		return l.SetValue(context.Background(), []byte("late"))
	}); ok && !errors.Is(err, ErrLeaseLost) {
		t.Errorf("SetValue past the deadline: %v, want ErrLeaseLost", err)
	}
	if d := l.Deadline(); !d.Equal(deadline) {
		t.Errorf("the deadline moved from %v to %v as the lease ended", deadline, d)
	}
	resume()

	// The node lets the grant go once its timers run: another node takes
	// the key.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l2, err := c.nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("the key after the lease ended: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Err once the node noticed too: %v", err)
	}
}

// A holder that resumes past its deadline and releases: Release says the
// lease was lost, and Deadline is not moved to the moment of the release,
// which is later than the real deadline (a holder's interval ends at the
// Deadline its Lease reports, and that one would overlap the next
// holder's). A release before the deadline still moves it to the release.
func TestReleasePastDeadlineKeepsDeadline(t *testing.T) {
	c, l := pausedHolder(t)
	m := c.nodes[3]
	resume := resumedPast(t, m, l)
	deadline := l.Deadline()
	err, returned := returnsAlone(t, "Release", func() error { return l.Release(context.Background()) })
	if d := l.Deadline(); d.After(deadline) {
		t.Errorf("Release moved the deadline later, by %v (from %v to %v)", d.Sub(deadline), deadline, d)
	}
	if returned && !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Release past the deadline: %v, want ErrLeaseLost", err)
	}
	resume()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l2, err := m.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	deadline = l2.Deadline()
	before := time.Now()
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d := l2.Deadline(); d.After(deadline) || d.Before(before) {
		t.Errorf("a release before the deadline %v: Deadline %v, want the release's moment (after %v)", deadline, d, before)
	}
}

// A leader that resumes past its lease's deadline is told so by its
// Leadership at once: Err, Done, Context, Leader and Resign.
func TestLeadershipPastDeadlineEndsAtOnce(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	m := c.nodes[3]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lead, err := m.Campaign(ctx, "scheduler", []byte("node3:8080"))
	if err != nil {
		t.Fatal(err)
	}
	resume := resumedPast(t, m, lead.Lease())
	defer resume()
	if err := lead.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Err: %v", err)
	}
	select {
	case <-lead.Done():
	default:
		t.Error("Done open past the deadline")
	}
	if cause := context.Cause(lead.Context()); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("Context's cause: %v", cause)
	}
	if lead.Leader().Held {
		t.Error("Leader says this node leads past its deadline")
	}
	if err, ok := returnsAlone(t, "Resign", func() error { return lead.Resign(context.Background()) }); ok && !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Resign: %v", err)
	}
}

// A renewal whose answers reach the node after the deadline has passed
// (the process paused while they were on their way) does not bring the
// lease back, whether Err saw the deadline pass first or not: the lease
// ends as lost with its deadline unmoved, and the node lets the grant go
// rather than renew, for as long as it runs, a lease nobody holds.
func TestRenewalAfterDeadlineLetsGrantGo(t *testing.T) {
	for _, errFirst := range []bool{true, false} {
		name := "renewal first"
		if errFirst {
			name = "Err first"
		}
		t.Run(name, func(t *testing.T) {
			c, l := pausedHolder(t)
			m := c.nodes[3]
			resumedPast(t, m, l)
			deadline := l.Deadline()
			if errFirst && !errors.Is(l.Err(), ErrLeaseLost) {
				t.Fatalf("Err past the deadline: %v", l.Err())
			}
			// The node's answer to a renewal that began before the deadline
			// (nodeMu held, as the driver holds it).
			l.mu.Lock()
			renewedTo := l.deadline + l.ttl
			l.mu.Unlock()
			m.leaseEvents([]quorum.LeaseEvent{{Key: l.key, Epoch: l.token, Deadline: renewedTo, Started: renewedTo - l.ttl, Tag: l}})
			if len(m.orphans) > 0 {
				m.releaseOrphans()
			}
			if err := l.Err(); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("Err after a renewal that came past the deadline: %v", err)
			}
			if d := l.Deadline(); !d.Equal(deadline) {
				t.Errorf("the deadline moved from %v to %v", deadline, d)
			}
			if _, _, held := m.node.Holds(l.key); held {
				t.Error("the node still holds, and renews, the grant of a lease that ended")
			}
		})
	}
}
