package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/quorum"
)

// Fuzz targets for every decoder of network input: the ballot messages
// (ballot.go), catch-up messages, configuration pushes and fetch replies
// (go-msgpack, reflect.go), gossip metadata and the hello payload
// (versions.go). The transport's frame and hello decoder has its own,
// FuzzReadFrame.
// Each target checks that no input panics, that a refusal wraps
// ErrMalformed, that what is decoded is within the limits and no larger
// than the input allows, that decoding allocates at most a small multiple
// of the input, and, where the encoding is ours, that re-encoding gives
// the same message back. Seed corpora are in testdata/fuzz/<target>/.
//
//	go test -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 2m ./mesh/internal/wire/
//
// .ci/fuzz runs each for a few seconds.

// fuzzLimits are the limits the targets decode under: the mesh's defaults.
var fuzzLimits = Limits{MaxOps: 16384, MaxKeyLen: 512, MaxKeys: 1 << 16, MaxEntries: 1 << 16}

// Allocation bounds: base bytes plus so many bytes per input byte. The
// hand-written decoders allocate at most a Go struct per encoded element
// (an Op is about 200 bytes in memory for at least MinOpBytes on the wire);
// go-msgpack grows slices in steps and an entry is bigger still.
const (
	allocBase        = 64 << 10
	allocPerByteWire = 32
	allocPerByteGo   = 256
	// Measuring stops the world, which would slow fuzzing tenfold: the
	// first allocEvery inputs of a process are measured (the seed corpus
	// among them), then one in allocSample.
	allocEvery  = 256
	allocSample = 16
)

var allocRuns atomic.Uint64

// boundedAlloc runs decode again and fails if it allocated more than
// allocBase + perByte*len(data) bytes.
func boundedAlloc(t *testing.T, data []byte, perByte int, decode func()) {
	t.Helper()
	if n := allocRuns.Add(1); n > allocEvery && n%allocSample != 0 {
		return
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	decode()
	runtime.ReadMemStats(&after)
	got := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(allocBase + perByte*len(data)); got > limit {
		t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(data), got, limit)
	}
}

// refused checks that a decoding error is one of ours.
func refused(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v does not wrap ErrMalformed", err)
	}
}

func sampleBallot(n uint64, node string) quorum.Ballot {
	return quorum.Ballot{Counter: n, Incarnation: 1<<40 + n, Node: quorum.NodeID(node)}
}

func sampleValue(held bool) quorum.Value {
	if !held {
		return quorum.Value{Epoch: 7}
	}
	return quorum.Value{Held: true, Holder: "node-1", HolderInc: 1 << 40, Epoch: 1_700_000_000_000_000,
		TTL: 10 * time.Second, Lease: sampleBallot(3, "node-1")}
}

// sampleRequests are requests as the proposer sends them.
func sampleRequests() []quorum.Request {
	batch := quorum.Request{Config: 0xfeedface, From: "node-1", To: "node-2"}
	for i := range 40 {
		batch.Ops = append(batch.Ops, quorum.Op{ID: uint64(i + 1), Kind: quorum.OpAccept, Key: fmt.Sprintf("leases/%d", i),
			Ballot: sampleBallot(uint64(i), "node-1"), Inc: 99, Value: sampleValue(true), Next: sampleBallot(uint64(i+1), "node-1")})
	}
	return []quorum.Request{
		{Config: 1, From: "a", To: "b", Ops: []quorum.Op{{ID: 1, Kind: quorum.OpPrepare, Key: "k", Ballot: sampleBallot(1, "a"), Watch: true, IfFree: true}}},
		{Config: 1 << 63, From: quorum.NodeID(strings.Repeat("n", 255)), To: "b", Ops: []quorum.Op{{ID: 1 << 40, Kind: quorum.OpPeek, Key: strings.Repeat("k", 512)}}},
		{Config: 3, From: "a", To: "b", Ops: []quorum.Op{{ID: 2, Kind: quorum.OpAccept, Key: "ключ", Ballot: sampleBallot(300, "a"), Inc: 5, Value: sampleValue(false)}}},
		// Version 3: a value with data, an observing peek.
		{Config: 4, From: "a", To: "b", Ops: []quorum.Op{
			{ID: 3, Kind: quorum.OpAccept, Key: "leader/api", Ballot: sampleBallot(301, "a"), Inc: 5, Value: sampleValueData()},
			{ID: 4, Kind: quorum.OpPeek, Key: "leader/api", Observe: 30 * time.Second},
		}},
		batch,
	}
}

