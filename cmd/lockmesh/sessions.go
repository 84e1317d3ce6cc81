package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/mesh"
)

// Sessions of the HTTP API (docs/http-api.md, "Sessions"). A client's
// locks, semaphore slots and leaderships belong to a session it creates
// with a TTL. The agent holds each as a mesh lease, which the mesh renews
// in the background for as long as the session lives; the session lives
// while the client refreshes it within its TTL (and, for a streamed
// session, while the stream's connection is open). When it ends — expired,
// deleted, or its stream closed — the agent releases every lease of it at
// once, so a client that hangs keeps nothing beyond its session's TTL and
// the release's round trip.

// session is one client session.
type session struct {
	id, owner, name string
	ttl             time.Duration
	created         time.Time
	streamed        bool
	store           *sessionStore

	// ctx ends with the session: acquires in flight under it stop.
	ctx    context.Context
	cancel context.CancelFunc
	exp    *expiry

	mu      sync.Mutex
	held    map[string]*held // by the mesh key (a semaphore's slot key)
	pending int              // acquires in flight
	ended   string           // why it ended; "" while it lives
	events  []sessionEvent   // the latest, for streams (at most maxEvents)
	seq     uint64           // events so far
	wake    chan struct{}    // closed and replaced at every event
}

// held is a lease a session holds.
type held struct {
	kind string // "lock", "semaphore" or "election"
	name string // the key, the semaphore's or the election's name
	n    int    // a semaphore's size
	l    *mesh.Lease
}

