package mesh

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// setBudget sets the ballot transport's budget of bytes in flight (zero:
// the default).
func setBudget(cfg *Config, n int) { cfg.MaxBytesInFlight = n }

// floodCluster is a mesh of three voters without TLS (an outsider can then
// open ballot connections in any name): node0 runs in a child process, so
// that its memory can be measured; node1 and node2 and a non-voter run
// here.
func floodCluster(t *testing.T, budget int) (*child, []*Mesh) {
	t.Helper()
	voters := []string{"node0", "node1", "node2"}
	ch := startChild(t, childSpec{Name: "node0", Voters: voters, MaxBytesInFlight: budget})
	var nodes []*Mesh
	for _, name := range []string{"node1", "node2", "node3"} {
		cfg := DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = voters
		cfg.Seeds = []string{ch.gossip}
		cfg.Timing.TTL = 3 * time.Second
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		nodes = append(nodes, m)
	}
	waitFor(t, 30*time.Second, "the child node to vote", func() bool {
		for _, m := range nodes {
			if len(m.Status().Members) < 4 {
				return false
			}
		}
		return true
	})
	return ch, nodes
}

// flood opens conns connections to addr, each naming itself in its hello
// (a name of its own: no per-peer limit applies), announcing a frame of
// size bytes and sending all of it but its last byte. It returns once
// every connection has sent what it will, and closes them at cleanup.
func flood(t *testing.T, addr string, conns, size int) {
	t.Helper()
	body := make([]byte, size-1)
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			var hdr [13]byte
			binary.BigEndian.PutUint32(hdr[:4], uint32(size+9))
			hdr[4] = 2 // request
			binary.BigEndian.PutUint64(hdr[5:], 1)
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			c.Write(hello(fmt.Sprintf("flood-%d", i)))
			c.Write(hdr[:])
			c.Write(body) // blocks (until the deadline) when the node stops reading
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	})
}

// TestAttackFrameFlood: an outsider opens 200 ballot connections to a voter
// of a mesh without TLS, each sending all but the last byte of a 4 MiB
// frame. The memory it pins is bounded by the budget of bytes in flight,
// not by MaxInboundConns × MaxFrameSize; locks keep being granted.
func TestAttackFrameFlood(t *testing.T) {
	requireAttacks(t)
	ch, nodes := floodCluster(t, 0)
	heap0, rss0, _ := ch.memory(t)
	tr := startTraffic(t, nodes, []string{"a", "b"}, 1)
	if took, ok := tr.grantedEverywhere([]string{"node1", "node2", "node3"}, time.Now(), 10*time.Second); !ok {
		t.Fatal("no grant on every node before the flood")
	} else {
		t.Logf("first grants after %v", took)
	}
	tr.resetFails()
	start := time.Now()
	flood(t, ch.rpc, 200, 4*mib-9)
	heap, rss, peak := ch.memory(t)
	during := tr.check(start, time.Now())
	tr.halt()
	t.Logf("frame flood: heap %d → %d MiB, resident %d → %d MiB (peak %d MiB); %v",
		heap0/mib, heap/mib, rss0/mib, rss/mib, peak/mib, during)
	if during.doubles > 0 || during.regressions > 0 {
		t.Errorf("exclusion or tokens broken: %v", during)
	}
	if pinned := heap - heap0; pinned > 96*mib {
		t.Errorf("the flood pinned %d MiB of heap (budget 64 MiB)", pinned/mib)
	}
}
