package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/transport"
)

// The floor is what the network alone costs on this machine, measured with
// lockmesh's own TCP transport (persistent, multiplexed connections on
// loopback, length-prefixed frames): a lock service that needs a majority
// cannot answer faster than one quorum round, and lockmesh's Acquire+Release
// takes at least two (acquire on the fast path, then release).

// floorBody is the size of a small ballot message.
var floorBody = bytes.Repeat([]byte{'x'}, 64)

// echo answers every request with its body.
type echo struct{}

func (echo) HandleRequest(from string, body []byte) ([]byte, error) { return body, nil }
func (echo) HandleMessage(from string, body []byte)                 {}

func newEcho(name string) (*transport.TCP, error) {
	cfg := transport.DefaultLocalTCPConfig()
	cfg.Name = name
	cfg.Handler = echo{}
	return transport.NewTCP(cfg)
}

// floor measures one round trip to one peer and one quorum round (send to
// 3 peers, wait for 2) with the same workloads as the lock rows.
func floor(ctx context.Context, o options) []workload.Row {
	client, err := newEcho("caller")
	if err != nil {
		return []workload.Row{errorRow("floor", "floor", err)}
	}
	defer client.Close()
	var peers []string
	for i := range 3 {
		p, err := newEcho(fmt.Sprintf("peer%d", i))
		if err != nil {
			return []workload.Row{errorRow("floor", "floor", err)}
		}
		defer p.Close()
		peers = append(peers, p.Addr())
	}

	call := func(ctx context.Context) error {
		_, err := client.Call(ctx, "", peers[0], floorBody)
		return err
	}
	round := func(ctx context.Context) error { return quorumRound(ctx, client, peers, 2) }

	rtt := measureOps(ctx, o, "floor-rtt",
		"floor: TCP round trip, 64 B, to 1 peer in the same process (lockmesh transport, persistent loopback connection)",
		call)
	qr := measureOps(ctx, o, "floor-quorum",
		"floor: quorum round, 64 B to 3 peers in the same process, wait for 2 (persistent loopback connections)",
		round)
	return []workload.Row{rtt, qr}
}

// floorWide measures the quorum round a 5-voter and a 7-voter mesh's
// proposer needs when it is itself a voter: its own vote, and 2 answers of
// its 4 peers, or 3 of its 6. The lockmesh5 and lockmesh7 rows still take
// their ratios to the 3-peer floor; these rows say how much of the gap is
// the messages a wider round sends.
func floorWide(ctx context.Context, o options) []workload.Row {
	client, err := newEcho("caller")
	if err != nil {
		return []workload.Row{errorRow("floor-wide", "floor-wide", err)}
	}
	defer client.Close()
	var peers []string
	for i := range 6 {
		p, err := newEcho(fmt.Sprintf("peer%d", i))
		if err != nil {
			return []workload.Row{errorRow("floor-wide", "floor-wide", err)}
		}
		defer p.Close()
		peers = append(peers, p.Addr())
	}
	var rows []workload.Row
	for _, w := range []struct{ peers, need int }{{4, 2}, {6, 3}} {
		round := func(ctx context.Context) error { return quorumRound(ctx, client, peers[:w.peers], w.need) }
		rows = append(rows, measureOps(ctx, o, fmt.Sprintf("floor-quorum%d", w.peers+1),
			fmt.Sprintf("floor: quorum round of a %d-voter proposer, 64 B to %d peers in the same process, wait for %d (persistent loopback connections)",
				w.peers+1, w.peers, w.need),
			round))
	}
	return rows
}

// quorumRound calls every peer at once and returns when need of them
// answered, as a proposer's phase does. The calls still in flight finish in
// the background.
func quorumRound(ctx context.Context, t transport.Transport, peers []string, need int) error {
	replies := make(chan error, len(peers)) // stragglers must not block
	for _, p := range peers {
		go func() {
			_, err := t.Call(ctx, "", p, floorBody)
			replies <- err
		}()
	}
	var firstErr error
	for range peers {
		if err := <-replies; err != nil {
			firstErr = err
			continue
		}
		if need--; need == 0 {
			return nil
		}
	}
	return fmt.Errorf("quorum round: too few replies: %w", firstErr)
}

// measureOps runs the latency and throughput workloads on an operation that
// every goroutine may share (no hand-over: there is no lock).
func measureOps(ctx context.Context, o options, name, setup string, op workload.Op) workload.Row {
	row := workload.Row{Case: name, Setup: setup}
	lat, err := workload.Latency(ctx, o.n, o.warmup(), o.latencyBudget, op)
	row.Latency = lat
	if err != nil {
		row.Error = fmt.Sprintf("latency: %v", err)
		return row
	}
	tp, err := workload.Throughput(ctx, o.workers, o.duration,
		func(int) (workload.Op, error) { return op, nil },
		[]workload.CPUSource{workload.Self("bench (caller and peers)")})
	row.Throughput = tp
	if err != nil {
		row.Error = fmt.Sprintf("throughput: %v", err)
	}
	return row
}