func sampleResponses() []quorum.Response {
	batch := quorum.Response{Config: 0xfeedface, From: "node-2", Inc: 1 << 50}
	for i := range 40 {
		batch.Results = append(batch.Results, quorum.Result{ID: uint64(i + 1), OK: i%2 == 0, Reason: quorum.ReasonPromised,
			Promised: sampleBallot(uint64(i), "node-3"), Accepted: sampleBallot(2, "node-1"), Value: sampleValue(true),
			Remaining: time.Duration(i) * time.Second, MaxEpoch: uint64(i) << 30, Copy: i%3 == 0})
	}
	return []quorum.Response{
		{Config: 1, From: "b", Inc: 1, Status: quorum.StatusWrongConfig},
		{Config: 1, From: "b", Inc: 1, Status: quorum.StatusRecovering, Results: []quorum.Result{{ID: 1, Reason: quorum.ReasonNoVote}}},
		{Config: 2, From: "b", Inc: 1, Results: []quorum.Result{{ID: 2, OK: true, Accepted: sampleBallot(4, "a"), Value: sampleValueData(), Remaining: time.Second}}},
		// A promise with the lives its voter heard from before it first
		// promised (version 3).
		{Config: 3, From: "b", Inc: 1, Results: []quorum.Result{{ID: 3, OK: true, Promised: sampleBallot(5, "a")}},
			Lives: []quorum.Life{{Node: "a", Inc: 1 << 60}, {Node: "node-3", Inc: 7}}},
		batch,
	}
}

func sampleNotifies() []quorum.Notify {
	return []quorum.Notify{
		{Config: 1, From: "b", To: "a", Keys: []string{"k"}, Promised: []uint64{3}},
		{Config: 1 << 62, From: "node-2", To: "node-1", Keys: []string{"a", "b", strings.Repeat("c", 512)}, Promised: []uint64{0, 1, 1 << 63}},
		{Config: 5, From: "b", To: "a"},
		{Config: 6, From: "b", To: "a", Changes: []quorum.Change{
			{Key: "leader/api", Accepted: sampleBallot(9, "a"), Value: sampleValueData(), Remaining: 9 * time.Second},
			{Key: "jobs#0", Accepted: sampleBallot(10, "c"), Value: sampleValue(false)},
			{Key: "jobs#1", Accepted: sampleBallot(11, "c"), Value: sampleValue(true), Copy: true},
		}},
	}
}

