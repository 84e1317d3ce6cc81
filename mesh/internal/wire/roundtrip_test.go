package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// filler sets every field of a value to something other than its zero, by
// reflection, so that a field an encoder forgets (one added to a message
// and not to its codec) fails a round trip instead of travelling as the
// zero it already was. Fields tagged codec:"-" do not travel and stay zero.
// The few fields the decoders constrain get valid values, still non-zero.
type filler struct{ n uint64 }

var (
	opKindType     = reflect.TypeFor[quorum.OpKind]()
	rangeType      = reflect.TypeFor[Range]()
	membershipType = reflect.TypeFor[quorum.Membership]()
)

func (f *filler) fill(v reflect.Value) {
	f.n++
	switch {
	case v.Type() == opKindType:
		v.SetUint(uint64(quorum.OpUnwatch))
		return
	case v.Type() == rangeType:
		v.Set(reflect.ValueOf(Supported))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(f.n % (1 << (v.Type().Bits() - 1)))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n % (1 << (v.Type().Bits() - 2))))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n%90+1) / 1000) // a valid clock-rate error
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", f.n))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() && sf.Tag.Get("codec") != "-" {
				f.fill(v.Field(i))
			}
		}
		if v.Type() == membershipType {
			validMembership(v.Addr().Interface().(*quorum.Membership))
		}
	default:
		panic("filler: no rule for " + v.Type().String())
	}
}

// validMembership makes a filled configuration one that validates: a
// pending change from one of its voters, joined by its voters.
func validMembership(m *quorum.Membership) {
	m.Prev = m.Voters[:1:1]
	for i := range m.Joined {
		m.Joined[i].ID = m.Voters[i%len(m.Voters)]
	}
}

