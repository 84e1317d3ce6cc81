package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/mesh"
)

// The agent's HTTP/JSON API (docs/http-api.md), served on the unix socket
// -api-socket and on TCP at -api-addr. openapi.json describes it; routes
// below is the one list the server registers and the test compares with
// that document.

//go:embed openapi.json
var openAPIDoc []byte

// apiLimits bound what clients may ask of the agent (the "limits" of the
// configuration file; docs/agent.md).
type apiLimits struct {
	// MaxBodyBytes bounds a request body (413 past it).
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxSessions bounds the sessions alive at once (429 past it).
	MaxSessions int `json:"max_sessions"`
	// MaxLocksPerSession bounds the leases one session holds or takes.
	MaxLocksPerSession int `json:"max_locks_per_session"`
	// MaxWaiters bounds the requests that wait at once: long-polls,
	// streams and blocking acquires (429 past it).
	MaxWaiters int `json:"max_waiters"`
	// MaxConns bounds the open connections of each listener; more wait in
	// the kernel's backlog.
	MaxConns int `json:"max_conns"`
	// MaxWait bounds a long-poll's or a blocking acquire's wait.
	MaxWait jsonDuration `json:"max_wait"`
	// Session TTLs: the range a client may ask for, and what it gets when
	// it asks for none.
	MinSessionTTL     jsonDuration `json:"min_session_ttl"`
	MaxSessionTTL     jsonDuration `json:"max_session_ttl"`
	DefaultSessionTTL jsonDuration `json:"default_session_ttl"`
}

func defaultAPILimits() apiLimits {
	return apiLimits{
		MaxBodyBytes:       1 << 20,
		MaxSessions:        20000,
		MaxLocksPerSession: 1000,
		MaxWaiters:         20000,
		MaxConns:           16384,
		MaxWait:            jsonDuration(5 * time.Minute),
		MinSessionTTL:      jsonDuration(time.Second),
		MaxSessionTTL:      jsonDuration(24 * time.Hour),
		DefaultSessionTTL:  jsonDuration(10 * time.Second),
	}
}

func (l apiLimits) validate() error {
	if l.MaxBodyBytes < 1024 || l.MaxSessions < 1 || l.MaxLocksPerSession < 1 || l.MaxWaiters < 1 || l.MaxConns < 1 ||
		l.MaxWait < jsonDuration(time.Second) || l.MinSessionTTL < jsonDuration(100*time.Millisecond) ||
		l.MaxSessionTTL < l.MinSessionTTL || l.DefaultSessionTTL < l.MinSessionTTL || l.DefaultSessionTTL > l.MaxSessionTTL {
		return errors.New("limits: max_body_bytes at least 1024; max_sessions, max_locks_per_session, max_waiters, max_conns at least 1; " +
			"max_wait at least 1s; min_session_ttl at least 100ms, at most default_session_ttl, at most max_session_ttl")
	}
	return nil
}

// jsonDuration is a duration written as Go writes it ("10s", "1m30s").
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = jsonDuration(v)
	return nil
}

// httpAPI serves the API for one mesh node.
type httpAPI struct {
	m       *mesh.Mesh
	cfg     *mesh.Config
	lim     apiLimits
	acl     *acl // no tokens configured when it has none
	log     hclog.Logger
	sess    *sessionStore
	watches *watchHub
	waiters chan struct{} // requests that wait (MaxWaiters)
	mux     *http.ServeMux
	closing atomic.Bool

	requests atomic.Uint64
}

// principal is who makes a request: a token, or, with tok nil, a caller
// the listener trusts with everything (the unix socket without a token,
// or a listener of an agent that has no tokens).
type principal struct {
	name string
	tok  *apiToken
}

func (p *principal) can(want perm, key string) (bool, string) {
	if p.tok == nil {
		return true, ""
	}
	return p.tok.allows(want, key)
}

func (p *principal) owns(s *session) bool {
	if p.tok == nil || s.owner == p.name {
		return true
	}
	ok, _ := p.tok.allows(permAdmin, "")
	return ok
}

// call is one request being served.
type call struct {
	api *httpAPI
	w   http.ResponseWriter
	r   *http.Request
	who *principal
}

// route is one operation of the API.
type route struct {
	method, path string // path as openapi.json writes it
	// public routes need no token; others need a valid one, and perm on
	// the path parameter keyParam ("": on the empty key) unless perm is
	// permNone.
	public   bool
	perm     perm
	keyParam string
	handle   func(*call)
}

