package wire

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/lockmesh/lockmesh/quorum"
)

// Cold messages (catch-ups, voter-configuration pushes and fetch replies,
// gossip metadata) go through go-msgpack's reflection, as maps keyed by
// each field's codec tag: a field a later version added is a key this
// version does not know, which go-msgpack skips, and one this version knows
// but the sender did not write (an older version) stays zero. A field is
// optional by construction; its zero must mean what an older sender meant.

var msgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.MaxInitLen = 256 // never preallocate from an untrusted length
	h.MaxDepth = 16    // our messages nest seven deep at most (a catch-up entry of the voter configuration)
	return h
}()

// Encode encodes v, a cold message, as a transport body of the given kind.
func Encode(kind byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(128)
	buf.WriteByte(kind)
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(v); err != nil {
		return nil, fmt.Errorf("mesh: encoding message kind %d: %w", kind, err)
	}
	return buf.Bytes(), nil
}

// Decode reads a body of the expected kind into v. It checks nothing of
// what it decodes: use the DecodeX functions for network input.
func Decode(body []byte, want byte, v any) error {
	if len(body) < 2 {
		return fmt.Errorf("%w: %d bytes", ErrMalformed, len(body))
	}
	if body[0] != want {
		return fmt.Errorf("%w: kind %d where %d was expected", ErrMalformed, body[0], want)
	}
	return decodeBytes(body[1:], v)
}

func decodeBytes(b []byte, v any) error {
	if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(v); err != nil {
		if strings.Contains(err.Error(), "maximum decoding depth exceeded") { // go-msgpack's text
			return fmt.Errorf("%w: %w: %v", ErrMalformed, ErrTooDeep, err)
		}
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// DecodeCatchUp decodes and checks a catch-up request (KindCatchUp), which
// is also how a node is asked who it is.
func DecodeCatchUp(body []byte) (*quorum.CatchUpRequest, error) {
	req := new(quorum.CatchUpRequest)
	if err := Decode(body, KindCatchUp, req); err != nil {
		return nil, err
	}
	if err := CheckName(req.From); err != nil {
		return nil, err
	}
	if len(req.Prefix) > MaxPrefixLen || !utf8.ValidString(req.Prefix) {
		return nil, fmt.Errorf("%w: a listing prefix of %d bytes, or not UTF-8", ErrMalformed, len(req.Prefix))
	}
	if len(req.Quiet) > quorum.MaxQuietLives {
		return nil, fmt.Errorf("%w: %d quiet lives named, at most %d", ErrMalformed, len(req.Quiet), quorum.MaxQuietLives)
	}
	return req, nil
}

// entryCount is a catch-up reply's entries as zero-size values: decoding
// into it counts them without allocating for them.
type entryCount struct {
	Entries []struct{} `codec:"e"`
}

// DecodeCatchUpReply decodes and checks a catch-up reply
// (KindCatchUpReply). go-msgpack grows a slice to whatever length the
// message announces and only then do we see it, so the entries are counted
// first, into zero-size values, and refused if there are more than the
// limit or than the message could hold.
func (l Limits) DecodeCatchUpReply(body []byte) (*quorum.CatchUpResponse, error) {
	var shape entryCount
	if err := Decode(body, KindCatchUpReply, &shape); err != nil {
		return nil, err
	}
	if n := len(shape.Entries); n > l.MaxEntries || n > len(body)/MinEntryBytes {
		return nil, fmt.Errorf("%w: %w: %d entries in %d bytes (limit %d)", ErrMalformed, ErrTooManyOps, n, len(body), l.MaxEntries)
	}
	var resp quorum.CatchUpResponse
	if err := Decode(body, KindCatchUpReply, &resp); err != nil {
		return nil, err
	}
	if err := l.checkCatchUpReply(&resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Decoders of the voter-configuration messages: a push (KindPush, one-way,
// from a proposer to a node that is behind) and the answer to a fetch
// (KindConfigReply). msgpackHandle never preallocates more than MaxInitLen
// elements from an announced length; the configuration is then checked
// against the limits of a configuration and validated, so what reaches the
// protocol is one it could have made.

// DecodeConfigPush decodes and checks a configuration push.
func DecodeConfigPush(body []byte) (*quorum.ConfigPush, error) {
	var push quorum.ConfigPush
	if err := Decode(body, KindPush, &push); err != nil {
		return nil, err
	}
	if err := CheckName(push.From); err != nil {
		return nil, err
	}
	if err := CheckMembership(&push.Members); err != nil {
		return nil, err
	}
	return &push, nil
}

// DecodeConfigReply decodes and checks the answer to a configuration fetch.
func DecodeConfigReply(body []byte) (quorum.Membership, error) {
	var vs quorum.Membership
	if err := Decode(body, KindConfigReply, &vs); err != nil {
		return quorum.Membership{}, err
	}
	if err := CheckMembership(&vs); err != nil {
		return quorum.Membership{}, err
	}
	return vs, nil
}

// ConfigInfo is the answer to a configuration fetch: the configuration,
// its fields inline (so that a node reading a quorum.Membership, as older
// ones do, reads it too), and what the node tells about itself: the
// founding voters it was started with, if it knows them, and its voting
// state (readiness probes read it).
type ConfigInfo struct {
	quorum.Membership
	Founders []quorum.NodeID `codec:"fv,omitempty"`
	Voting   string          `codec:"vs,omitempty"` // the mesh's VotingState, as text
}

// MaxVotingText bounds ConfigInfo.Voting.
const MaxVotingText = 32

// DecodeConfigInfo decodes and checks the answer to a configuration fetch,
// as DecodeConfigReply does, and the founding voters and voting state.
func DecodeConfigInfo(body []byte) (ConfigInfo, error) {
	var info ConfigInfo
	if err := Decode(body, KindConfigReply, &info); err != nil {
		return ConfigInfo{}, err
	}
	if err := CheckMembership(&info.Membership); err != nil {
		return ConfigInfo{}, err
	}
	if len(info.Founders) > MaxVoters {
		return ConfigInfo{}, fmt.Errorf("%w: %w: %d founding voters (limit %d)", ErrMalformed, ErrTooManyOps, len(info.Founders), MaxVoters)
	}
	for _, n := range info.Founders {
		if err := CheckName(n); err != nil {
			return ConfigInfo{}, err
		}
	}
	if len(info.Voting) > MaxVotingText {
		return ConfigInfo{}, fmt.Errorf("%w: voting state of %d bytes", ErrMalformed, len(info.Voting))
	}
	return info, nil
}