// zeroFields lists the fields of v left at their zero, by path.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() && sf.Tag.Get("codec") != "-" {
				out = append(out, zeroFields(v.Field(i), path+"."+sf.Name)...)
			}
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		var out []string
		for i := range v.Len() {
			out = append(out, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// filled returns a T with every field set.
func filled[T any](t *testing.T) *T {
	t.Helper()
	v := new(T)
	(&filler{}).fill(reflect.ValueOf(v).Elem())
	if zero := zeroFields(reflect.ValueOf(v).Elem(), reflect.TypeFor[T]().Name()); len(zero) > 0 {
		t.Fatalf("the filler left fields zero: %s", strings.Join(zero, ", "))
	}
	return v
}

var testLimits = Limits{MaxOps: 16384, MaxKeyLen: 512, MaxKeys: 1 << 16, MaxEntries: 1 << 16}

// roundTrips are every message read from the network, each with its
// encoder and decoder.
var roundTrips = []struct {
	name string
	run  func(t *testing.T) (sent, got any, err error)
}{
	{"Request", func(t *testing.T) (any, any, error) {
		r := filled[quorum.Request](t)
		got, err := testLimits.DecodeRequest(EncodeRequest(r))
		return r, got, err
	}},
	{"Response", func(t *testing.T) (any, any, error) {
		r := filled[quorum.Response](t)
		got, err := testLimits.DecodeResponse(EncodeResponse(r))
		return r, got, err
	}},
	{"Notify", func(t *testing.T) (any, any, error) {
		n := filled[quorum.Notify](t)
		got, err := testLimits.DecodeNotify(EncodeNotify(n))
		return n, got, err
	}},
	{"CatchUpRequest", func(t *testing.T) (any, any, error) {
		r := filled[quorum.CatchUpRequest](t)
		b, err := Encode(KindCatchUp, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCatchUp(b)
		return r, got, err
	}},
	{"CatchUpResponse", func(t *testing.T) (any, any, error) {
		r := filled[quorum.CatchUpResponse](t)
		b, err := Encode(KindCatchUpReply, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testLimits.DecodeCatchUpReply(b)
		return r, got, err
	}},
	{"ConfigPush", func(t *testing.T) (any, any, error) {
		p := filled[quorum.ConfigPush](t)
		b, err := Encode(KindPush, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeConfigPush(b)
		return p, got, err
	}},
	{"Membership", func(t *testing.T) (any, any, error) {
		m := filled[quorum.Membership](t)
		b, err := Encode(KindConfigReply, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeConfigReply(b)
		return m, &got, err
	}},
	{"Meta", func(t *testing.T) (any, any, error) {
		m := filled[Meta](t)
		m.VMin, m.VMax = Supported.Min, Supported.Max
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMeta(b)
		return m, &got, err
	}},
	{"Settings", func(t *testing.T) (any, any, error) {
		s := filled[Settings](t)
		got, err := DecodeSettings(EncodeSettings(*s))
		return s, &got, err
	}},
}

// Every field of every message survives its codec (STYLE 15): a field
// added to a message and forgotten in its encoder or decoder fails here.
func TestRoundTripEveryField(t *testing.T) {
	for _, rt := range roundTrips {
		t.Run(rt.name, func(t *testing.T) {
			sent, got, err := rt.run(t)
			if err != nil {
				t.Fatalf("decoding what was encoded: %v", err)
			}
			if !reflect.DeepEqual(sent, got) {
				t.Fatalf("the round trip changed the message:\nsent %+v\ngot  %+v", sent, got)
			}
		})
	}
}

// The hand-written decoders take what a later version might send: every
// struct with more fields, of every msgpack type, after its own, and the
// optional ones written as nil. They read the fields they know and skip
// the rest.
func TestSkipsFieldsOfLaterVersions(t *testing.T) {
	for later := 1; later <= len(laterFields)+1; later++ {
		e := encoder{later: later}
		req := filled[quorum.Request](t)
		e.request(req)
		got, err := testLimits.DecodeRequest(e.b)
		if err != nil || !reflect.DeepEqual(req, got) {
			t.Fatalf("%d fields more: request %v\nsent %+v\ngot  %+v", later, err, req, got)
		}

		e = encoder{later: later}
		resp := filled[quorum.Response](t)
		resp.Members = nil // written as nil before the later fields
		resp.Results[0].Value.Config = nil
		e.response(resp)
		gotResp, err := testLimits.DecodeResponse(e.b)
		if err != nil || !reflect.DeepEqual(resp, gotResp) {
			t.Fatalf("%d fields more: response %v\nsent %+v\ngot  %+v", later, err, resp, gotResp)
		}

		e = encoder{later: later}
		n := filled[quorum.Notify](t)
		e.notify(n)
		gotN, err := testLimits.DecodeNotify(e.b)
		if err != nil || !reflect.DeepEqual(n, gotN) {
			t.Fatalf("%d fields more: notification %v\nsent %+v\ngot  %+v", later, err, n, gotN)
		}

		e = encoder{later: later}
		s := *filled[Settings](t)
		e.settings(s)
		gotS, err := DecodeSettings(e.b)
		if err != nil || gotS != s {
			t.Fatalf("%d fields more: settings %v\nsent %+v\ngot  %+v", later, err, s, gotS)
		}
	}
}

// Fields fewer than every version sent are refused, and so is a skipped
// field that nests too deep or runs past the end.
func TestRefusesShortStructsAndBadSkips(t *testing.T) {
	short := []byte{KindNotify, 0x94, 0x01, 0xa1, 'b', 0xa1, 'a', 0x90} // four fields of five
	if _, err := testLimits.DecodeNotify(short); err == nil || !strings.Contains(err.Error(), "at least 5") {
		t.Errorf("a notification of four fields: %v", err)
	}
	base := []byte{0x01, 0xa1, 'b', 0xa1, 'a', 0x90, 0x90, 0x90} // six fields: no keys, ballots or changes
	deep := append([]byte{KindNotify, 0x97}, base...)
	for range maxSkipDepth + 2 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	if _, err := testLimits.DecodeNotify(deep); !errors.Is(err, ErrTooDeep) {
		t.Errorf("a later field nested %d deep: %v", maxSkipDepth+2, err)
	}
	for _, tail := range [][]byte{{0xdb, 0xff, 0xff, 0xff, 0xff}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0xc9, 0, 0, 0, 9, 1}, {0xc1}, {0xcf, 1}} {
		b := append(append([]byte{KindNotify, 0x97}, base...), tail...)
		if _, err := testLimits.DecodeNotify(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("a later field % x: %v", tail, err)
		}
	}
}

// The smallest encodings, which bound how many elements a message of a
// given size can announce, are what the encoders produce for zero values.
func TestSmallestEncodings(t *testing.T) {
	none := len(EncodeRequest(&quorum.Request{}))
	one := len(EncodeRequest(&quorum.Request{Ops: make([]quorum.Op, 1)}))
	if one-none != MinOpBytes {
		t.Errorf("a zero operation takes %d bytes, MinOpBytes is %d", one-none, MinOpBytes)
	}
	none = len(EncodeResponse(&quorum.Response{}))
	one = len(EncodeResponse(&quorum.Response{Results: make([]quorum.Result, 1)}))
	if one-none != MinResultBytes {
		t.Errorf("a zero result takes %d bytes, MinResultBytes is %d", one-none, MinResultBytes)
	}
	none = len(EncodeNotify(&quorum.Notify{Changes: []quorum.Change{{Key: "x"}}}))
	two := len(EncodeNotify(&quorum.Notify{Changes: []quorum.Change{{Key: "x"}, {}}}))
	if two-none < minChangeBytes {
		t.Errorf("a zero change takes %d bytes, minChangeBytes is %d", two-none, minChangeBytes)
	}
	e1, _ := Encode(KindCatchUpReply, &quorum.CatchUpResponse{})
	e2, _ := Encode(KindCatchUpReply, &quorum.CatchUpResponse{Entries: []quorum.Entry{{Key: "x"}}})
	if d := len(e2) - len(e1); d < MinEntryBytes {
		t.Errorf("an entry with a one-byte key takes %d bytes, MinEntryBytes is %d", d, MinEntryBytes)
	}
}

func TestCommonVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b Range
		want int
		ok   bool
	}{
		{Supported, Legacy, Version1, true},
		{Supported, Supported, MaxVersion, true},
		{Range{1, 2}, Range{2, 5}, 2, true},
		{Range{2, 3}, Legacy, 0, false},
		{Range{1, 1}, Range{2, 2}, 0, false},
	} {
		got, ok := tc.a.Common(tc.b)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%v and %v: %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
		if got2, ok2 := tc.b.Common(tc.a); got2 != got || ok2 != ok {
			t.Errorf("%v and %v is not symmetric", tc.a, tc.b)
		}
	}
}

// A catch-up request that names more quiet lives than a disk keeps is
// refused, with a clear error; one that names as many is read whole.
func TestCatchUpRequestQuietLivesBounded(t *testing.T) {
	for _, n := range []int{quorum.MaxQuietLives, quorum.MaxQuietLives + 1} {
		req := &quorum.CatchUpRequest{Config: 1, From: "a", To: "b", Inc: 9, Quiet: make([]uint64, n)}
		for i := range req.Quiet {
			req.Quiet[i] = uint64(i + 1)
		}
		b, err := Encode(KindCatchUp, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCatchUp(b)
		switch {
		case n <= quorum.MaxQuietLives && (err != nil || len(got.Quiet) != n):
			t.Errorf("%d quiet lives: %v, %v", n, got, err)
		case n > quorum.MaxQuietLives && !errors.Is(err, ErrMalformed):
			t.Errorf("%d quiet lives: got %v, want an ErrMalformed error", n, err)
		}
	}
}

// olderEntry is a catch-up entry as builds before Entry.Copy encode and
// decode it: the same keys, without "cp".
type olderEntry struct {
	Key       string        `codec:"k"`
	Promise   quorum.Ballot `codec:"p,omitempty"`
	Accepted  quorum.Ballot `codec:"a,omitempty"`
	Value     quorum.Value  `codec:"v,omitempty"`
	MaxEpoch  uint64        `codec:"me,omitempty"`
	Remaining time.Duration `codec:"rem,omitempty"`
}

type olderCatchUpReply struct {
	From    quorum.NodeID `codec:"f"`
	Entries []olderEntry  `codec:"e"`
}

// A listing's copy flag (Entry.Copy) is optional both ways: an older
// node reads an answer that carries it, skipping the key, and an older
// voter's answer, which never carries it, reads as no copy. An entry that
// is not a copy is encoded as before, byte for byte.
func TestEntryCopyIsOptional(t *testing.T) {
	v := quorum.Value{Held: true, Holder: "p", HolderInc: 3, Epoch: 7, TTL: time.Second, Data: "x"}
	b := quorum.Ballot{Counter: 4, Incarnation: 3, Node: "p"}
	newer := &quorum.CatchUpResponse{From: "a", List: true, Entries: []quorum.Entry{
		{Key: "k1", Accepted: b, Value: v, Remaining: time.Second, Copy: true},
		{Key: "k2", Accepted: b, Value: v, Remaining: time.Second},
	}}
	body, err := Encode(KindCatchUpReply, newer)
	if err != nil {
		t.Fatal(err)
	}
	var old olderCatchUpReply
	if err := Decode(body, KindCatchUpReply, &old); err != nil {
		t.Fatalf("an older node cannot read an answer with a copy: %v", err)
	}
	for i, e := range old.Entries {
		n := newer.Entries[i]
		if e.Key != n.Key || e.Accepted != n.Accepted || e.Value != n.Value || e.Remaining != n.Remaining {
			t.Errorf("an older node read entry %d as %+v, sent %+v", i, e, n)
		}
	}

	oldBody, err := Encode(KindCatchUpReply, &olderCatchUpReply{From: "a", Entries: []olderEntry{
		{Key: "k2", Accepted: b, Value: v, Remaining: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := testLimits.DecodeCatchUpReply(oldBody)
	if err != nil || len(got.Entries) != 1 || got.Entries[0] != newer.Entries[1] {
		t.Fatalf("an older voter's answer read as %+v, %v; want %+v", got, err, newer.Entries[1])
	}
	plain, err := Encode(KindCatchUpReply, newer.Entries[1:])
	if err != nil {
		t.Fatal(err)
	}
	before, err := Encode(KindCatchUpReply, []olderEntry{{Key: "k2", Accepted: b, Value: v, Remaining: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, before) {
		t.Errorf("an entry that is no copy encodes as %x, before as %x", plain, before)
	}
}
