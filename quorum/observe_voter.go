package quorum

import (
	"container/heap"
	"slices"
	"time"
)

// Observers: a node that wants to know when a key changes hands (a
// watcher, an election's observer) asks the voters to tell it, instead of
// reading the key again and again. It sends each voter a peek with
// Op.Observe; the voter answers as to any peek and remembers the sender
// for that long. From then on the voter pushes what it holds for the key
// (a Change, in a Notify) to each node observing it whenever an accept
// changes what a reader would see there — the holder, the token, the
// value, free or held — and when the lease's timer there runs out. A
// renewal, which changes none of it, is not pushed. Each push is one
// message per observing node per voter, carrying every key that changed
// for it at once.
//
// Pushes are hints: one voter's accept is not a decision. The observer
// (proposer_observe.go) reports a state only once a majority of voters
// agree on it, and asks again when they do not.
//
// What an observation costs a voter is bounded: at most maxObservedKeys
// keys and maxObserversPerKey nodes per key (a peek past either is
// answered but not remembered: that observer learns at its next refresh),
// each for at most maxObserveTTLs of the voter's MaxTTL.

const (
	maxObservedKeys    = 1 << 16
	maxObserversPerKey = 64
	maxObserveTTLs     = 10
)

// voterObservers is what a voter's node keeps of the nodes observing keys.
type voterObservers struct {
	keys     map[string]*observedKey
	expiries obsHeap
	out      map[NodeID][]Change // pushes waiting for Ready
}

// observedKey is one key's observers and what they were last told.
type observedKey struct {
	observers []keyObserver
	last      Change // the state last pushed (or answered at registration)
	lastLive  bool
	// checkAt is when the key is next looked at (a lease's timer ends, or
	// an observer's registration does); zero when nothing is armed.
	checkAt time.Duration
}

type keyObserver struct {
	id    NodeID
	until time.Duration
}

// sameContent reports whether two values show a reader the same thing:
// both free, or held by the same holder under the same token with the
// same value. (A renewal changes none of it; nor does a voter forgetting a
// free key.)
func sameContent(a, b Value) bool {
	if !a.Held || !b.Held {
		return a.Held == b.Held
	}
	return a.Holder == b.Holder && a.HolderInc == b.HolderInc && a.Epoch == b.Epoch && a.Data == b.Data
}

// keyState is what the acceptor holds for key: as a peek reports it.
func (a *Acceptor) keyState(key string, now time.Duration) Change {
	r := a.regs[key]
	if r == nil {
		return Change{Key: key}
	}
	return Change{Key: key, Accepted: r.accepted, Value: r.value, Remaining: r.remaining(now), Copy: a.isCopy(r)}
}

// answered takes note of what the acceptor a just answered: peeks that
// ask to observe a key register their sender, and accepts of observed
// keys may be changes to push.
func (o *voterObservers) answered(a *Acceptor, req *Request, resp *Response) {
	if resp.Status != StatusOK || len(resp.Results) != len(req.Ops) {
		return
	}
	now := a.clock.Now()
	for i := range req.Ops {
		op, res := &req.Ops[i], &resp.Results[i]
		switch {
		case !res.OK || op.Key == ConfigKey:
		case op.Kind == OpPeek && op.Observe > 0 && req.From != "":
			o.register(a, req.From, op.Key, min(op.Observe, maxObserveTTLs*a.cfg.MaxTTL), now)
		case op.Kind == OpAccept:
			if k := o.keys[op.Key]; k != nil {
				o.maybePush(a, op.Key, k, now)
			}
		}
	}
}

// register remembers that id observes key for d, or, with a d so short
// that it has passed, forgets it.
func (o *voterObservers) register(a *Acceptor, id NodeID, key string, d, now time.Duration) {
	k := o.keys[key]
	if k == nil {
		if len(o.keys) >= maxObservedKeys {
			return
		}
		if o.keys == nil {
			o.keys = make(map[string]*observedKey)
		}
		st := a.keyState(key, now)
		k = &observedKey{last: st, lastLive: st.Remaining > 0}
		o.keys[key] = k
	}
	until := now + d
	if i := slices.IndexFunc(k.observers, func(x keyObserver) bool { return x.id == id }); i >= 0 {
		k.observers[i].until = until
	} else if len(k.observers) < maxObserversPerKey {
		k.observers = append(k.observers, keyObserver{id, until})
	}
	o.arm(a, key, k, now)
}

