package transport

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// Benchmarks run over loopback TCP inside one process, so each figure
// includes both ends' work:
//
//	go test -run XXX -bench TCP -benchmem -count=5 ./transport/

func benchPair(b *testing.B, adjust func(*TCPConfig)) (client *TCP, addr string) {
	server := newTCP(b, "server", echo, adjust)
	client = newTCP(b, "client", echo, adjust)
	mustCall(b, client, server.Addr(), []byte("warm up"))
	return client, server.Addr()
}

// BenchmarkTCPCall is one caller making sequential 64-byte calls: the
// latency of a round trip.
func BenchmarkTCPCall(b *testing.B) {
	client, addr := benchPair(b, nil)
	body := bytes.Repeat([]byte{'x'}, 64)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Call(ctx, "", addr, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPCallParallel is many callers sharing the pooled
// connection(s): the throughput of multiplexing.
func BenchmarkTCPCallParallel(b *testing.B) {
	for _, conns := range []int{1, 2} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			client, addr := benchPair(b, func(c *TCPConfig) { c.ConnsPerPeer = conns })
			body := bytes.Repeat([]byte{'x'}, 64)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := client.Call(ctx, "", addr, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkTCPQuorumRound sends one 64-byte call to each of 3 peers at
// once and waits for the first 2 replies, as a proposer's phase does. The
// third call finishes in the background.
func BenchmarkTCPQuorumRound(b *testing.B) {
	client := newTCP(b, "proposer", echo, nil)
	var peers []string
	for i := range 3 {
		peers = append(peers, newTCP(b, fmt.Sprintf("acceptor%d", i), echo, nil).Addr())
	}
	body := bytes.Repeat([]byte{'x'}, 64)
	ctx := context.Background()
	for _, p := range peers {
		mustCall(b, client, p, body)
	}
	b.ReportAllocs()
	for b.Loop() {
		replies := make(chan error, len(peers)) // the straggler must not block
		for _, p := range peers {
			go func() {
				_, err := client.Call(ctx, "", p, body)
				replies <- err
			}()
		}
		for range 2 {
			if err := <-replies; err != nil {
				b.Fatal(err)
			}
		}
	}
}
