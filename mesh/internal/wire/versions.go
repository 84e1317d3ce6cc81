package wire

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

// Protocol versions of the ballot wire format. A node speaks a range of
// them (Supported); two nodes talk in the highest version both speak. A node
// that says nothing of its version, in its transport hello or its gossip
// metadata, is of version 1.
const (
	// Version1 is the format of the first releases, through commit 4de5f7e:
	// operation kinds 1 to 3 (prepare, accept, peek); catch-up answers
	// without Horizon and entries without Remaining; the transport hello
	// carries only the dialer's name, and gossip metadata no settings; its
	// decoders refuse a struct of any other field count than they know,
	// and a request with an unknown operation kind (the whole batch).
	Version1 = 1
	// Version2 adds operation kinds 4, OpUnwatch (a hint that a waiter
	// left), and 5, OpForget (every voter holds a key free: drop it), never
	// sent to a node of version 1; catch-up answers' Horizon, floors
	// (PromiseFloor, EpochFloor) and entries' Remaining (go-msgpack fields,
	// optional); Membership's EpochFloor; decoders that skip
	// fields appended after those they know, and the safety-relevant
	// settings (Settings) in the transport hello, both ways, and in gossip
	// metadata.
	Version2 = 2
	// Version3 adds lease values and observed keys: Value's eighth field,
	// Data (the holder's value, msgpack bin; the seventh, the voter
	// configuration, is then written as nil when absent); Op's ninth,
	// Observe (a peek that registers its sender for pushes); Notify's
	// sixth, Changes (what a voter holds for keys the addressee
	// observes); and catch-up requests that list the held keys with their
	// values (CatchUpRequest.Holders, Prefix). Each is written only when
	// it says something, and never to a node of an earlier version: such
	// a node would skip (version 2) or refuse (version 1) the field, and
	// one that skipped a value would write the grant back without it.
	// See the mesh's settings.go for what a mesh of mixed versions does.
	// Appended since, and skipped by decoders that do not know it:
	// Response's seventh field, Lives (the voters heard from before a
	// first promise, design.md R55; the sixth, the configuration, is
	// then written as nil when absent).
	Version3 = 3

	MinVersion = Version1
	MaxVersion = Version3
)

// Range is a span of protocol versions, Min to Max inclusive.
type Range struct{ Min, Max int }

// Supported is the range of versions this build speaks.
var Supported = Range{MinVersion, MaxVersion}

// Legacy is the range of a node that says nothing of its version.
var Legacy = Range{Version1, Version1}

// Common returns the highest version both ranges hold, and false when
// they do not overlap.
func (r Range) Common(o Range) (int, bool) {
	lo, hi := max(r.Min, o.Min), min(r.Max, o.Max)
	return hi, lo <= hi
}

func (r Range) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

func (r Range) valid() bool { return 1 <= r.Min && r.Min <= r.Max && r.Max <= math.MaxUint8 }

// Settings are what a node's safety depends on in its peers' settings
// (design.md R93): nodes of version 2 and later send them in the transport
// hello (the payload, both ways) and in gossip metadata, and refuse a peer
// whose settings would break exclusion.
type Settings struct {
	// Versions is the range of protocol versions the node speaks.
	Versions Range
	// Drift is the clock-rate error ρ the node's lease arithmetic assumes
	// (Config.Timing.Drift).
	Drift float64
	// TTL is the node's default lease TTL (Config.Timing.TTL), MaxTTL the
	// longest it asks for or accepts as a voter.
	TTL, MaxTTL time.Duration
}

// check refuses settings no node could have.
func (s Settings) check() error {
	switch {
	case !s.Versions.valid():
		return fmt.Errorf("%w: protocol versions %d to %d", ErrMalformed, s.Versions.Min, s.Versions.Max)
	case math.IsNaN(s.Drift) || s.Drift < 0 || s.Drift >= 1:
		return fmt.Errorf("%w: clock-rate error %v", ErrMalformed, s.Drift)
	case s.TTL < 0 || s.MaxTTL < 0:
		return fmt.Errorf("%w: TTL %v, MaxTTL %v", ErrMalformed, s.TTL, s.MaxTTL)
	}
	return nil
}

const settingsFields = 5

// MaxHelloPayload bounds an encoded Settings: the transport takes at most
// this much from a hello.
const MaxHelloPayload = 256

// EncodeSettings encodes s as the payload of a transport hello.
func EncodeSettings(s Settings) []byte {
	e := encoder{b: make([]byte, 0, 40)}
	e.settings(s)
	return e.b
}