// routes is every operation, in openapi.json's order.
func (a *httpAPI) routes() []route {
	return []route{
		{method: "GET", path: "/v1/openapi.json", public: true, handle: a.handleOpenAPI},
		{method: "GET", path: "/v1/health", public: true, handle: a.handleHealth},
		{method: "GET", path: "/v1/ready", public: true, handle: a.handleReady},
		{method: "GET", path: "/v1/status", handle: a.handleStatus},
		{method: "POST", path: "/v1/sessions", handle: a.handleCreateSession},
		{method: "GET", path: "/v1/sessions", perm: permAdmin, handle: a.handleListSessions},
		{method: "GET", path: "/v1/sessions/{id}", handle: a.handleGetSession},
		{method: "DELETE", path: "/v1/sessions/{id}", handle: a.handleDeleteSession},
		{method: "POST", path: "/v1/sessions/{id}/refresh", handle: a.handleRefreshSession},
		{method: "GET", path: "/v1/locks", handle: a.handleListLocks},
		{method: "GET", path: "/v1/locks/{key}", perm: permRead, keyParam: "key", handle: a.handleHolder},
		{method: "PUT", path: "/v1/locks/{key}", perm: permLock, keyParam: "key", handle: a.handleAcquire},
		{method: "PATCH", path: "/v1/locks/{key}", perm: permLock, keyParam: "key", handle: a.handleSetValue},
		{method: "DELETE", path: "/v1/locks/{key}", perm: permLock, keyParam: "key", handle: a.handleRelease},
		{method: "GET", path: "/v1/watch/{key}", perm: permRead, keyParam: "key", handle: a.handleWatch},
		{method: "PUT", path: "/v1/semaphores/{name}", perm: permLock, keyParam: "name", handle: a.handleAcquireSemaphore},
		{method: "DELETE", path: "/v1/semaphores/{name}", perm: permLock, keyParam: "name", handle: a.handleReleaseSemaphore},
		{method: "GET", path: "/v1/elections/{name}", perm: permRead, keyParam: "name", handle: a.handleLeader},
		{method: "PUT", path: "/v1/elections/{name}", perm: permElect, keyParam: "name", handle: a.handleCampaign},
		{method: "PATCH", path: "/v1/elections/{name}", perm: permElect, keyParam: "name", handle: a.handleProclaim},
		{method: "DELETE", path: "/v1/elections/{name}", perm: permElect, keyParam: "name", handle: a.handleResign},
		{method: "GET", path: "/v1/observe/{name}", perm: permRead, keyParam: "name", handle: a.handleObserve},
		{method: "GET", path: "/v1/voters", handle: a.handleVoters},
		{method: "PUT", path: "/v1/voters/{node}", perm: permAdmin, handle: a.handleAddVoter},
		{method: "DELETE", path: "/v1/voters/{node}", perm: permAdmin, handle: a.handleRemoveVoter},
	}
}

// muxPattern is the ServeMux pattern of a route: keys and names may hold
// slashes, so their parameter (always the last segment) takes the rest
// of the path.
func (rt route) muxPattern() string {
	p := rt.path
	for _, name := range []string{"{key}", "{name}"} {
		if strings.HasSuffix(p, name) {
			p = strings.TrimSuffix(p, "}") + "...}"
		}
	}
	return rt.method + " " + p
}

func newHTTPAPI(m *mesh.Mesh, cfg *mesh.Config, lim apiLimits, a *acl, log hclog.Logger) *httpAPI {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if a == nil {
		a = &acl{log: log, logged: map[string]time.Time{}, denied: map[string]uint64{}}
	}
	api := &httpAPI{m: m, cfg: cfg, lim: lim, acl: a, log: log, sess: newSessionStore(lim, log),
		watches: newWatchHub(m), waiters: make(chan struct{}, lim.MaxWaiters), mux: http.NewServeMux()}
	for _, rt := range api.routes() {
		api.mux.Handle(rt.muxPattern(), rt)
	}
	api.mux.HandleFunc("/", api.handleNotFound)
	return api
}

// ServeHTTP of a route: the caller's permission, then the handler.
func (rt route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(callKey{}).(*call)
	c.w, c.r = w, r
	if !rt.public {
		if c.who == nil {
			c.api.unauthorized(c)
			return
		}
		if rt.perm != permNone {
			key := ""
			if rt.keyParam != "" {
				key = r.PathValue(rt.keyParam)
			}
			if ok, why := c.who.can(rt.perm, key); !ok {
				c.api.forbid(c, why)
				return
			}
		}
	}
	rt.handle(c)
}

type callKey struct{}