// maybePush pushes key's state to its observers if a reader would see it
// differently from what they were last told.
func (o *voterObservers) maybePush(a *Acceptor, key string, k *observedKey, now time.Duration) {
	st := a.keyState(key, now)
	live := st.Remaining > 0
	if sameContent(st.Value, k.last.Value) && live == k.lastLive {
		k.last.Accepted, k.last.Remaining = st.Accepted, st.Remaining
		o.arm(a, key, k, now)
		return
	}
	k.last, k.lastLive = st, live
	for _, ob := range k.observers {
		if ob.until > now {
			if o.out == nil {
				o.out = make(map[NodeID][]Change)
			}
			o.out[ob.id] = append(o.out[ob.id], st)
		}
	}
	o.arm(a, key, k, now)
}

// arm makes sure key is looked at again when its lease's timer ends here
// or its first registration does, whichever comes first.
func (o *voterObservers) arm(a *Acceptor, key string, k *observedKey, now time.Duration) {
	var at time.Duration
	for _, ob := range k.observers {
		if at == 0 || ob.until < at {
			at = ob.until
		}
	}
	if left := a.keyState(key, now).Remaining; left > 0 && (at == 0 || now+left < at) {
		at = now + left
	}
	if at == 0 || (k.checkAt != 0 && k.checkAt <= at && k.checkAt > now) {
		return
	}
	k.checkAt = at
	heap.Push(&o.expiries, obsExpiry{at: at, key: key})
}

// tick ends registrations that ran out and pushes the end of lease timers.
func (o *voterObservers) tick(a *Acceptor) {
	now := a.clock.Now()
	for len(o.expiries) > 0 && o.expiries[0].at <= now {
		e := heap.Pop(&o.expiries).(obsExpiry)
		k := o.keys[e.key]
		if k == nil || k.checkAt != e.at {
			continue // looked at again since, or forgotten
		}
		k.checkAt = 0
		k.observers = slices.DeleteFunc(k.observers, func(x keyObserver) bool { return x.until <= now })
		if len(k.observers) == 0 {
			delete(o.keys, e.key)
			continue
		}
		o.maybePush(a, e.key, k, now)
	}
}

// next is when tick next has work.
func (o *voterObservers) next() (time.Duration, bool) {
	for len(o.expiries) > 0 {
		e := o.expiries[0]
		if k := o.keys[e.key]; k != nil && k.checkAt == e.at {
			return e.at, true
		}
		heap.Pop(&o.expiries) // stale
	}
	return 0, false
}

// ready hands out the pushes as one Notify per observing node, in a
// reproducible order.
func (o *voterObservers) ready(m Membership, from NodeID) []Notify {
	if len(o.out) == 0 {
		return nil
	}
	to := make([]NodeID, 0, len(o.out))
	for id := range o.out {
		to = append(to, id)
	}
	slices.Sort(to)
	ns := make([]Notify, 0, len(to))
	for _, id := range to {
		ns = append(ns, Notify{Config: m.ID, From: from, To: id, Changes: o.out[id]})
	}
	o.out = nil
	return ns
}

// Observed reports how many keys the voter pushes changes of, and to how
// many registrations in all (for status pages and tests).
func (o *voterObservers) Observed() (keys, registrations int) {
	for _, k := range o.keys {
		registrations += len(k.observers)
	}
	return len(o.keys), registrations
}

type obsExpiry struct {
	at  time.Duration
	key string
}

type obsHeap []obsExpiry

func (h obsHeap) Len() int { return len(h) }
func (h obsHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].key < h[j].key
}
func (h obsHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *obsHeap) Push(x any)   { *h = append(*h, x.(obsExpiry)) }
func (h *obsHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// holdsData reports whether the register of key holds v's grant with a
// value.
func (a *Acceptor) holdsData(key string, v Value) bool {
	r := a.regs[key]
	return r != nil && r.value.Data != "" && r.value.sameGrant(v)
}
