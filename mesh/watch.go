package mesh

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/lockmesh/lockmesh/quorum"
)

// Watch streams the states of key: who holds it, under which token, with
// which value, or that it is free. The first state on the channel is the
// key's state as a linearizable read finds it (as Holder would) at the
// moment of the call or later; each later one is a state the key went
// into after the one before. The voters push every change to this node as
// it happens — one message per voter per change, whatever the number of
// watchers here — and this node reports a state once a majority of the
// voters agree on it (or a read settles what they do not); nothing is
// polled. So:
//
//   - every state sent was the key's state at some moment, and states come
//     in the order the key went through them: a later grant never comes
//     before an earlier one (tokens never go down, except across the loss
//     of the state of a majority of the voters at once, which the package
//     documentation describes);
//   - a reader that falls behind is sent the latest state, not every one
//     in between (states are coalesced, never queued), and the same state
//     is not sent twice in a row;
//   - the last state is never stale for long: once the key stops changing
//     it is sent within about a round trip of the change; if pushes were
//     lost, within Config.Timing.TTL (this node registers with the voters
//     again that often, and a round timeout after a lease it saw held
//     should have run out);
//   - a key freed because its holder's lease ran out (not released) is
//     reported free only once a majority of the voters' timers of that
//     lease have run out, which is after the holder's deadline: the
//     holder can no longer act.
//
// Holder.TimeLeft is about how long the lease had left when the voters
// said. The channel is closed when ctx ends or the mesh closes. Watch
// returns ErrInvalidKey, ErrNoVoters (ctx ended before the voter
// configuration was known), ErrClosed, or ErrUpgradeRequired while a node
// of an earlier protocol version is in the mesh.
func (m *Mesh) Watch(ctx context.Context, key string) (<-chan Holder, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	if err := m.userKey(key); err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := m.valuesAllowed(); err != nil {
		return nil, err
	}
	w := &watcher{key: key, wake: make(chan struct{}, 1)}
	var err error
	m.drive(func(n *quorum.Node) {
		round, e := n.Observe(key, m.cfg.Timing.TTL)
		if e != nil {
			err = e
			return
		}
		w.round = round
		m.watch.add(w)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: watching %s: %w", ErrInvalidKey, quoteKey(key), err)
	}
	out := make(chan Holder)
	go m.serveWatch(ctx, w, out)
	return out, nil
}

// watches are the watchers of each key (nodeMu).
type watches struct {
	keys map[string]map[*watcher]struct{}
}

func (ws *watches) add(w *watcher) {
	if ws.keys == nil {
		ws.keys = make(map[string]map[*watcher]struct{})
	}
	if ws.keys[w.key] == nil {
		ws.keys[w.key] = make(map[*watcher]struct{})
	}
	ws.keys[w.key][w] = struct{}{}
}

// remove takes w out and reports whether its key has no watcher left.
func (ws *watches) remove(w *watcher) bool {
	subs := ws.keys[w.key]
	delete(subs, w)
	if len(subs) > 0 {
		return false
	}
	delete(ws.keys, w.key)
	return true
}

// watcher is one Watch: the latest state it has not sent yet.
type watcher struct {
	key   string
	round uint64 // the first registration round whose states it may send

	mu     sync.Mutex
	latest Holder
	fresh  bool
	wake   chan struct{}
}

// offer makes h the state to send next, replacing one not sent yet.
func (w *watcher) offer(h Holder) {
	w.mu.Lock()
	w.latest, w.fresh = h, true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) take() (Holder, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.latest, w.fresh
	w.fresh = false
	return h, ok
}

// keyChanged hands an observed key's new state to its watchers (nodeMu
// held). A watcher takes states of its registration's round or later: they
// are at least as new as the key was when it called Watch.
func (m *Mesh) keyChanged(ch *quorum.KeyChange) {
	for w := range m.watch.keys[ch.Key] {
		if ch.Round >= w.round {
			w.offer(shown(holderOf(ch.Key, ch.Value, ch.Live, ch.Remaining)))
		}
	}
}

// serveWatch sends w's states on out until ctx ends or the mesh closes.
func (m *Mesh) serveWatch(ctx context.Context, w *watcher, out chan<- Holder) {
	defer close(out)
	defer m.drive(func(n *quorum.Node) {
		if m.watch.remove(w) {
			n.Unobserve(w.key)
		}
	})
	var last Holder
	sent := false
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		case <-m.closed:
			return
		}
		h, ok := w.take()
		for ok && !(sent && sameHolder(h, last)) {
			select {
			case out <- h:
				last, sent, ok = h, true, false
			case <-w.wake:
				// A newer state came while this one waited: send that.
				if newer, fresh := w.take(); fresh {
					h = newer
				}
			case <-ctx.Done():
				return
			case <-m.closed:
				return
			}
		}
	}
}

// sameHolder reports whether two states show the same thing (TimeLeft
// aside).
func sameHolder(a, b Holder) bool {
	return a.Held == b.Held && a.Node == b.Node && a.Token == b.Token && bytes.Equal(a.Value, b.Value)
}
