package quorum

import (
	"slices"
	"time"
)

// maxWatchers bounds the waiters one register remembers. Waiters that do not
// fit still wake up: they also retry when the lease they saw should end.
const maxWatchers = 64

// waitLine is a key's line of waiting nodes at one acceptor. handedTo is
// the watcher last told the key is free, and handedUntil the end of its
// hand-off grace. Until then the key is reserved for the nodes that were
// waiting when it was handed (handedTo and the first eligible watchers):
// an acquire of anyone else is refused here without a promise, so that
// the releasing node, or a try-acquire, cannot barge in ahead of the
// waiters, nor disturb their ballots. Any of those waiters may take it:
// other acceptors may have told another of them first. When the grace
// ends with the key still free here, the next watcher is told.
type waitLine struct {
	watchers    []NodeID
	handedTo    NodeID
	handedUntil time.Duration
	eligible    int
}

// waiting is the key's line of waiters (nil when nobody waits).
func (r *register) waiting() []NodeID {
	if r.line == nil {
		return nil
	}
	return r.line.watchers
}

// lineOf is r's line of waiters, made if it has none.
func (r *register) lineOf() *waitLine {
	if r.line == nil {
		r.line = &waitLine{}
	}
	return r.line
}

// endHandoff ends the hand-off running at r, if any.
func (r *register) endHandoff() {
	if r.line != nil {
		r.line.handedTo = ""
		r.tidyLine()
	}
}

// tidyLine lets go of r's line once nobody waits and no hand-off runs.
func (r *register) tidyLine() {
	if l := r.line; l != nil && len(l.watchers) == 0 && l.handedTo == "" {
		r.line = nil
	}
}

// reservedAgainst reports whether a hand-off running at now keeps the key
// from id: id was not waiting for it when it was handed.
func (r *register) reservedAgainst(id NodeID, now time.Duration) bool {
	l := r.line
	if l == nil || l.handedTo == "" || now >= l.handedUntil || id == l.handedTo {
		return false
	}
	return !slices.Contains(l.watchers[:min(l.eligible, len(l.watchers))], id)
}

// watch remembers that from waits for key to stop being held, and arranges
// to notice the expiry of the live lease it waits on.
func (a *Acceptor) watch(key string, r *register, from NodeID, now, left time.Duration) {
	if l := r.lineOf(); !slices.Contains(l.watchers, from) && from != l.handedTo && len(l.watchers) < maxWatchers {
		l.watchers = append(l.watchers, from)
	}
	r.tidyLine()
	// Only a change here wakes the watcher: the expiry of the timer running
	// now, or the acceptance of a free value. Without a live timer here the
	// key may still be held (live at other voters); waking the watcher at
	// once would have it spin.
	if left > 0 {
		a.expiries.push(expiry{at: now + left, key: key})
	}
}

// wake hands key to the first watcher in line: it alone is told that the
// key is free, so that waiters take turns instead of all rushing at the key
// and fighting over ballots. It keeps its place until it takes the key (its
// grant takes it out of the line), leaves, or lets a hand-off grace pass
// with the key still free here: then it is dropped and the next one is
// told. (A waiter told first that then lost a ballot race to another is
// told again at the next release: it does not lose its turn.)
func (a *Acceptor) wake(key string, r *register, now time.Duration) {
	l := r.line
	if l == nil || len(l.watchers) == 0 {
		return
	}
	w := l.watchers[0]
	a.notify[w] = append(a.notify[w], notice{key, r.promise.Counter})
	l.handedTo, l.handedUntil = w, now+a.cfg.HandoffGrace
	l.eligible = len(l.watchers) // those waiting now may take the key too
	a.expiries.push(expiry{at: now + a.cfg.HandoffGrace, key: key, handoff: true})
}

// expire wakes the next watcher of every watched key whose lease has run out
// here (or whose previous hand-off came to nothing). A lease renewed or
// granted in the meantime is looked at again when its timer ends.
func (a *Acceptor) expire(now time.Duration) {
	for len(a.expiries) > 0 && a.expiries[0].at <= now {
		e := a.expiries.pop()
		r := a.regs[e.key]
		if r == nil || len(r.waiting()) == 0 {
			continue
		}
		l := r.line
		if left := r.remaining(now); left > 0 {
			a.expiries.push(expiry{at: now + left, key: e.key})
			continue
		}
		switch {
		case e.handoff && (l.handedTo == "" || now < l.handedUntil):
			// A waiter took the key (a grant ends the hand-off), or a
			// later hand-off runs with a grace of its own.
			continue
		case !e.handoff && l.handedTo != "" && now < l.handedUntil:
			// A hand-off is running (several waiters may each have queued
			// the end of the same lease): its own grace decides what next.
			continue
		case l.handedTo != "":
			// The waiter told last let its grace pass, the key still free
			// here: it had its turn.
			a.unwatch(r, l.handedTo)
			r.endHandoff()
		}
		a.wake(e.key, r, now)
	}
}

// unwatch takes id out of r's line of waiters.
func (a *Acceptor) unwatch(r *register, id NodeID) {
	l := r.line
	if l == nil {
		return
	}
	if i := slices.Index(l.watchers, id); i >= 0 {
		l.watchers = slices.Delete(l.watchers, i, i+1)
		if i < l.eligible {
			l.eligible--
		}
	}
	r.tidyLine()
}

// handleUnwatch takes a node out of a key's line of waiters: its waiting
// acquire ended, or it was told of a free key it no longer wants. If the
// key was handed to it, the next waiter is told at once: no grace is spent
// on a waiter that is gone (design.md R30).
func (a *Acceptor) handleUnwatch(from NodeID, op *Op, now time.Duration) Result {
	r := a.regs[op.Key]
	if op.Key == "" || from == "" {
		a.stats.Refused++
		return Result{ID: op.ID, Reason: ReasonInvalid}
	}
	if r == nil {
		return Result{ID: op.ID, OK: true}
	}
	a.unwatch(r, from)
	if r.line != nil && r.line.handedTo == from {
		r.endHandoff()
		if r.remaining(now) == 0 {
			a.wake(op.Key, r, now)
		}
	}
	return Result{ID: op.ID, OK: true}
}

type expiry struct {
	at      time.Duration
	key     string
	handoff bool // a hand-off's grace, not a lease's end
}

// expiryHeap orders watched leases by the time their timer ends (ties by
// key).
type expiryHeap = minHeap[expiry, *expiry]

func (a *expiry) before(b *expiry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.key < b.key
}

func (a *Acceptor) flushNotify(rd *AcceptorReady, to NodeID) {
	ns, ok := a.notify[to]
	if !ok {
		return
	}
	delete(a.notify, to)
	a.stats.Notifies++
	n := Notify{Config: a.m.ID, From: a.cfg.ID, To: to, Keys: make([]string, len(ns)), Promised: make([]uint64, len(ns))}
	for i, x := range ns {
		n.Keys[i], n.Promised[i] = x.key, x.promised
	}
	rd.Notifies = append(rd.Notifies, n)
}

// notice is a key to tell a watcher about, with the ballot counter promised
// here, so that the waiter's next ballot is high enough to win at once.
type notice struct {
	key      string
	promised uint64
}
