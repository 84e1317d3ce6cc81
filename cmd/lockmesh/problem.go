package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The HTTP API's errors: RFC 9457 problem details, each with a code that
// clients branch on. The codes are part of the API (openapi.json lists
// them); their titles and details are for people and may change.

// problem is one error answer.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`

	// Who holds the key (locked, semaphore_mismatch), when known.
	Holder string `json:"holder,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	Key    string `json:"key,omitempty"`
	// RetryAfterMS: when it makes sense to try again (too_many, no_quorum).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

func (p *problem) Error() string { return p.Code + ": " + p.Detail }

// problemCodes are the stable codes, their HTTP status and title.
var problemCodes = map[string]struct {
	status int
	title  string
}{
	"bad_request":            {http.StatusBadRequest, "Bad request"},
	"invalid_key":            {http.StatusBadRequest, "Invalid key"},
	"invalid_option":         {http.StatusBadRequest, "Invalid option"},
	"value_too_large":        {http.StatusBadRequest, "Value too large"},
	"unauthorized":           {http.StatusUnauthorized, "No valid token"},
	"forbidden":              {http.StatusForbidden, "Not allowed"},
	"not_found":              {http.StatusNotFound, "No such resource"},
	"session_not_found":      {http.StatusNotFound, "No such session"},
	"unknown_node":           {http.StatusNotFound, "Unknown node"},
	"method_not_allowed":     {http.StatusMethodNotAllowed, "Method not allowed"},
	"locked":                 {http.StatusConflict, "Held by another holder"},
	"not_held":               {http.StatusConflict, "Not held by this session"},
	"semaphore_mismatch":     {http.StatusConflict, "Semaphore size mismatch"},
	"bad_voter_change":       {http.StatusConflict, "Voter change not allowed"},
	"session_expired":        {http.StatusGone, "Session ended"},
	"lease_lost":             {http.StatusGone, "Lease lost"},
	"body_too_large":         {http.StatusRequestEntityTooLarge, "Request body too large"},
	"unsupported_media_type": {http.StatusUnsupportedMediaType, "Unsupported media type"},
	"too_many":               {http.StatusTooManyRequests, "Too many"},
	"internal":               {http.StatusInternalServerError, "Internal error"},
	"no_quorum":              {http.StatusServiceUnavailable, "No majority of the voters answered"},
	"not_ready":              {http.StatusServiceUnavailable, "Node not ready"},
	"upgrade_required":       {http.StatusServiceUnavailable, "A node of the mesh speaks an earlier protocol"},
	"closed":                 {http.StatusServiceUnavailable, "Agent shutting down"},
	"timeout":                {http.StatusGatewayTimeout, "Timed out"},
}

// problemDocs is where each code is described (the type URI).
const problemDocs = "https://github.com/lockmesh/lockmesh/blob/main/docs/http-api.md#error-"

// newProblem is a problem of code with a detail.
func newProblem(code, format string, args ...any) *problem {
	c, ok := problemCodes[code]
	if !ok {
		c = problemCodes["internal"]
	}
	return &problem{Type: problemDocs + code, Title: c.title, Status: c.status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem answers with p.
func writeProblem(w http.ResponseWriter, p *problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if p.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", fmt.Sprint((p.RetryAfterMS+999)/1000))
	}
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// problemOf classifies an error of package mesh (or of a context).
func problemOf(err error) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	var locked *mesh.LockedError
	var cancelled *mesh.CancelledError
	switch {
	case errors.As(err, &locked) && locked.ThisNode:
		// The mesh's words speak to a Go caller holding another Lease;
		// here that Lease is another session's.
		p = newProblem("locked", "%q is held by another session of this agent (node %s, token %d)", locked.Key, locked.Holder, locked.Token)
		p.Holder, p.Token, p.Key = locked.Holder, locked.Token, locked.Key
		return p
	case errors.As(err, &locked):
		p = newProblem("locked", "%v", err)
		p.Holder, p.Token, p.Key = locked.Holder, locked.Token, locked.Key
		return p
	case errors.As(err, &cancelled) && errors.Is(err, mesh.ErrNoQuorum):
		return newProblem("no_quorum", "%v", err)
	case errors.Is(err, mesh.ErrInvalidKey):
		return newProblem("invalid_key", "%v", err)
	case errors.Is(err, mesh.ErrValueTooLarge):
		return newProblem("value_too_large", "%v", err)
	case errors.Is(err, mesh.ErrInvalidOption):
		return newProblem("invalid_option", "%v", err)
	case errors.Is(err, mesh.ErrSemaphoreMismatch):
		return newProblem("semaphore_mismatch", "%v", err)
	case errors.Is(err, mesh.ErrUpgradeRequired):
		return newProblem("upgrade_required", "%v", err)
	case errors.Is(err, mesh.ErrLeaseLost), errors.Is(err, mesh.ErrReleased):
		return newProblem("lease_lost", "%v", err)
	case errors.Is(err, mesh.ErrClosed):
		return newProblem("closed", "%v", err)
	case errors.Is(err, mesh.ErrNoVoters), errors.Is(err, mesh.ErrNotReady):
		return newProblem("not_ready", "%v", err)
	case errors.Is(err, mesh.ErrUnknownNode):
		return newProblem("unknown_node", "%v", err)
	case errors.Is(err, mesh.ErrBadVoterChange):
		return newProblem("bad_voter_change", "%v", err)
	case errors.Is(err, mesh.ErrNoQuorum):
		p = newProblem("no_quorum", "%v", err)
		p.RetryAfterMS = 1000
		return p
	case errors.Is(err, context.DeadlineExceeded):
		return newProblem("timeout", "%v", err)
	case errors.Is(err, context.Canceled):
		// The client went away, or its session ended: whoever reads
		// this (nobody, or the session's stream) learns the session is
		// gone.
		return newProblem("session_expired", "%v", err)
	}
	return newProblem("internal", "%v", err)
}

// msOf is d in whole milliseconds, rounded down (a bound a client adds to
// its own clock must never come out later than the agent's).
func msOf(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d / time.Millisecond)
}
