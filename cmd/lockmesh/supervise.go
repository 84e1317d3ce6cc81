package main

import (
	"time"
)

// When lock stops CMD, as decisions apart from their effects (lock.go acts
// on them).
//
// The lease's deadline lives in the agent; lock keeps its own bound of it,
// never later than the real one: it notes when it sends each "lease"
// request, and the agent answers with the time the lease had left when it
// read the request, which happened after the send. So
//
//	bound = send time + remaining ≤ deadline
//
// whatever the socket's delay, with both ends on one machine and one clock.
// A renewal moves the deadline; the next answer moves the bound.

// timing is what lock knows of its lease's timing.
type timing struct {
	// bound is lock's bound of the lease's deadline (see above).
	bound time.Time
	// notice is how long before its deadline a lease whose renewal has
	// not succeeded is reported lost: the mesh's rule, which lock also
	// applies to its bound when the agent stops answering.
	notice time.Duration
	// killMargin is how long before the bound CMD is SIGKILLed at the
	// latest: the time lock allows itself to be scheduled and the kernel
	// to deliver the signal.
	killMargin time.Duration
}

// newTiming derives lock's margins from the lease's TTL and notice margin.
func newTiming(bound time.Time, ttl, notice time.Duration) timing {
	if notice <= 0 || notice > ttl/2 {
		notice = ttl / 10
	}
	return timing{bound: bound, notice: notice, killMargin: notice / 4}
}

// pingEvery is how often lock asks the agent for its lease's time left:
// ten times per TTL, between 20 ms and 1 s. Renewals come every TTL/3, so
// the bound trails the deadline by at most a ping and the round trip.
func pingEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 20*time.Millisecond), time.Second)
}

// stopAt is when lock stops CMD on its own, without word from the agent:
// notice before the bound. Renewals keep the bound about 2/3 of a TTL ahead,
// so only a renewal that keeps failing, or an agent that no longer answers,
// lets it come.
func (t timing) stopAt() time.Time { return t.bound.Add(-t.notice) }

// killAt is when CMD gets SIGKILL once lock has sent SIGTERM at now: after
// grace, but never later than killMargin before the bound. CMD then has no
// time left under the lease.
func (t timing) killAt(now time.Time, grace time.Duration) time.Time {
	k := now.Add(grace)
	if last := t.bound.Add(-t.killMargin); last.Before(k) {
		k = last
	}
	if k.Before(now) {
		k = now
	}
	return k
}

// moved returns t with a newer bound, if b is later.
func (t timing) moved(b time.Time) timing {
	if b.After(t.bound) {
		t.bound = b
	}
	return t
}
