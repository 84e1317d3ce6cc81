package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/lockmesh/lockmesh/mesh"
)

// The HTTP API's sessions, and the routes that are not about a key:
// status, readiness, voters, the OpenAPI document.

func contextWithCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// sessionJSON is a session as the API shows it.
type sessionJSON struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Owner string `json:"owner"`
	TTL   string `json:"ttl"`
	TTLMS int64  `json:"ttl_ms"`
	// RemainingMS is how long the session had left when the agent
	// answered: it ends then unless refreshed.
	RemainingMS int64       `json:"remaining_ms"`
	Streamed    bool        `json:"streamed"`
	Created     string      `json:"created"`
	Leases      []grantJSON `json:"leases"`
}

func sessionOf(s *session) sessionJSON {
	s.sweep()
	left := s.exp.remaining()
	out := sessionJSON{ID: s.id, Name: s.name, Owner: s.owner, TTL: s.ttl.String(), TTLMS: msOf(s.ttl),
		RemainingMS: msOf(left), Streamed: s.streamed, Created: wallTime(s.created), Leases: []grantJSON{}}
	for _, h := range s.leases() {
		out.Leases = append(out.Leases, grantOf(s, h, left))
	}
	slices.SortFunc(out.Leases, func(a, b grantJSON) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// wallTime is t on the agent's wall clock, to the millisecond, for people:
// clients time their leases by the durations.
func wallTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

type createSessionRequest struct {
	TTL    jsonDuration `json:"ttl"`
	Name   string       `json:"name"`
	Stream bool         `json:"stream"`
}

func (a *httpAPI) handleCreateSession(c *call) {
	var req createSessionRequest
	if p := c.decode(&req); p != nil {
		c.fail(p)
		return
	}
	if a.closing.Load() {
		c.fail(newProblem("closed", "the agent is shutting down"))
		return
	}
	if req.Stream && !c.beginWait() {
		return
	}
	s, p := a.sess.create(c.who.name, req.Name, time.Duration(req.TTL), req.Stream)
	if p != nil {
		if req.Stream {
			c.endWait()
		}
		c.fail(p)
		return
	}
	c.w.Header().Set("Location", "/v1/sessions/"+s.id)
	if !req.Stream {
		writeJSON(c.w, http.StatusCreated, sessionOf(s))
		return
	}
	defer c.endWait()
	a.streamSession(c, s)
}

// streamSession serves a streamed session: its state first, then its
// events (lost leases, its end) as NDJSON, and a heartbeat line every
// third of its TTL so that a dead connection is noticed. The session ends
// when the connection does (or when it expires: it must be refreshed all
// the same).
func (a *httpAPI) streamSession(c *call, s *session) {
	defer s.end("its stream's connection closed", false)
	st := newStream(c)
	if !st.send(map[string]any{"event": "session", "session": sessionOf(s)}) {
		return
	}
	beat := time.NewTicker(s.ttl / 3)
	defer beat.Stop()
	var seq uint64
	for {
		evs, wake := s.eventsAfter(seq)
		for _, e := range evs {
			seq = e.Seq
			if !st.send(e) {
				return
			}
			if e.Event == "ended" {
				return
			}
		}
		select {
		case <-wake:
		case <-beat.C:
			if !st.send(map[string]any{"event": "heartbeat", "remaining_ms": msOf(s.exp.remaining())}) {
				return
			}
		case <-c.r.Context().Done():
			return
		}
	}
}

func (a *httpAPI) handleGetSession(c *call) {
	s, p := a.sess.get(c.r.PathValue("id"), c.who)
	if p != nil {
		c.fail(p)
		return
	}
	writeJSON(c.w, http.StatusOK, sessionOf(s))
}

// handleRefreshSession restarts the session's TTL and says what it holds:
// a lease lost since is no longer listed (and a streamed session was
// told).
func (a *httpAPI) handleRefreshSession(c *call) {
	s, p := a.sess.get(c.r.PathValue("id"), c.who)
	if p == nil {
		p = s.refresh()
	}
	if p != nil {
		c.fail(p)
		return
	}
	writeJSON(c.w, http.StatusOK, sessionOf(s))
}

func (a *httpAPI) handleDeleteSession(c *call) {
	s, p := a.sess.get(c.r.PathValue("id"), c.who)
	if p != nil {
		c.fail(p)
		return
	}
	s.end("deleted by its client", false)
	c.w.WriteHeader(http.StatusNoContent)
}

func (a *httpAPI) handleListSessions(c *call) {
	out := []sessionJSON{}
	for _, s := range a.sess.all() {
		out = append(out, sessionOf(s))
	}
	slices.SortFunc(out, func(a, b sessionJSON) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(c.w, http.StatusOK, map[string]any{"sessions": out})
}

func (a *httpAPI) handleOpenAPI(c *call) {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.Write(openAPIDoc)
}

func (a *httpAPI) handleHealth(c *call) {
	if a.closing.Load() {
		c.fail(newProblem("closed", "the agent is shutting down"))
		return
	}
	writeJSON(c.w, http.StatusOK, map[string]any{"ok": true, "node": a.m.Name()})
}

// handleReady answers 200 once the node is ready; ?wait= waits that long
// for it first.
func (a *httpAPI) handleReady(c *call) {
	d, p := c.queryWait(0)
	if p != nil {
		c.fail(p)
		return
	}
	if d > 0 {
		if !c.beginWait() {
			return
		}
		ctx, cancel := context.WithTimeout(c.r.Context(), d)
		a.m.WaitReady(ctx)
		cancel()
		c.endWait()
	}
	ready, why := readiness(a.m.Status())
	if !ready {
		c.fail(newProblem("not_ready", "%s", why))
		return
	}
	writeJSON(c.w, http.StatusOK, map[string]any{"ready": true, "node": a.m.Name()})
}

// handleStatus is the node's mesh.Status with its fields in snake_case,
// and the API's own counts.
func (a *httpAPI) handleStatus(c *call) {
	b, err := json.Marshal(a.m.Status())
	var st any
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		c.fail(problemOf(err))
		return
	}
	live, created, expired := a.sess.count()
	writeJSON(c.w, http.StatusOK, map[string]any{
		"node": snakeKeys(st),
		"api": map[string]any{
			"sessions": live, "sessions_created": created, "sessions_expired": expired,
			"waiters": len(a.waiters), "watched_keys": a.watches.watchCount(),
			"requests": a.requests.Load(), "denied": a.acl.deniedCounts(),
		},
	})
}

// snakeKeys rewrites the keys of JSON objects from Go's field names
// (RPCAddr, LiveVoters) to the API's (rpc_addr, live_voters).
func snakeKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[snake(k)] = snakeKeys(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = snakeKeys(e)
		}
	}
	return v
}

