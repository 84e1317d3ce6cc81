package httpfence

import "errors"

// Sentinel errors, wrapped with %w and details: compare with errors.Is.
// A stale token is a *lease.StaleTokenError (errors.Is(err,
// lease.ErrStaleToken)), on the server as on the client (CheckResponse).
var (
	// ErrInvalidConfig means a Config field is missing or out of range.
	ErrInvalidConfig = errors.New("httpfence: invalid config")

	// ErrNoToken means a request carries no fencing token header. The
	// middleware answers 428 Precondition Required.
	ErrNoToken = errors.New("httpfence: no fencing token")

	// ErrBadHeader means a fencing header is malformed, repeated, or names
	// another key than the one the service says guards the request. The
	// middleware answers 400 Bad Request.
	ErrBadHeader = errors.New("httpfence: bad fencing header")
)
