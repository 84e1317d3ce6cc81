package mesh

import (
	"testing"

	"github.com/lockmesh/lockmesh/quorum"
)

func sampleRequest(ops int) *quorum.Request {
	r := &quorum.Request{Config: 12345678901, From: "node-0001", To: "node-0002"}
	for i := 0; i < ops; i++ {
		b := quorum.Ballot{Counter: uint64(100 + i), Incarnation: 1795948802771196244, Node: "node-0001"}
		r.Ops = append(r.Ops, quorum.Op{ID: uint64(i + 1), Kind: quorum.OpAccept, Key: "invoices/2026-11", Ballot: b, Inc: 1795948802771196000,
			Value: quorum.Value{Held: true, Holder: "node-0001", HolderInc: 1795948802771196244, Epoch: 1795948803802782, TTL: 1e9, Lease: b},
			Next:  quorum.Ballot{Counter: b.Counter + 1, Incarnation: b.Incarnation, Node: b.Node}})
	}
	return r
}

// BenchmarkCodecRequest measures encoding and decoding one ballot request
// of one operation, as every round does per voter.
func BenchmarkCodecRequest(b *testing.B) {
	req := sampleRequest(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		body, err := encode(kindRequest, req)
		if err != nil {
			b.Fatal(err)
		}
		var out quorum.Request
		if err := decode(body, kindRequest, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCodecRenewal1000 measures one renewal batch of 1,000 leases.
func BenchmarkCodecRenewal1000(b *testing.B) {
	req := sampleRequest(1000)
	b.ReportAllocs()
	var size int
	for i := 0; i < b.N; i++ {
		body, err := encode(kindRequest, req)
		if err != nil {
			b.Fatal(err)
		}
		size = len(body)
		var out quorum.Request
		if err := decode(body, kindRequest, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "bytes")
}

// BenchmarkWireRequest is BenchmarkCodecRequest with the hand-written
// encoding the mesh uses on the hot path.
func BenchmarkWireRequest(b *testing.B) {
	req := sampleRequest(1)
	l := (&Config{}).limits()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		body := encodeRequest(req)
		if _, err := l.decodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWireRenewal1000(b *testing.B) {
	req := sampleRequest(1000)
	l := (&Config{}).limits()
	b.ReportAllocs()
	var size int
	for i := 0; i < b.N; i++ {
		body := encodeRequest(req)
		size = len(body)
		if _, err := l.decodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "bytes")
}
