package mesh

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/transport"
)

// scribbler is the ballot TCP transport of a mesh, which overwrites every
// request body with bytes no decoder takes (0xc1, never used in msgpack)
// as soon as Go or Call returns: what a caller that reuses its buffers is
// allowed to do (transport.Async). A transport that read a body after
// returning (a frame queued uncopied, a dial in progress, a retry) would
// put garbage on the wire, which the receiving side of every scribbler
// counts (a voter refuses such a message and the mesh carries on without
// it: a lost lease is too blunt a sign).
type scribbler struct {
	transport.Transport
	calls atomic.Int64
}

// garbage counts the bodies received with a run of scribbled bytes.
var garbage atomic.Int64

// seeing wraps a Handler to count the scribbled bodies it is given.
type seeing struct{ transport.Handler }

func (s seeing) HandleRequest(from string, body []byte) ([]byte, error) {
	if scribbled(body) {
		garbage.Add(1)
	}
	return s.Handler.HandleRequest(from, body)
}

func (s seeing) HandleMessage(from string, body []byte) {
	if scribbled(body) {
		garbage.Add(1)
	}
	s.Handler.HandleMessage(from, body)
}

// scribbled reports a run of 16 bytes 0xc1, which no encoding writes.
func scribbled(body []byte) bool {
	run := 0
	for _, b := range body {
		if b != 0xc1 {
			run = 0
		} else if run++; run == 16 {
			return true
		}
	}
	return false
}

func (s *scribbler) Go(node, addr string, body []byte, timeout time.Duration, done func([]byte, error)) error {
	err := transport.Go(s.Transport, node, addr, body, timeout, done)
	s.scribble(body)
	return err
}

func (s *scribbler) Call(ctx context.Context, node, addr string, body []byte) ([]byte, error) {
	reply, err := s.Transport.Call(ctx, node, addr, body)
	s.scribble(body)
	return reply, err
}

func (s *scribbler) scribble(body []byte) {
	s.calls.Add(1)
	for i := range body {
		body[i] = 0xc1
	}
}

// The mesh reuses a renewal batch's request buffer once Transport.Go
// returns (sendParts). Over TCP, plain and with TLS, with every body
// overwritten the moment Go returns, and renewals split into dozens of
// messages per voter (so that several pooled buffers are in use at once,
// from the first dial on), no overwritten body reaches a voter and a
// holder of many leases keeps every one of them.
func TestRequestBodiesAreNotReadAfterGoReturns(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		var scribblers []*scribbler
		c := newCluster(t, clusterOpts{voters: 3, tcp: true, tweak: scribbleIn(&scribblers)})
		c.waitVoting()
		holdScribbled(t, c, scribblers)
	})
	t.Run("TLS", func(t *testing.T) {
		var scribblers []*scribbler
		s := newSecureCluster(t, 3, scribbleIn(&scribblers))
		holdScribbled(t, s.cluster, scribblers)
	})
}

// scribbleIn makes a mesh's ballot transport the TCP transport
// startTransport builds (TLS included), wrapped in a scribbler.
func scribbleIn(all *[]*scribbler) func(*Config) {
	return func(cfg *Config) {
		cfg.MaxOpsPerMessage = 3
		cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
			m := h.(handler).m
			tc := transport.DefaultLocalTCPConfig()
			tc.Name, tc.Handler = name, seeing{h}
			tc.BindAddr = m.cfg.rpcBind(m.cfg.BindPort)
			tc.AdvertiseAddr = m.cfg.RPCAdvertise
			if err := m.secureTransport(&tc); err != nil {
				return nil, err
			}
			m.settingsTransport(&tc)
			tr, err := transport.NewTCP(tc)
			if err != nil {
				return nil, err
			}
			s := &scribbler{Transport: tr}
			*all = append(*all, s)
			return s, nil
		}
	}
}

// holdScribbled takes 150 leases on two nodes of c, waits for three
// renewals, and checks that none was lost and no scribbled body arrived.
func holdScribbled(t *testing.T, c *cluster, scribblers []*scribbler) {
	garbage.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var leases []*Lease
	for i := range 150 {
		l, err := c.nodes[i%2].Acquire(ctx, fmt.Sprintf("scribbled/%d", i))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		leases = append(leases, l)
	}
	// Renewals come every third of a TTL, in passes of 25 messages per
	// voter from each holder: wait for three of the last lease taken (the
	// others are renewed with it).
	last := leases[len(leases)-1]
	for range 3 {
		select {
		case <-last.Renewed():
		case <-last.Done():
			t.Fatalf("lease lost: %v", last.Err())
		case <-ctx.Done():
			t.Fatal("no renewal")
		}
	}
	for i, l := range leases {
		select {
		case <-l.Done():
			t.Fatalf("lease %d lost: %v", i, l.Err())
		default:
		}
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	var calls int64
	for _, s := range scribblers {
		calls += s.calls.Load()
	}
	if calls < 500 {
		t.Fatalf("only %d bodies sent: the test did not exercise the transport", calls)
	}
	if n := garbage.Load(); n > 0 {
		t.Fatalf("%d of %d bodies arrived overwritten: read after Go returned", n, calls)
	}
	t.Logf("%d bodies overwritten after Go returned, none arrived so", calls)
}
