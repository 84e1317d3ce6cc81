package httpfence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/lockmesh/lockmesh/lease"
)

// The problem types of the middleware's answers (RFC 9457): URIs of the
// sections of the fencing guide that explain them.
const (
	problemBase = "https://github.com/lockmesh/lockmesh/blob/main/docs/fencing.md#"
	// ProblemStaleToken: 409, a higher token has been admitted for the key.
	ProblemStaleToken = problemBase + "stale-token"
	// ProblemTokenRequired: 428, the request has no fencing token or key.
	ProblemTokenRequired = problemBase + "token-required"
	// ProblemBadHeader: 400, a fencing header is malformed or names the
	// wrong key.
	ProblemBadHeader = problemBase + "bad-fencing-header"
	// ProblemFenceFailed: 500, the fence could not check or commit.
	ProblemFenceFailed = problemBase + "fence-failed"
)

// ProblemContentType is the media type of the middleware's error bodies.
const ProblemContentType = "application/problem+json"

// problem is an RFC 9457 problem details object. Tokens are decimal
// strings: a JavaScript number holds integers exactly only up to 2⁵³.
type problem struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail,omitempty"`
	Key     string `json:"key,omitempty"`
	Token   string `json:"token,omitempty"`
	Highest string `json:"highest,omitempty"` // absent when the fence could not tell
}

func staleProblem(e *lease.StaleTokenError) problem {
	p := problem{
		Type: ProblemStaleToken, Title: "Stale fencing token", Status: http.StatusConflict,
		Detail: e.Error(), Key: e.Key, Token: strconv.FormatUint(e.Token, 10),
	}
	if e.Highest != 0 {
		p.Highest = strconv.FormatUint(e.Highest, 10)
	}
	return p
}

// problemFor answers an error about the request's fencing headers.
func problemFor(err error) problem {
	if errors.Is(err, ErrNoToken) {
		return problem{Type: ProblemTokenRequired, Title: "Fencing token required", Status: http.StatusPreconditionRequired, Detail: err.Error()}
	}
	return problem{Type: ProblemBadHeader, Title: "Bad fencing header", Status: http.StatusBadRequest, Detail: err.Error()}
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// maxProblem bounds how much of a response body CheckResponse reads.
const maxProblem = 64 << 10

// CheckResponse tells a client what the middleware's answer means: a
// *lease.StaleTokenError (errors.Is(err, lease.ErrStaleToken)) for 409 with
// ProblemStaleToken, an error wrapping ErrNoToken for ProblemTokenRequired,
// one wrapping ErrBadHeader for ProblemBadHeader, and nil for any other
// response, which the caller reads as usual. resp.Body stays readable from
// its start.
//
//	resp, err := client.Do(req)
//	...
//	if err := httpfence.CheckResponse(resp); errors.Is(err, lease.ErrStaleToken) {
//		// our lease ended and a newer holder has written: stop
//	}
func CheckResponse(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusPreconditionRequired, http.StatusBadRequest:
	default:
		return nil
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != ProblemContentType {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProblem))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if err != nil {
		return nil // the caller reads the same error from the body
	}
	var p problem
	if json.Unmarshal(body, &p) != nil {
		return nil
	}
	switch p.Type {
	case ProblemTokenRequired:
		return fmt.Errorf("%w: the service said: %s", ErrNoToken, p.Detail)
	case ProblemBadHeader:
		return fmt.Errorf("%w: the service said: %s", ErrBadHeader, p.Detail)
	case ProblemStaleToken:
		e := &lease.StaleTokenError{Key: p.Key}
		e.Token, _ = strconv.ParseUint(p.Token, 10, 64)
		e.Highest, _ = strconv.ParseUint(p.Highest, 10, 64) // absent: 0, unknown
		return e
	}
	return nil
}