// sampleValueData is a held value with data (version 3), bytes of every
// kind.
func sampleValueData() quorum.Value {
	v := sampleValue(true)
	v.Data = "10.0.0.7:8443\x00\xff\xfe"
	return v
}

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range sampleRequests() {
		f.Add(EncodeRequest(&r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := fuzzLimits.DecodeRequest(data)
		boundedAlloc(t, data, allocPerByteWire, func() { fuzzLimits.DecodeRequest(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if n := len(r.Ops); n == 0 || n > fuzzLimits.MaxOps || n > len(data)/MinOpBytes {
			t.Fatalf("%d operations decoded from %d bytes", n, len(data))
		}
		for _, op := range r.Ops {
			if err := fuzzLimits.CheckKey(op.Key); err != nil {
				t.Fatalf("decoded an invalid key: %v", err)
			}
		}
		again, err := fuzzLimits.DecodeRequest(EncodeRequest(r))
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("re-encoding changed the request: %v\n%+v\n%+v", err, r, again)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	for _, r := range sampleResponses() {
		f.Add(EncodeResponse(&r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := fuzzLimits.DecodeResponse(data)
		boundedAlloc(t, data, allocPerByteWire, func() { fuzzLimits.DecodeResponse(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if n := len(r.Results); n > fuzzLimits.MaxOps || n > len(data)/MinResultBytes {
			t.Fatalf("%d results decoded from %d bytes", n, len(data))
		}
		again, err := fuzzLimits.DecodeResponse(EncodeResponse(r))
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("re-encoding changed the response: %v\n%+v\n%+v", err, r, again)
		}
	})
}

func FuzzDecodeNotify(f *testing.F) {
	for _, n := range sampleNotifies() {
		f.Add(EncodeNotify(&n))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := fuzzLimits.DecodeNotify(data)
		boundedAlloc(t, data, allocPerByteWire, func() { fuzzLimits.DecodeNotify(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if len(n.Keys)+len(n.Promised) > len(data) || len(n.Keys) > fuzzLimits.MaxKeys || len(n.Promised) > fuzzLimits.MaxKeys {
			t.Fatalf("%d keys and %d ballots decoded from %d bytes", len(n.Keys), len(n.Promised), len(data))
		}
		for _, k := range n.Keys {
			if err := fuzzLimits.CheckKey(k); err != nil {
				t.Fatalf("decoded an invalid key: %v", err)
			}
		}
		again, err := fuzzLimits.DecodeNotify(EncodeNotify(n))
		if err != nil || !reflect.DeepEqual(n, again) {
			t.Fatalf("re-encoding changed the notification: %v\n%+v\n%+v", err, n, again)
		}
	})
}

func sampleMetas() []Meta {
	v2 := Meta{RPC: "10.0.0.2:7947", Config: 0xfeedfacecafebeef, Inc: 1795910400123456789}
	v2.SetSettings(Settings{Versions: Supported, Drift: 0.01, TTL: 10 * time.Second, MaxTTL: time.Minute})
	holding := v2
	holding.Holding = 30 * time.Second
	return []Meta{
		holding,
		{RPC: "10.0.0.1:7947"},
		{RPC: "[::1]:7947", Expect: 3},
		{RPC: "127.0.0.1:7947", Config: 0xfeedfacecafebeef, Inc: 1795910400123456789},
		{RPC: "h:1", Config: 1, Inc: 1},
		v2,
	}
}

func FuzzDecodeMeta(f *testing.F) {
	for _, m := range sampleMetas() {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMeta(data)
		boundedAlloc(t, data, allocPerByteGo, func() { DecodeMeta(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if len(m.RPC) > len(data) {
			t.Fatalf("decoded an address of %d bytes from %d bytes", len(m.RPC), len(data))
		}
		if s, ok := m.Settings(); ok {
			if err := s.check(); err != nil {
				t.Fatalf("decoded impossible settings: %v", err)
			}
		}
		if m.Holding < 0 {
			t.Fatalf("decoded a node holding leases of %v", m.Holding)
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > memberlist.MetaMaxSize {
			return // a loose input can re-encode over memberlist's limit
		}
		again, err := DecodeMeta(b)
		if err != nil || again != m {
			t.Fatalf("re-encoding changed the metadata: %v\n%+v\n%+v", err, m, again)
		}
	})
}

func sampleSettings() []Settings {
	return []Settings{
		{Versions: Supported, Drift: 0.01, TTL: 10 * time.Second, MaxTTL: 10 * time.Second},
		{Versions: Range{1, 1}, Drift: 0, TTL: time.Second, MaxTTL: time.Hour},
		{Versions: Range{2, 255}, Drift: 0.1, TTL: 1, MaxTTL: 24 * time.Hour},
	}
}

// FuzzDecodeSettings drives the decoder of the transport hello's payload.
func FuzzDecodeSettings(f *testing.F) {
	for _, s := range sampleSettings() {
		f.Add(EncodeSettings(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSettings(data)
		boundedAlloc(t, data, allocPerByteWire, func() { DecodeSettings(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if err := s.check(); err != nil {
			t.Fatalf("decoded impossible settings: %v", err)
		}
		again, err := DecodeSettings(EncodeSettings(s))
		if err != nil || again != s {
			t.Fatalf("re-encoding changed the settings: %v\n%+v\n%+v", err, s, again)
		}
	})
}

func sampleCatchUps(t testing.TB) [][]byte {
	var out [][]byte
	add := func(kind byte, v any) {
		b, err := Encode(kind, v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	add(KindCatchUp, &quorum.CatchUpRequest{Config: 7, From: "node-1", To: "node-2", Bucket: 3, Buckets: 64})
	add(KindCatchUpReply, &quorum.CatchUpResponse{Config: 7, From: "node-2", To: "node-1", Inc: 1 << 40, Status: quorum.StatusRecovering, Bucket: 3})
	reply := &quorum.CatchUpResponse{Config: 7, From: "node-2", To: "node-1", Inc: 1 << 40, Bucket: 9}
	for i := range 20 {
		reply.Entries = append(reply.Entries, quorum.Entry{Key: fmt.Sprintf("k%d", i), Promise: sampleBallot(uint64(i), "node-1"),
			Accepted: sampleBallot(1, "node-3"), Value: sampleValue(i%3 == 0), MaxEpoch: uint64(i) << 20})
	}
	add(KindCatchUpReply, reply)
	return out
}

// FuzzDecodeCatchUp drives both catch-up decoders (the kind byte picks
// which accepts the input).
func FuzzDecodeCatchUp(f *testing.F) {
	for _, b := range sampleCatchUps(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req quorum.CatchUpRequest
		err := Decode(data, KindCatchUp, &req)
		boundedAlloc(t, data, allocPerByteGo, func() {
			var req quorum.CatchUpRequest
			Decode(data, KindCatchUp, &req)
		})
		if err != nil {
			refused(t, err)
		}
		resp, err := fuzzLimits.DecodeCatchUpReply(data)
		boundedAlloc(t, data, allocPerByteGo, func() { fuzzLimits.DecodeCatchUpReply(data) })
		if err != nil {
			refused(t, err)
			return
		}
		if n := len(resp.Entries); n > fuzzLimits.MaxEntries || n > len(data)/MinEntryBytes {
			t.Fatalf("%d entries decoded from %d bytes", n, len(data))
		}
		for _, e := range resp.Entries {
			if err := fuzzLimits.CheckKey(e.Key); err != nil {
				t.Fatalf("decoded an invalid key: %v", err)
			}
		}
	})
}

func sampleMemberships() []quorum.Membership {
	first := quorum.NewMembership(quorum.ClusterID([]quorum.NodeID{"a", "b", "c"}), "a", "b", "c")
	next := first.Next([]quorum.NodeID{"a", "b", "c", "d"}, true, 1<<40)
	return []quorum.Membership{first, next}
}

// FuzzDecodeConfigPush drives the decoder of configuration pushes.
func FuzzDecodeConfigPush(f *testing.F) {
	for _, m := range sampleMemberships() {
		b, err := Encode(KindPush, &quorum.ConfigPush{From: "a", To: "d", Members: m})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		push, err := DecodeConfigPush(data)
		boundedAlloc(t, data, allocPerByteGo, func() { DecodeConfigPush(data) })
		if err != nil {
			refused(t, err)
			return
		}
		checkDecodedMembership(t, data, &push.Members)
		b, err := Encode(KindPush, push)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeConfigPush(b)
		if err != nil {
			t.Fatalf("re-encoding gave a push that is refused: %v\n%+v", err, push)
		}
		if b2, _ := Encode(KindPush, again); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the push:\n%+v\n%+v", push, again)
		}
	})
}

// FuzzDecodeConfigReply drives the decoder of answers to a configuration
// fetch.
func FuzzDecodeConfigReply(f *testing.F) {
	for _, m := range sampleMemberships() {
		b, err := Encode(KindConfigReply, &m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := DecodeConfigReply(data)
		boundedAlloc(t, data, allocPerByteGo, func() { DecodeConfigReply(data) })
		if err != nil {
			refused(t, err)
			return
		}
		checkDecodedMembership(t, data, &vs)
		b, err := Encode(KindConfigReply, &vs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeConfigReply(b)
		if err != nil {
			t.Fatalf("re-encoding gave a configuration that is refused: %v\n%+v", err, vs)
		}
		if b2, _ := Encode(KindConfigReply, &again); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the configuration:\n%+v\n%+v", vs, again)
		}
	})
}

// checkDecodedMembership checks a configuration a decoder accepted: valid,
// within the limits, no larger than the input.
func checkDecodedMembership(t *testing.T, data []byte, m *quorum.Membership) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatalf("decoded an invalid configuration: %v", err)
	}
	if len(m.Voters) > MaxVoters || len(m.Prev) > MaxVoters || len(m.Joined) > MaxVoters || len(m.Retired) > MaxRetired {
		t.Fatalf("decoded a configuration over the limits: %+v", m)
	}
	if n := len(m.Voters) + len(m.Prev) + len(m.Joined) + len(m.Retired); n > len(data) {
		t.Fatalf("%d names decoded from %d bytes", n, len(data))
	}
}