// sessionEvent is what a streamed session is told.
type sessionEvent struct {
	Seq    uint64 `json:"seq"`
	Event  string `json:"event"` // lost, ended
	Kind   string `json:"kind,omitempty"`
	Key    string `json:"key,omitempty"`
	Name   string `json:"name,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// maxEvents bounds the events a session keeps for a stream that lags.
const maxEvents = 64

// sessionStore is every session of the agent.
type sessionStore struct {
	lim apiLimits
	log hclog.Logger

	mu    sync.Mutex
	byID  map[string]*session
	ended map[string]string // recently ended sessions → why (bounded)
	order []string          // ended's keys, oldest first
	total uint64            // sessions created
	gone  uint64            // sessions expired (not deleted)
}

// maxEnded bounds the memory of ended sessions kept to say
// "session_expired" rather than "session_not_found".
const maxEnded = 4096

func newSessionStore(lim apiLimits, log hclog.Logger) *sessionStore {
	return &sessionStore{lim: lim, log: log, byID: map[string]*session{}, ended: map[string]string{}}
}

// create starts a session of owner.
func (st *sessionStore) create(owner, name string, ttl time.Duration, streamed bool) (*session, *problem) {
	lo, hi := time.Duration(st.lim.MinSessionTTL), time.Duration(st.lim.MaxSessionTTL)
	if ttl == 0 {
		ttl = time.Duration(st.lim.DefaultSessionTTL)
	}
	if ttl < lo || ttl > hi {
		return nil, newProblem("invalid_option", "ttl %v: want %v to %v (limits.min_session_ttl, max_session_ttl)", ttl, lo, hi)
	}
	if len(name) > 256 {
		return nil, newProblem("bad_request", "name: at most 256 bytes")
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{id: id, owner: owner, name: name, ttl: ttl, created: time.Now(), streamed: streamed, store: st,
		ctx: ctx, cancel: cancel, held: map[string]*held{}, wake: make(chan struct{})}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.byID) >= st.lim.MaxSessions {
		cancel()
		p := newProblem("too_many", "this agent has %d sessions, its limit (limits.max_sessions)", len(st.byID))
		p.RetryAfterMS = 1000
		return nil, p
	}
	st.byID[id] = s
	st.total++
	s.exp = newExpiry(ttl, func() { s.end("expired: not refreshed within its ttl of "+ttl.String(), true) })
	return s, nil
}

// get finds a session that caller may use.
func (st *sessionStore) get(id string, caller *principal) (*session, *problem) {
	if id == "" {
		return nil, newProblem("bad_request", "a session is required (create one with POST /v1/sessions)")
	}
	st.mu.Lock()
	s, ok := st.byID[id]
	why, wasEnded := st.ended[id]
	st.mu.Unlock()
	switch {
	case !ok && wasEnded:
		return nil, newProblem("session_expired", "session %s has ended: %s", id, why)
	case !ok:
		return nil, newProblem("session_not_found", "no session %s on this agent (it may have ended long ago)", id)
	case !caller.owns(s):
		return nil, newProblem("forbidden", "session %s belongs to token %q", id, s.owner)
	}
	return s, nil
}

// all lists the sessions (for admins).
func (st *sessionStore) all() []*session {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*session, 0, len(st.byID))
	for _, s := range st.byID {
		out = append(out, s)
	}
	return out
}

func (st *sessionStore) count() (live int, created, expired uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.byID), st.total, st.gone
}

// forget removes an ended session, remembering why it ended.
func (st *sessionStore) forget(s *session, why string, expired bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.byID, s.id)
	if expired {
		st.gone++
	}
	if len(st.order) >= maxEnded {
		delete(st.ended, st.order[0])
		st.order = st.order[1:]
	}
	st.ended[s.id] = why
	st.order = append(st.order, s.id)
}

// closeAll ends every session (the agent is leaving).
func (st *sessionStore) closeAll() {
	for _, s := range st.all() {
		s.end("the agent is shutting down", false)
	}
}

// refresh restarts the session's TTL.
func (s *session) refresh() *problem {
	if !s.exp.beat() {
		return newProblem("session_expired", "session %s has ended: %s", s.id, s.whyEnded())
	}
	return nil
}

func (s *session) whyEnded() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// end ends the session once: acquires in flight stop, and every lease is
// released (in parallel, each bounded by releaseTimeout). It returns when
// they are released or their release gave up (a lease whose release
// fails then expires by itself).
func (s *session) end(why string, expired bool) {
	s.mu.Lock()
	if s.ended != "" {
		s.mu.Unlock()
		return
	}
	s.ended = why
	hs := s.held
	s.held = map[string]*held{}
	s.mu.Unlock()
	s.exp.stop()
	s.cancel()
	s.store.forget(s, why, expired)
	if expired {
		s.store.log.Info("api: session expired", "session", s.id, "owner", s.owner, "leases", len(hs))
	}
	releaseAll(hs)
	s.event(sessionEvent{Event: "ended", Detail: why})
}

// releaseAll releases the leases, at most 32 at a time.
func releaseAll(hs map[string]*held) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 32)
	for _, h := range hs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			h.l.Release(ctx)
		})
	}
	wg.Wait()
}

// reserve makes room for one more lease, before an acquire starts.
func (s *session) reserve() *problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended != "":
		return newProblem("session_expired", "session %s has ended: %s", s.id, s.ended)
	case len(s.held)+s.pending >= s.store.lim.MaxLocksPerSession:
		return newProblem("too_many", "session %s holds or is taking %d leases, the limit (limits.max_locks_per_session)", s.id, len(s.held)+s.pending)
	}
	s.pending++
	return nil
}

// unreserve gives back a reservation whose acquire failed.
func (s *session) unreserve() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// attach records a lease granted under a reservation. If the session
// ended meanwhile, the lease is released and the session's end returned.
func (s *session) attach(h *held) *problem {
	s.mu.Lock()
	s.pending--
	if s.ended != "" {
		why := s.ended
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		h.l.Release(ctx)
		return newProblem("session_expired", "session %s ended as the lease was granted (it was released): %s", s.id, why)
	}
	s.held[h.l.Key()] = h
	s.mu.Unlock()
	if s.streamed {
		go s.watchLease(h)
	}
	return nil
}

// watchLease tells a streamed session when h is lost.
func (s *session) watchLease(h *held) {
	select {
	case <-h.l.Done():
		s.sweep()
	case <-s.ctx.Done():
	}
}

// find is the lease the session holds of kind and name.
func (s *session) find(kind, name string) *held {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		if h.kind == kind && h.name == name {
			return h
		}
	}
	return nil
}

// detach takes h out of the session, before its release; false if it was
// no longer there.
func (s *session) detach(h *held) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[h.l.Key()] != h {
		return false
	}
	delete(s.held, h.l.Key())
	return true
}

// sweep takes out the leases lost (not released by the session), and
// records an event for each.
func (s *session) sweep() {
	s.mu.Lock()
	var lost []*held
	for k, h := range s.held {
		if h.l.Err() != nil {
			delete(s.held, k)
			lost = append(lost, h)
		}
	}
	s.mu.Unlock()
	for _, h := range lost {
		s.event(sessionEvent{Event: "lost", Kind: h.kind, Key: h.l.Key(), Name: h.name, Token: h.l.Token(), Detail: h.l.Err().Error()})
	}
}

// event records e for the session's stream.
func (s *session) event(e sessionEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	e.Seq = s.seq
	if len(s.events) == maxEvents {
		s.events = append(s.events[:0], s.events[1:]...)
	}
	s.events = append(s.events, e)
	close(s.wake)
	s.wake = make(chan struct{})
}

// eventsAfter returns the events after seq, and a channel closed at the
// next one.
func (s *session) eventsAfter(seq uint64) ([]sessionEvent, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sessionEvent
	for _, e := range s.events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out, s.wake
}

// leases is a snapshot of what the session holds.
func (s *session) leases() []*held {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*held, 0, len(s.held))
	for _, h := range s.held {
		out = append(out, h)
	}
	return out
}