func snake(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prevLower := unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || (unicode.IsUpper(rs[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// votersJSON is the voter configuration.
type votersJSON struct {
	ID       uint64   `json:"id"`
	Version  uint64   `json:"version"`
	Voters   []string `json:"voters"`
	Pending  bool     `json:"pending"`
	Previous []string `json:"previous,omitempty"`
	Retired  []string `json:"retired,omitempty"`
}

func (a *httpAPI) handleVoters(c *call) {
	cfg, err := a.m.Voters()
	if err != nil {
		c.fail(problemOf(err))
		return
	}
	writeJSON(c.w, http.StatusOK, votersOf(cfg))
}

func votersOf(cfg mesh.Configuration) votersJSON {
	return votersJSON{ID: cfg.ID, Version: cfg.Version, Voters: cfg.Voters, Pending: cfg.Pending, Previous: cfg.Previous, Retired: cfg.Retired}
}

func (a *httpAPI) handleAddVoter(c *call)    { a.changeVoters(c, a.m.AddVoter) }
func (a *httpAPI) handleRemoveVoter(c *call) { a.changeVoters(c, a.m.RemoveVoter) }

func (a *httpAPI) changeVoters(c *call, change func(context.Context, string) error) {
	d, p := c.queryWait(changeTimeout)
	if p != nil {
		c.fail(p)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), d)
	defer cancel()
	if err := change(ctx, c.r.PathValue("node")); err != nil {
		c.fail(problemOf(err))
		return
	}
	a.handleVoters(c)
}

// stream writes NDJSON lines, flushing each, with a write deadline per
// line so that a client that stops reading is dropped.
type stream struct {
	c   *call
	rc  *http.ResponseController
	enc *json.Encoder
}

// streamWriteTimeout bounds the write of one line of a stream.
const streamWriteTimeout = 10 * time.Second

func newStream(c *call) *stream {
	c.w.Header().Set("Content-Type", "application/x-ndjson")
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(http.StatusOK)
	return &stream{c: c, rc: http.NewResponseController(c.w), enc: json.NewEncoder(c.w)}
}

func (s *stream) send(v any) bool {
	s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if err := s.enc.Encode(v); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}
