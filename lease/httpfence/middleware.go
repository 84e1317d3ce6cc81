package httpfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// Config sets up the middleware. Use keyed fields: more may come.
type Config struct {
	// Fence keeps the highest token per key (Memory, SQL, or the service's
	// own). Required.
	Fence Fence

	// Key returns the key that guards what r writes, derived by the service
	// from r (its path, say), whatever the client sends. A request that also
	// sends HeaderKey must name the same key, or it is refused with 400.
	//
	// Nil means the client's HeaderKey names the key, and a request without
	// it is refused with 428. That trusts every client to name the key of
	// what it writes: a client fenced out under one key could otherwise
	// write the same data under another key, where its token is current.
	// Leave Key nil only where one key guards everything the handler
	// writes, or where the clients are trusted to that extent.
	Key func(r *http.Request) (string, error)

	// Logger receives the errors of the fence itself (a database that
	// cannot be reached, a commit that failed), which the client sees as
	// 500 without details. Nil: silent.
	Logger hclog.Logger
}

// Validate reports what is wrong with c, if anything, as an error wrapping
// ErrInvalidConfig. It neither changes c nor panics.
func (c Config) Validate() error {
	if isNil(c.Fence) {
		return fmt.Errorf("%w: no Fence", ErrInvalidConfig)
	}
	return nil
}

// Middleware returns middleware that runs each request's handler under the
// fence, with the request's fencing token (HeaderToken) for its key (Key, or
// HeaderKey). Wrap the handlers that write; reads need no token.
//
// The handler runs inside Fence.Apply, so its write and the token check are
// one step: no newer holder's write can come between them. Under the SQL
// fence the handler writes through Tx(r.Context()), and the transaction
// commits after the handler returns. The token is recorded (and the
// transaction committed) only if the handler's status is below 400; at 400
// or above the fence rolls back and the handler's response goes out as it
// is.
//
// The handler's response is held in memory until the fence has committed,
// so that a client never hears of a write that did not commit: a handler
// cannot stream, flush early (http.ResponseController's Flush reports
// http.ErrNotSupported) or hijack the connection. Informational (1xx)
// responses are dropped.
//
// The middleware answers for itself, with an application/problem+json body
// (RFC 9457) whose type is one of the Problem constants:
//
//   - 409 Conflict, ProblemStaleToken: a higher token has been admitted for
//     the key; the handler did not run. The body names key, token and
//     highest (decimal strings, as the headers are).
//   - 428 Precondition Required, ProblemTokenRequired: no token (or no key,
//     when Config.Key is nil).
//   - 400 Bad Request, ProblemBadHeader: a malformed or repeated header, a
//     key other than Config.Key's, or one the fence refuses.
//   - 500 Internal Server Error, ProblemFenceFailed: the fence could not
//     check the token or commit; the write may or may not have committed.
//
// 409 rather than 412 Precondition Failed: the token is not a validator of
// the resource's representation (an ETag checked by If-Match), and the
// request conflicts with the resource's state as a newer holder left it. A
// service can keep using 412 for its own If-Match, and a client can tell
// the two refusals apart.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return func(next http.Handler) http.Handler {
		return &guard{fence: cfg.Fence, key: cfg.Key, log: log, next: next}
	}, nil
}

// guard is the middleware around one handler.
type guard struct {
	fence Fence
	key   func(*http.Request) (string, error)
	log   hclog.Logger
	next  http.Handler
}

// errHandlerFailed is what the write returns to the fence when the handler
// answered 400 or above, so that the fence records nothing.
var errHandlerFailed = errors.New("httpfence: the handler answered with an error status")

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, token, err := g.keyAndToken(r)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	buf := &bufferedResponse{header: make(http.Header)}
	ctx := context.WithValue(r.Context(), tokenKey{}, fenced{key, token})
	err = g.fence.Apply(ctx, key, token, func(ctx context.Context) error {
		g.next.ServeHTTP(buf, r.WithContext(ctx))
		if buf.statusCode() >= 400 {
			return errHandlerFailed
		}
		return nil
	})
	var stale *lease.StaleTokenError
	switch {
	case err == nil || err == errHandlerFailed:
		buf.sendTo(w)
	case errors.As(err, &stale):
		writeProblem(w, staleProblem(stale))
	case errors.Is(err, sqlfence.ErrInvalidKey) || errors.Is(err, sqlfence.ErrTokenRange):
		writeProblem(w, problemFor(fmt.Errorf("%w: %v", ErrBadHeader, err)))
	default:
		g.log.Error("fenced request failed", "method", r.Method, "path", r.URL.Path, "key", key, "token", token, "error", err)
		writeProblem(w, problem{
			Type: ProblemFenceFailed, Title: "Fence failed", Status: http.StatusInternalServerError,
			Detail: "the fencing token could not be checked, or the write could not be committed; it may or may not have taken effect",
		})
	}
}

// keyAndToken returns the key and token the request is fenced under.
func (g *guard) keyAndToken(r *http.Request) (string, uint64, error) {
	key, token, err := FromRequest(r)
	if err != nil {
		return "", 0, err
	}
	if g.key == nil {
		if key == "" {
			return "", 0, fmt.Errorf("%w: the request has no %s header", ErrNoToken, HeaderKey)
		}
		return key, token, nil
	}
	want, err := g.key(r)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("%w: no fencing key for %s: %v", ErrBadHeader, r.URL.Path, err)
	case key != "" && key != want:
		return "", 0, fmt.Errorf("%w: %s %q, but %s is fenced under %q", ErrBadHeader, HeaderKey, key, r.URL.Path, want)
	}
	return want, token, nil
}

// bufferedResponse holds a handler's response until the fence has decided.
// It has neither Flush nor Unwrap, so nothing reaches the client early.
type bufferedResponse struct {
	header http.Header
	status int // 0 until WriteHeader or Write
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status != 0 || code < 200 {
		return // the status is set once; 1xx responses are dropped
	}
	b.status = code
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func (b *bufferedResponse) statusCode() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

func (b *bufferedResponse) sendTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = v
	}
	w.WriteHeader(b.statusCode())
	w.Write(b.body.Bytes())
}
