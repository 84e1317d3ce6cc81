package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/lockmesh/lockmesh/quorum"
)

// The ballot messages travel as transport bodies: one byte naming the kind,
// then the message in msgpack. Everything read from the network is checked
// against the limits below before the protocol sees it.

// Kinds of body.
const (
	kindRequest      byte = 1 // quorum.Request, answered by kindResponse
	kindResponse     byte = 2
	kindNotify       byte = 3 // quorum.Notify, one-way
	kindCatchUp      byte = 4 // quorum.CatchUpRequest, answered by kindCatchUpReply
	kindCatchUpReply byte = 5
	kindPush         byte = 6 // quorum.ConfigPush, one-way
	kindConfigFetch  byte = 7 // no body; answered by kindConfigReply
	kindConfigReply  byte = 8 // quorum.Membership
)

// limits bound what one message may carry.
type limits struct {
	maxOps    int // operations per request, results per response
	maxKeyLen int
	maxKeys   int // keys per notify
	maxEntry  int // entries per catch-up reply
}

var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.MaxInitLen = 256 // never preallocate from an untrusted length
	h.MaxDepth = 16    // our messages nest seven deep at most (a catch-up entry of the voter configuration)
	return h
}()

// errMalformed wraps every decoding failure.
var errMalformed = errors.New("mesh: malformed message")

func encode(kind byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(128)
	buf.WriteByte(kind)
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(v); err != nil {
		return nil, fmt.Errorf("mesh: encoding message kind %d: %w", kind, err)
	}
	return buf.Bytes(), nil
}

// decode reads a body of the expected kind into v.
func decode(body []byte, want byte, v any) error {
	if len(body) < 2 {
		return fmt.Errorf("%w: %d bytes", errMalformed, len(body))
	}
	if body[0] != want {
		return fmt.Errorf("%w: kind %d where %d was expected", errMalformed, body[0], want)
	}
	dec := codec.NewDecoderBytes(body[1:], msgpackHandle)
	if err := dec.Decode(v); err != nil {
		if strings.Contains(err.Error(), "maximum decoding depth exceeded") { // go-msgpack's text
			return fmt.Errorf("%w: %w: %v", errMalformed, errTooDeep, err)
		}
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}

func (l limits) checkKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty key", errMalformed)
	case len(k) > l.maxKeyLen:
		return fmt.Errorf("%w: %w: key of %d bytes (limit %d)", errMalformed, errKeyTooLong, len(k), l.maxKeyLen)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: key is not UTF-8", errMalformed)
	}
	return nil
}

func checkName(n quorum.NodeID) error {
	if len(n) == 0 || len(n) > 255 || !utf8.ValidString(string(n)) {
		return fmt.Errorf("%w: bad node name", errMalformed)
	}
	return nil
}

func (l limits) checkRequest(r *quorum.Request) error {
	if len(r.Ops) == 0 {
		return fmt.Errorf("%w: no operations", errMalformed)
	}
	if len(r.Ops) > l.maxOps {
		return fmt.Errorf("%w: %w: %d operations (limit %d)", errMalformed, errTooManyOps, len(r.Ops), l.maxOps)
	}
	if err := checkName(r.From); err != nil {
		return err
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if err := l.checkKey(op.Key); err != nil {
			return err
		}
		if op.Kind < quorum.OpPrepare || op.Kind > quorum.OpUnwatch {
			return fmt.Errorf("%w: operation kind %d", errMalformed, op.Kind)
		}
	}
	return nil
}

func (l limits) checkResponse(r *quorum.Response) error {
	if len(r.Results) > l.maxOps {
		return fmt.Errorf("%w: %w: %d results (limit %d)", errMalformed, errTooManyOps, len(r.Results), l.maxOps)
	}
	return checkName(r.From)
}

func (l limits) checkNotify(n *quorum.Notify) error {
	if len(n.Keys) > l.maxKeys {
		return fmt.Errorf("%w: %w: %d keys (limit %d)", errMalformed, errTooManyOps, len(n.Keys), l.maxKeys)
	}
	for _, k := range n.Keys {
		if err := l.checkKey(k); err != nil {
			return err
		}
	}
	return checkName(n.From)
}

func (l limits) checkCatchUpReply(r *quorum.CatchUpResponse) error {
	if len(r.Entries) > l.maxEntry {
		return fmt.Errorf("%w: %w: %d entries (limit %d)", errMalformed, errTooManyOps, len(r.Entries), l.maxEntry)
	}
	for i := range r.Entries {
		if err := l.checkKey(r.Entries[i].Key); err != nil {
			return err
		}
	}
	return checkName(r.From)
}
