package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lockmesh/lockmesh/quorum"
)

// Kinds of transport body: one byte naming the kind, then the message.
const (
	KindRequest      byte = 1 // quorum.Request, answered by KindResponse
	KindResponse     byte = 2
	KindNotify       byte = 3 // quorum.Notify, one-way
	KindCatchUp      byte = 4 // quorum.CatchUpRequest, answered by KindCatchUpReply
	KindCatchUpReply byte = 5
	KindPush         byte = 6 // quorum.ConfigPush, one-way
	KindConfigFetch  byte = 7 // no body; answered by KindConfigReply
	KindConfigReply  byte = 8 // quorum.Membership
)

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("mesh: malformed message")

// Decoding failures that are limits, wrapped by the decoders' errors
// (which also wrap ErrMalformed).
var (
	ErrTooManyOps    = errors.New("too many operations or keys")
	ErrKeyTooLong    = errors.New("key too long")
	ErrTooDeep       = errors.New("nested too deep")
	ErrValueTooLarge = errors.New("lease value too large")
)

// Limits bound what one message may carry.
type Limits struct {
	MaxOps     int // operations per request, results per response
	MaxKeyLen  int
	MaxKeys    int // keys and changes per notify
	MaxEntries int // entries per catch-up reply
	// MaxValueLen bounds a lease value (Value.Data); zero means
	// DefaultMaxValueLen.
	MaxValueLen int
}

// DefaultMaxValueLen is the default bound of a lease value, in bytes.
const DefaultMaxValueLen = 1024

// MaxPrefixLen bounds the key prefix of a listing (CatchUpRequest.Prefix).
const MaxPrefixLen = 4096

func (l Limits) maxValue() int {
	if l.MaxValueLen > 0 {
		return l.MaxValueLen
	}
	return DefaultMaxValueLen
}

const (
	// MaxNameLen bounds a node name, in bytes.
	MaxNameLen = 255
	// MaxVoters bounds a voter configuration: beyond 7, every grant waits
	// on more round trips than a lock is worth.
	MaxVoters = 9
	// MaxRetired bounds the removed voters a configuration lists: one per
	// change, and the version counter allows 65535.
	MaxRetired = 1 << 16
)

// The smallest encodings of an operation and of a result (all fields zero
// or empty): a slice for n of them is allocated before they are read, so
// n must fit in what is left of the message, or a small message could
// make the decoder allocate hundreds of times its size.
// A test keeps these in step with the encoders.
const (
	MinOpBytes     = 24
	MinResultBytes = 25
	// minChangeBytes is the smallest change a notification carries: a
	// one-byte key, a zero ballot, a free value, no remaining time.
	minChangeBytes = 17
	// MinEntryBytes is the smallest catch-up entry with a key: {"k":"x"}.
	MinEntryBytes = 5
)

// CheckKey refuses an empty key, one over MaxKeyLen, or one that is not
// UTF-8.
func (l Limits) CheckKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty key", ErrMalformed)
	case len(k) > l.MaxKeyLen:
		return fmt.Errorf("%w: %w: key of %d bytes (limit %d)", ErrMalformed, ErrKeyTooLong, len(k), l.MaxKeyLen)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: key is not UTF-8", ErrMalformed)
	}
	return nil
}

// CheckName refuses a node name that is empty, too long or not UTF-8.
func CheckName(n quorum.NodeID) error {
	if len(n) == 0 || len(n) > MaxNameLen || !utf8.ValidString(string(n)) {
		return fmt.Errorf("%w: bad node name", ErrMalformed)
	}
	return nil
}

func (l Limits) checkRequest(r *quorum.Request) error {
	if len(r.Ops) == 0 {
		return fmt.Errorf("%w: no operations", ErrMalformed)
	}
	if len(r.Ops) > l.MaxOps {
		return fmt.Errorf("%w: %w: %d operations (limit %d)", ErrMalformed, ErrTooManyOps, len(r.Ops), l.MaxOps)
	}
	if err := CheckName(r.From); err != nil {
		return err
	}
	for i := range r.Ops {
		op := &r.Ops[i]
		if err := l.CheckKey(op.Key); err != nil {
			return err
		}
		if op.Kind < quorum.OpPrepare || op.Kind > quorum.OpForget {
			return fmt.Errorf("%w: operation kind %d", ErrMalformed, op.Kind)
		}
	}
	return nil
}

func (l Limits) checkResponse(r *quorum.Response) error {
	if len(r.Results) > l.MaxOps {
		return fmt.Errorf("%w: %w: %d results (limit %d)", ErrMalformed, ErrTooManyOps, len(r.Results), l.MaxOps)
	}
	for _, v := range r.Lives {
		if err := CheckName(v.Node); err != nil {
			return err
		}
	}
	return CheckName(r.From)
}

// A response's Lives are of the voters of two configurations at most.
const (
	maxLives     = 2 * MaxVoters
	minLifeBytes = 3 // an array header, a name, an integer
)

func (l Limits) checkNotify(n *quorum.Notify) error {
	if len(n.Keys) > l.MaxKeys {
		return fmt.Errorf("%w: %w: %d keys (limit %d)", ErrMalformed, ErrTooManyOps, len(n.Keys), l.MaxKeys)
	}
	for _, k := range n.Keys {
		if err := l.CheckKey(k); err != nil {
			return err
		}
	}
	for i := range n.Changes {
		if err := l.CheckKey(n.Changes[i].Key); err != nil {
			return err
		}
	}
	return CheckName(n.From)
}

func (l Limits) checkCatchUpReply(r *quorum.CatchUpResponse) error {
	if len(r.Entries) > l.MaxEntries {
		return fmt.Errorf("%w: %w: %d entries (limit %d)", ErrMalformed, ErrTooManyOps, len(r.Entries), l.MaxEntries)
	}
	for i := range r.Entries {
		if err := l.CheckKey(r.Entries[i].Key); err != nil {
			return err
		}
		if n := len(r.Entries[i].Value.Data); n > l.maxValue() {
			return fmt.Errorf("%w: %w: a value of %d bytes (limit %d)", ErrMalformed, ErrValueTooLarge, n, l.maxValue())
		}
	}
	for _, m := range []*quorum.Membership{r.Members, r.NewerMembers} {
		if m != nil {
			if err := CheckMembership(m); err != nil {
				return err
			}
		}
	}
	return CheckName(r.From)
}

// CheckMembership refuses a configuration that the protocol could not
// have made: more voters than a configuration may have, more retired
// names than changes can retire, names that are not names, or one that
// does not validate.
func CheckMembership(m *quorum.Membership) error {
	if len(m.Voters) > MaxVoters || len(m.Prev) > MaxVoters || len(m.Joined) > MaxVoters {
		return fmt.Errorf("%w: %w: a configuration of %d voters (%d before, %d joined; limit %d)",
			ErrMalformed, ErrTooManyOps, len(m.Voters), len(m.Prev), len(m.Joined), MaxVoters)
	}
	if len(m.Retired) > MaxRetired {
		return fmt.Errorf("%w: %w: %d retired voters (limit %d)", ErrMalformed, ErrTooManyOps, len(m.Retired), MaxRetired)
	}
	for _, list := range [][]quorum.NodeID{m.Voters, m.Prev, m.Retired} {
		for _, n := range list {
			if err := CheckName(n); err != nil {
				return err
			}
		}
	}
	for _, j := range m.Joined {
		if err := CheckName(j.ID); err != nil {
			return err
		}
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