// handler is the API as a listener serves it. anonymous: requests without
// a token get every permission (the unix socket, whose file permissions
// are its access control; or a listener of an agent without tokens).
func (a *httpAPI) handler(anonymous bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		c := &call{api: a, w: w, r: r}
		switch tok, ok := bearer(r); {
		case ok:
			if t := a.acl.authenticate(tok); t != nil {
				c.who = &principal{name: t.name, tok: t}
			}
			// A token that is no token is refused even where none is
			// needed: its holder believes it grants something.
			if c.who == nil && !strings.HasPrefix(r.URL.Path, "/v1/openapi.json") {
				a.acl.deniedFor("anonymous", "an unknown bearer token", time.Now())
				writeProblem(w, newProblem("unauthorized", "the bearer token is not one of this agent's"))
				return
			}
		case anonymous:
			c.who = &principal{name: "anonymous"}
		}
		if r.ContentLength > a.lim.MaxBodyBytes {
			writeProblem(w, newProblem("body_too_large", "a body of %d bytes: at most %d (limits.max_body_bytes)", r.ContentLength, a.lim.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, a.lim.MaxBodyBytes)
		// A slow body is cut at bodyTimeout (the server has no
		// ReadTimeout: its deadline would end every long-poll's context
		// too; beginWait lifts this one once the body is read).
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		rc.SetWriteDeadline(time.Now().Add(time.Duration(a.lim.MaxWait) + bodyTimeout))
		ctx := r.Context()
		a.mux.ServeHTTP(w, r.WithContext(contextWithCall(ctx, c)))
	})
}

func (a *httpAPI) unauthorized(c *call) {
	a.acl.deniedFor("anonymous", "no bearer token", time.Now())
	c.w.Header().Set("WWW-Authenticate", `Bearer realm="lockmesh"`)
	writeProblem(c.w, newProblem("unauthorized", "this listener needs a bearer token (Authorization: Bearer ...)"))
}

func (a *httpAPI) forbid(c *call, why string) {
	c.fail(newProblem("forbidden", "%s", why))
}

// fail answers with p; a refusal is counted and logged (acl.deniedFor).
func (c *call) fail(p *problem) {
	if p.Code == "forbidden" {
		c.api.acl.deniedFor(c.who.name, p.Detail, time.Now())
	}
	writeProblem(c.w, p)
}

// handleNotFound answers paths no route has (404), and methods a path does
// not take (405, with Allow).
func (a *httpAPI) handleNotFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "PUT", "POST", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeProblem(w, newProblem("method_not_allowed", "%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeProblem(w, newProblem("not_found", "no route %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
}

// decode reads the request's JSON body into v. An empty body leaves v as
// it is; unknown fields, trailing data and other media types are refused.
func (c *call) decode(v any) *problem {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/x-www-form-urlencoded") {
			// (curl -d sends the form type; the body is JSON all the same.)
			return newProblem("unsupported_media_type", "Content-Type %q: send application/json", ct)
		}
	}
	dec := json.NewDecoder(c.r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err == nil {
		if dec.More() {
			return newProblem("bad_request", "the body holds more than one JSON value")
		}
		if _, err = dec.Token(); !errors.Is(err, io.EOF) {
			return newProblem("bad_request", "the body holds more than one JSON value")
		}
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return newProblem("body_too_large", "a body over %d bytes (limits.max_body_bytes)", tooLarge.Limit)
	}
	return newProblem("bad_request", "the body is not the JSON this operation takes: %v", err)
}

// wait is the request's wait: the query's wait (GET) or the body's, at
// most MaxWait.
func (a *httpAPI) waitOf(d jsonDuration) time.Duration {
	return min(time.Duration(d), time.Duration(a.lim.MaxWait))
}

// queryWait parses ?wait=; def when absent.
func (c *call) queryWait(def time.Duration) (time.Duration, *problem) {
	s := c.r.URL.Query().Get("wait")
	if s == "" {
		return min(def, time.Duration(c.api.lim.MaxWait)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, newProblem("bad_request", "wait=%q: want a duration such as 30s", s)
	}
	return min(d, time.Duration(c.api.lim.MaxWait)), nil
}

// beginWait takes a waiter's place; false (and a 429 answered) when there
// is none.
func (c *call) beginWait() bool {
	select {
	case c.api.waiters <- struct{}{}:
		http.NewResponseController(c.w).SetReadDeadline(time.Time{})
		return true
	default:
		p := newProblem("too_many", "%d requests are waiting on this agent, its limit (limits.max_waiters)", cap(c.api.waiters))
		p.RetryAfterMS = 1000
		c.fail(p)
		return false
	}
}

func (c *call) endWait() { <-c.api.waiters }

// server is an http.Server of the API for one listener.
func (a *httpAPI) server(anonymous bool) *http.Server {
	return &http.Server{
		Handler:           a.handler(anonymous),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          a.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
}

// bodyTimeout bounds the reading of a request's body.
const bodyTimeout = 30 * time.Second

// limitListener holds at most n connections open; Accept waits for a place.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func limitListen(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

type limitConn struct {
	net.Conn
	once    atomic.Bool
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.once.CompareAndSwap(false, true) {
		c.release()
	}
	return err
}
