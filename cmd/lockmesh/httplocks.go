package main

import (
	"context"
	"net/http"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The HTTP API's locks, semaphores and elections: each grant is a mesh
// lease held by the agent for a session (sessions.go).

// grantJSON is a lease a session holds: every grant, refresh and session
// answer carries it.
type grantJSON struct {
	Kind    string `json:"kind"` // lock, semaphore, election
	Key     string `json:"key"`  // the lease's key: a semaphore's slot key
	Name    string `json:"name"` // the lock's key, the semaphore's or election's name
	N       int    `json:"n,omitempty"`
	Session string `json:"session"`
	Token   uint64 `json:"token"`
	Value   string `json:"value"`
	TTLMS   int64  `json:"ttl_ms"`
	// RemainingMS is how long the lease had left when the agent answered
	// (it renews it while the session lives), SessionRemainingMS the
	// session's time left. ValidMS is the smaller: a client may act under
	// the grant until the time it sent the request plus ValidMS, on its
	// own monotonic clock, and must refresh the session before then to go
	// on.
	RemainingMS        int64 `json:"remaining_ms"`
	SessionRemainingMS int64 `json:"session_remaining_ms"`
	ValidMS            int64 `json:"valid_ms"`
	// Deadline is the lease's deadline on the agent's wall clock, for
	// people and logs: clocks differ, durations do not.
	Deadline string `json:"deadline"`
}

func grantOf(s *session, h *held, sessionLeft time.Duration) grantJSON {
	l := h.l
	left := max(time.Until(l.Deadline()), 0)
	return grantJSON{Kind: h.kind, Key: l.Key(), Name: h.name, N: h.n, Session: s.id, Token: l.Token(),
		Value: string(l.Value()), TTLMS: msOf(l.TTL()), RemainingMS: msOf(left), SessionRemainingMS: msOf(sessionLeft),
		ValidMS: msOf(min(left, sessionLeft)), Deadline: wallTime(l.Deadline())}
}

// holderJSON is a key's state.
type holderJSON struct {
	Key        string `json:"key"`
	Held       bool   `json:"held"`
	Node       string `json:"node,omitempty"`
	Token      uint64 `json:"token"`
	Value      string `json:"value"`
	TimeLeftMS int64  `json:"time_left_ms,omitempty"`
	Index      string `json:"index"`
}

func holderOf(h mesh.Holder) holderJSON {
	return holderJSON{Key: h.Key, Held: h.Held, Node: h.Node, Token: h.Token, Value: string(h.Value),
		TimeLeftMS: msOf(h.TimeLeft), Index: indexOf(h)}
}

// leaderJSON is an election's state.
type leaderJSON struct {
	Name  string `json:"name"`
	Held  bool   `json:"held"`
	Node  string `json:"node,omitempty"`
	Token uint64 `json:"token"`
	Value string `json:"value"`
	Index string `json:"index"`
}

func leaderOfHolder(name string, h mesh.Holder) leaderJSON {
	return leaderJSON{Name: name, Held: h.Held, Node: h.Node, Token: h.Token, Value: string(h.Value), Index: indexOf(h)}
}

// acquireRequest is the body of PUT /v1/locks/{key}, /v1/semaphores/{name}
// and /v1/elections/{name}.
type acquireRequest struct {
	Session string `json:"session"`
	// Wait: how long to wait while another holds it; 0 or absent: try
	// once. At most limits.max_wait.
	Wait jsonDuration `json:"wait"`
	// TTL: the mesh lease's TTL (default the agent's -ttl).
	TTL   jsonDuration `json:"ttl"`
	Value string       `json:"value"`
	N     int          `json:"n"` // semaphores: holders at once
}

func (a *httpAPI) handleHolder(c *call) {
	ctx, cancel := context.WithTimeout(c.r.Context(), defaultTimeout)
	defer cancel()
	h, err := a.m.Holder(ctx, c.r.PathValue("key"))
	if err != nil {
		c.fail(problemOf(err))
		return
	}
	writeJSON(c.w, http.StatusOK, holderOf(h))
}

// handleListLocks lists the held locks under ?prefix= that the caller may
// read.
func (a *httpAPI) handleListLocks(c *call) {
	ctx, cancel := context.WithTimeout(c.r.Context(), defaultTimeout)
	defer cancel()
	hs, err := a.m.Locks(ctx, c.r.URL.Query().Get("prefix"))
	if err != nil {
		c.fail(problemOf(err))
		return
	}
	out := []holderJSON{}
	for _, h := range hs {
		if ok, _ := c.who.can(permRead, h.Key); ok {
			out = append(out, holderOf(h))
		}
	}
	writeJSON(c.w, http.StatusOK, map[string]any{"locks": out})
}

func (a *httpAPI) handleAcquire(c *call) {
	a.acquire(c, "lock", c.r.PathValue("key"))
}

func (a *httpAPI) handleAcquireSemaphore(c *call) {
	a.acquire(c, "semaphore", c.r.PathValue("name"))
}

func (a *httpAPI) handleCampaign(c *call) {
	a.acquire(c, "election", c.r.PathValue("name"))
}

// acquire takes a lock, a semaphore's slot or an election's leadership for
// a session. Asking again for what the session holds returns its grant
// (200 rather than 201): a client may retry an acquire whose answer it did
// not get.
func (a *httpAPI) acquire(c *call, kind, name string) {
	var req acquireRequest
	if p := c.decode(&req); p != nil {
		c.fail(p)
		return
	}
	s, p := a.sess.get(req.Session, c.who)
	if p != nil {
		c.fail(p)
		return
	}
	switch {
	case kind == "semaphore" && (req.N < 1 || req.N > maxHolders):
		c.fail(newProblem("invalid_option", "n %d: a semaphore of 1 to %d holders", req.N, maxHolders))
		return
	case kind != "semaphore" && req.N != 0:
		c.fail(newProblem("bad_request", "n is for semaphores (PUT /v1/semaphores/{name})"))
		return
	}
	s.sweep()
	if h := s.find(kind, name); h != nil {
		writeJSON(c.w, http.StatusOK, grantOf(s, h, s.exp.remaining()))
		return
	}
	if p := s.reserve(); p != nil {
		c.fail(p)
		return
	}
	wait := a.waitOf(req.Wait)
	if wait > 0 {
		if !c.beginWait() {
			s.unreserve()
			return
		}
		defer c.endWait()
	}
	l, err := a.take(c.r.Context(), s, kind, name, req, wait)
	if err != nil {
		s.unreserve()
		c.fail(problemOf(err))
		return
	}
	h := &held{kind: kind, name: name, n: req.N, l: l}
	if p := s.attach(h); p != nil {
		c.fail(p)
		return
	}
	writeJSON(c.w, http.StatusCreated, grantOf(s, h, s.exp.remaining()))
}

// semaphoreTry bounds a semaphore acquire asked not to wait: the mesh has
// no try-once for semaphores, only a first pass over the slots.
const semaphoreTry = time.Second

// take asks the mesh, until wait has passed (0: once), the request ends
// or the session does.
func (a *httpAPI) take(rctx context.Context, s *session, kind, name string, req acquireRequest, wait time.Duration) (*mesh.Lease, error) {
	ctx, cancel := context.WithCancel(rctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	// Sessions of one agent wait for each other as clients of different
	// nodes do.
	opts := []mesh.AcquireOption{mesh.WaitBehindOwnLease()}
	if req.TTL > 0 {
		opts = append(opts, mesh.WithTTL(time.Duration(req.TTL)))
	}
	if req.Value != "" {
		opts = append(opts, mesh.WithValue([]byte(req.Value)))
	}
	if kind == "semaphore" && wait == 0 {
		wait = semaphoreTry
	}
	if wait > 0 {
		var tcancel context.CancelFunc
		ctx, tcancel = context.WithTimeout(ctx, wait)
		defer tcancel()
	}
	switch {
	case kind == "semaphore":
		return a.m.AcquireSemaphore(ctx, name, req.N, opts...)
	case wait == 0:
		return a.m.TryAcquire(ctx, name, opts...)
	}
	return a.m.Acquire(ctx, name, opts...)
}

// valueRequest is the body of PATCH /v1/locks/{key} and
// /v1/elections/{name}.
type valueRequest struct {
	Session string  `json:"session"`
	Value   *string `json:"value"`
}

func (a *httpAPI) handleSetValue(c *call) { a.setValue(c, "lock", c.r.PathValue("key")) }
func (a *httpAPI) handleProclaim(c *call) { a.setValue(c, "election", c.r.PathValue("name")) }

// setValue publishes a new value for a lease the session holds.
func (a *httpAPI) setValue(c *call, kind, name string) {
	var req valueRequest
	if p := c.decode(&req); p != nil {
		c.fail(p)
		return
	}
	if req.Value == nil {
		c.fail(newProblem("bad_request", "value is required (\"\" clears it)"))
		return
	}
	s, h, p := a.heldBy(c, req.Session, kind, name)
	if p != nil {
		c.fail(p)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), defaultTimeout)
	defer cancel()
	if err := h.l.SetValue(ctx, []byte(*req.Value)); err != nil {
		s.sweep()
		c.fail(problemOf(err))
		return
	}
	writeJSON(c.w, http.StatusOK, grantOf(s, h, s.exp.remaining()))
}

// heldBy finds the session and what it holds of kind and name.
func (a *httpAPI) heldBy(c *call, id, kind, name string) (*session, *held, *problem) {
	s, p := a.sess.get(id, c.who)
	if p != nil {
		return nil, nil, p
	}
	s.sweep()
	h := s.find(kind, name)
	if h == nil {
		return nil, nil, newProblem("not_held", "session %s holds no %s %q (never taken, released, or lost: see its refresh)", s.id, kind, name)
	}
	return s, h, nil
}

func (a *httpAPI) handleRelease(c *call) { a.release(c, "lock", c.r.PathValue("key")) }
func (a *httpAPI) handleReleaseSemaphore(c *call) {
	a.release(c, "semaphore", c.r.PathValue("name"))
}
func (a *httpAPI) handleResign(c *call) { a.release(c, "election", c.r.PathValue("name")) }

// release frees what the session holds of kind and name: 200 once a
// majority freed it, or no_quorum (it then frees itself at its deadline;
// the session no longer holds it either way).
func (a *httpAPI) release(c *call, kind, name string) {
	s, h, p := a.heldBy(c, c.r.URL.Query().Get("session"), kind, name)
	if p != nil {
		c.fail(p)
		return
	}
	if !s.detach(h) {
		c.fail(newProblem("not_held", "session %s released %s %q already", s.id, kind, name))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := h.l.Release(ctx); err != nil {
		c.fail(problemOf(err))
		return
	}
	writeJSON(c.w, http.StatusOK, map[string]any{"released": true, "kind": kind, "key": h.l.Key(), "name": name, "token": h.l.Token()})
}

func (a *httpAPI) handleLeader(c *call) {
	name := c.r.PathValue("name")
	ctx, cancel := context.WithTimeout(c.r.Context(), defaultTimeout)
	defer cancel()
	h, err := a.m.Holder(ctx, name)
	if err != nil {
		c.fail(problemOf(err))
		return
	}
	writeJSON(c.w, http.StatusOK, leaderOfHolder(name, h))
}

func (a *httpAPI) handleWatch(c *call) {
	key := c.r.PathValue("key")
	a.watch(c, key, func(h mesh.Holder) any { return holderOf(h) })
}

func (a *httpAPI) handleObserve(c *call) {
	name := c.r.PathValue("name")
	a.watch(c, name, func(h mesh.Holder) any { return leaderOfHolder(name, h) })
}

// watch answers a long-poll (?index=&wait=: the first state whose index
// differs from index, or the current state once wait has passed), or with
// ?stream=true streams every new state as an NDJSON line.
func (a *httpAPI) watch(c *call, key string, shape func(mesh.Holder) any) {
	q := c.r.URL.Query()
	wait, p := c.queryWait(time.Minute)
	if p != nil {
		c.fail(p)
		return
	}
	streamed := q.Get("stream") == "true" || q.Get("stream") == "1"
	if !c.beginWait() {
		return
	}
	defer c.endWait()
	kw := a.watches.join(key)
	defer kw.leave()
	index := q.Get("index")
	if streamed {
		a.streamWatch(c, kw, index, shape)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), wait)
	defer cancel()
	h, ok, err := kw.next(ctx, index)
	switch {
	case err != nil:
		c.fail(problemOf(err))
	case !ok:
		c.fail(newProblem("timeout", "no state of %q within the wait (%v): the voters did not answer", key, wait))
	default:
		c.w.Header().Set("X-Lockmesh-Index", indexOf(h))
		writeJSON(c.w, http.StatusOK, shape(h))
	}
}

// streamWatch sends each new state until the client goes, or the watch
// ends (then a last line with the problem).
func (a *httpAPI) streamWatch(c *call, kw *keyWatch, index string, shape func(mesh.Holder) any) {
	st := newStream(c)
	beat := time.NewTicker(30 * time.Second)
	defer beat.Stop()
	ctx := c.r.Context()
	for {
		h, ok, err, wake := kw.current()
		if ok && indexOf(h) != index {
			index = indexOf(h)
			if !st.send(map[string]any{"event": "state", "state": shape(h)}) {
				return
			}
		}
		if err != nil {
			st.send(map[string]any{"event": "error", "problem": problemOf(err)})
			return
		}
		select {
		case <-wake:
		case <-beat.C:
			// A line now and then finds a connection that died quietly.
			if !st.send(map[string]any{"event": "heartbeat"}) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
