package httpfence

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The request headers that carry a lease's fence to a service.
const (
	// HeaderToken carries the fencing token, in decimal (1 to 2⁶⁴−1).
	HeaderToken = "Lockmesh-Fencing-Token"
	// HeaderKey carries the lock's key, percent-encoded: each byte of its
	// UTF-8 outside printable ASCII (space and controls included), and
	// '%' itself, as %XX. "invoices/2026-11" goes as it is.
	HeaderKey = "Lockmesh-Key"
)

// MaxKeyLength is the longest key the middleware accepts, in bytes, once
// decoded: the mesh's default MaxKeyLength.
const MaxKeyLength = 512

// SetToken sets the fencing headers of a request on h: the lease's key and
// token. A client sets them on every write it makes under the lease.
//
//	req, _ := http.NewRequestWithContext(ctx, "PUT", url, body)
//	httpfence.SetToken(req.Header, l.Key(), l.Token())
func SetToken(h http.Header, key string, token uint64) {
	h.Set(HeaderKey, encodeKey(key))
	h.Set(HeaderToken, strconv.FormatUint(token, 10))
}

// encodeKey percent-encodes the bytes of key that a header value cannot
// carry as they are, and '%'.
func encodeKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c <= ' ' || c >= 0x7f || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FromRequest reads the fencing headers of r. The key is "" when r has no
// HeaderKey. It returns an error wrapping ErrNoToken when r has no
// HeaderToken, and one wrapping ErrBadHeader when a header is repeated or
// malformed: a token that is not a decimal number from 1 to 2⁶⁴−1, a key
// that is not valid percent-encoding, not UTF-8, or longer than
// MaxKeyLength bytes.
func FromRequest(r *http.Request) (key string, token uint64, err error) {
	toks := r.Header.Values(HeaderToken)
	keys := r.Header.Values(HeaderKey)
	switch {
	case len(toks) == 0:
		return "", 0, fmt.Errorf("%w: the request has no %s header", ErrNoToken, HeaderToken)
	case len(toks) > 1 || len(keys) > 1:
		return "", 0, fmt.Errorf("%w: %s or %s given more than once", ErrBadHeader, HeaderToken, HeaderKey)
	}
	token, err = strconv.ParseUint(toks[0], 10, 64)
	if err != nil || token == 0 {
		return "", 0, fmt.Errorf("%w: %s %q is not a token (a decimal number from 1 to 2⁶⁴−1)", ErrBadHeader, HeaderToken, toks[0])
	}
	if len(keys) == 0 {
		return "", token, nil
	}
	key, err = url.PathUnescape(keys[0])
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("%w: %s %q is not percent-encoded: %v", ErrBadHeader, HeaderKey, keys[0], err)
	case key == "":
		return "", 0, fmt.Errorf("%w: %s is empty", ErrBadHeader, HeaderKey)
	case len(key) > MaxKeyLength:
		return "", 0, fmt.Errorf("%w: %s of %d bytes, longer than %d", ErrBadHeader, HeaderKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return "", 0, fmt.Errorf("%w: %s %q is not UTF-8", ErrBadHeader, HeaderKey, keys[0])
	}
	return key, token, nil
}