func (e *encoder) settings(s Settings) {
	e.fields(settingsFields)
	e.uint(uint64(s.Versions.Min))
	e.uint(uint64(s.Versions.Max))
	e.float(s.Drift)
	e.duration(s.TTL)
	e.duration(s.MaxTTL)
	e.end()
}

// DecodeSettings decodes and checks the payload of a transport hello.
func DecodeSettings(b []byte) (Settings, error) {
	if len(b) > MaxHelloPayload {
		return Settings{}, fmt.Errorf("%w: hello payload of %d bytes (limit %d)", ErrMalformed, len(b), MaxHelloPayload)
	}
	d := decoder{b: b}
	n := d.fields(settingsFields)
	lo, hi := d.uint(), d.uint()
	s := Settings{Drift: d.float(), TTL: d.duration(), MaxTTL: d.duration()}
	d.rest(n, settingsFields)
	if err := d.done("settings"); err != nil {
		return Settings{}, err
	}
	if lo > math.MaxUint8 || hi > math.MaxUint8 {
		return Settings{}, fmt.Errorf("%w: protocol versions %d to %d", ErrMalformed, lo, hi)
	}
	s.Versions = Range{int(lo), int(hi)}
	if err := s.check(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// Meta is what a node tells the others through gossip metadata
// (memberlist's node meta, at most memberlist.MetaMaxSize bytes).
type Meta struct {
	// RPC is the ballot transport address to dial.
	RPC string `codec:"rpc"`
	// Expect is the node's BootstrapExpect (0: not bootstrapping).
	Expect int `codec:"be,omitempty"`
	// Config is the id of the voter configuration the node uses, once it
	// has one; a node that sees a newer one fetches it from this node.
	Config uint64 `codec:"cid,omitempty"`
	// Inc is the node's incarnation (a new one at every start): the one a
	// voter change records when it adds this node.
	Inc uint64 `codec:"inc,omitempty"`
	// NoVote: the autopilot must not make this node a voter.
	NoVote bool `codec:"nv,omitempty"`
	// Disk: the node keeps its voter state in a data directory; voter
	// changes need one on every voter.
	Disk bool `codec:"dd,omitempty"`

	// From version 2, the node's Settings; a node of version 1 sends none
	// (VMax 0).
	VMin   int           `codec:"vmin,omitempty"`
	VMax   int           `codec:"vmax,omitempty"`
	Drift  float64       `codec:"rho,omitempty"`
	TTL    time.Duration `codec:"ttl,omitempty"`
	MaxTTL time.Duration `codec:"mttl,omitempty"`

	// Holding is the longest TTL among the leases the node holds, when it
	// is longer than the MaxTTL of a voter it knows (a rolling restart that
	// lowers MaxTTL is under way), else 0. A voter that restarts without
	// its state waits out such leases (quorum.Node.SetPeerTTL). Nodes
	// before it skip it (msgpack maps skip keys a struct does not have).
	Holding time.Duration `codec:"hold,omitempty"`
}

// Settings returns the node's settings, and false for a node of version 1,
// which sends none.
func (m Meta) Settings() (Settings, bool) {
	if m.VMax == 0 {
		return Settings{Versions: Legacy}, false
	}
	return Settings{Versions: Range{m.VMin, m.VMax}, Drift: m.Drift, TTL: m.TTL, MaxTTL: m.MaxTTL}, true
}

// SetSettings puts s in m.
func (m *Meta) SetSettings(s Settings) {
	m.VMin, m.VMax, m.Drift, m.TTL, m.MaxTTL = s.Versions.Min, s.Versions.Max, s.Drift, s.TTL, s.MaxTTL
}

// Encode encodes m; the caller checks the size against memberlist's limit.
func (m Meta) Encode() ([]byte, error) {
	var b []byte
	if err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(m); err != nil {
		return nil, err
	}
	return b, nil
}

// DecodeMeta decodes and checks a node's gossip metadata.
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty node metadata", ErrMalformed)
	}
	if len(b) > memberlist.MetaMaxSize {
		return m, fmt.Errorf("%w: node metadata of %d bytes", ErrMalformed, len(b))
	}
	if err := decodeBytes(b, &m); err != nil {
		return Meta{}, fmt.Errorf("node metadata: %w", err)
	}
	if m.VMin != 0 || m.VMax != 0 {
		s := Settings{Versions: Range{m.VMin, m.VMax}, Drift: m.Drift, TTL: m.TTL, MaxTTL: m.MaxTTL}
		if err := s.check(); err != nil {
			return Meta{}, fmt.Errorf("node metadata: %w", err)
		}
	}
	if m.Holding < 0 {
		return Meta{}, fmt.Errorf("%w: node metadata: holding leases of %v", ErrMalformed, m.Holding)
	}
	return m, nil
}
