package main

import (
	"context"
	binenc "encoding/binary"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The HTTP API's watches: every long-poll and stream of one key shares one
// mesh.Watch, so ten thousand clients waiting on a key cost the voters one
// watch, and the agent one goroutine for the key and one per client.
//
// A state's index is a digest of what the state says (held, node, token,
// value), not a counter: any agent, or this one after a restart, gives the
// same index to the same state, so a client resumes a watch anywhere by
// passing the last index it saw. Tokens only grow, so a state once left is
// not seen again — except a value set back to an earlier one within one
// grant, which a client that missed the change in between does not see
// (states are coalesced, as mesh.Watch coalesces them).

// indexOf is the index of a state.
func indexOf(h mesh.Holder) string {
	d := fnv.New64a()
	var b [9]byte
	if h.Held {
		b[0] = 1
	}
	binenc.BigEndian.PutUint64(b[1:], h.Token)
	d.Write(b[:])
	d.Write([]byte(h.Node))
	d.Write([]byte{0})
	d.Write(h.Value)
	return strconv.FormatUint(d.Sum64(), 16)
}

// watchHub is the key watches of the agent.
type watchHub struct {
	m      *mesh.Mesh
	linger time.Duration // how long a watch outlives its last client

	mu   sync.Mutex
	keys map[string]*keyWatch
}

// keyWatch is one key's watch and its latest state.
type keyWatch struct {
	hub    *watchHub
	key    string
	cancel context.CancelFunc

	// Under hub.mu:
	refs  int
	state mesh.Holder
	have  bool          // a first state has come
	err   error         // the watch failed or ended
	wake  chan struct{} // closed and replaced at every new index or end
	idle  *time.Timer   // stops the watch once it has had no client for linger
}

func newWatchHub(m *mesh.Mesh) *watchHub {
	return &watchHub{m: m, linger: 5 * time.Second, keys: map[string]*keyWatch{}}
}

// join returns key's watch, starting it if none runs; leave it when done.
func (hb *watchHub) join(key string) *keyWatch {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	kw := hb.keys[key]
	if kw == nil || kw.err != nil {
		ctx, cancel := context.WithCancel(context.Background())
		kw = &keyWatch{hub: hb, key: key, cancel: cancel, wake: make(chan struct{})}
		hb.keys[key] = kw
		go kw.run(ctx)
	}
	if kw.idle != nil {
		kw.idle.Stop()
		kw.idle = nil
	}
	kw.refs++
	return kw
}

// leave drops a client; the watch stops linger after its last.
func (kw *keyWatch) leave() {
	hb := kw.hub
	hb.mu.Lock()
	defer hb.mu.Unlock()
	kw.refs--
	if kw.refs > 0 || kw.err != nil {
		return
	}
	kw.idle = time.AfterFunc(hb.linger, func() {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		if kw.refs == 0 && hb.keys[kw.key] == kw {
			delete(hb.keys, kw.key)
			kw.cancel()
		}
	})
}

func (kw *keyWatch) run(ctx context.Context) {
	states, err := kw.hub.m.Watch(ctx, kw.key)
	if err != nil {
		kw.finish(err)
		return
	}
	for h := range states {
		kw.hub.mu.Lock()
		if !kw.have || indexOf(h) != indexOf(kw.state) {
			close(kw.wake)
			kw.wake = make(chan struct{})
		}
		kw.state, kw.have = h, true
		kw.hub.mu.Unlock()
	}
	kw.finish(mesh.ErrClosed)
}

// finish ends the watch with err: its clients are told, and the next
// client starts a new one.
func (kw *keyWatch) finish(err error) {
	hb := kw.hub
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if kw.err == nil {
		kw.err = err
		close(kw.wake)
	}
	if hb.keys[kw.key] == kw {
		delete(hb.keys, kw.key)
	}
	kw.cancel()
}

// current is the latest state (ok false before the first), the watch's
// error, and a channel closed at the next change.
func (kw *keyWatch) current() (h mesh.Holder, ok bool, err error, wake <-chan struct{}) {
	kw.hub.mu.Lock()
	defer kw.hub.mu.Unlock()
	return kw.state, kw.have, kw.err, kw.wake
}

// next waits until the key's state has an index other than index (any
// state, if index is empty), or ctx ends; it then returns the latest
// state, changed or not. An error is the watch's.
func (kw *keyWatch) next(ctx context.Context, index string) (mesh.Holder, bool, error) {
	for {
		h, ok, err, wake := kw.current()
		switch {
		case ok && (index == "" || indexOf(h) != index):
			return h, true, nil
		case err != nil:
			return h, ok, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return h, ok, nil
		}
	}
}

// watchCount is how many keys are watched.
func (hb *watchHub) watchCount() int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return len(hb.keys)
}
