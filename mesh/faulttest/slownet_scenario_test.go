//go:build linux

package faulttest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// The slow network: every packet between two nodes is delayed slowDelay ±
// slowJitter one way, and slowLoss of them are lost.
const (
	slowDelay  = 20 * time.Millisecond
	slowJitter = 5 * time.Millisecond
	slowLoss   = 0.02
	// Phases: the same workload on the plain network, then on the slow one.
	plainPhase = 3 * time.Second
	slowPhase  = 8 * time.Second
)

// Three voters and a node that does not vote, each in its own namespace,
// lock with the network first plain, then slow and lossy (tc netem on
// every node's veth where the kernel has netem, otherwise a proxy that
// relays all traffic between the nodes). The history must stay safe, and
// the clients must still be served; the latencies of both phases are
// reported. The nodes use a 2s TTL and 250ms rounds (a 40ms round trip
// does not fit DefaultLocalConfig's 50ms rounds).
func TestSlowNetwork(t *testing.T) {
	requireFaults(t)
	names := []string{"a", "b", "c", "p"}
	lab := newNetlab(t, names)
	viaProxy := false
	if err := lab.tc("a", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms"); err != nil {
		viaProxy = true
		t.Logf("slow network: tc netem is not available here (%v); every packet between the nodes goes through a proxy that delays and drops instead", err)
	} else {
		if err := lab.tc("a", "qdisc", "del", "dev", "eth0", "root"); err != nil {
			t.Fatal(err)
		}
		t.Logf("slow network: tc netem on every node's veth")
	}
	c := newCluster(t, clusterSpec{voters: names[:3], others: names[3:], lab: lab, viaProxy: viaProxy,
		ttl: 2 * time.Second, roundTimeout: 250 * time.Millisecond})
	shape := func(delay, jitter time.Duration, loss float64) {
		t.Helper()
		if viaProxy {
			res := c.proxy.call(control.Request{Op: control.OpShape, DelayMS: delay.Milliseconds(),
				JitterMS: jitter.Milliseconds(), Loss: loss}, 5*time.Second)
			if !res.ok() {
				t.Fatalf("shaping the proxy: %s %s %v", res.code(), res.r.Msg, res.err)
			}
			return
		}
		for _, name := range names {
			args := []string{"qdisc", "replace", "dev", "eth0", "root", "netem",
				"delay", fmt.Sprintf("%dms", delay.Milliseconds()), fmt.Sprintf("%dms", jitter.Milliseconds()),
				"loss", fmt.Sprintf("%g%%", loss*100)}
			if err := lab.tc(name, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	phase := func(name string, d time.Duration) []timed {
		t.Helper()
		before := len(c.hist.grantsOf(""))
		cl := c.startClients(workload{keys: []string{"k1", "k2", "k3"}, acquireTimeout: 15 * time.Second}, c.nodes...)
		// The phase lasts d: the workload's length, not a wait for an event.
		time.Sleep(d)
		cl.stop()
		granted := len(c.hist.grantsOf("")) - before
		if granted < len(c.nodes) {
			t.Errorf("%s network: only %d grants in %v, for %d clients", name, granted, d, len(c.nodes))
		}
		t.Logf("%s network: %d grants in %v; %s", name, granted, d, latencyReport(cl.timings()))
		return cl.timings()
	}
	phase("plain", plainPhase)
	shape(slowDelay, slowJitter, slowLoss)
	slow := phase(fmt.Sprintf("slow (%v ± %v one way, %g%% loss)", slowDelay, slowJitter, slowLoss*100), slowPhase)
	if viaProxy {
		res := c.proxy.call(control.Request{Op: control.OpStats}, 5*time.Second)
		if !res.ok() || res.r.Stats == nil {
			t.Fatalf("proxy stats: %s %v", res.code(), res.err)
		}
		st := res.r.Stats
		t.Logf("proxy: %d UDP packets forwarded, %d dropped; %d TCP connections, %d chunks, %d held back a retransmission timeout",
			st.UDPForwarded, st.UDPDropped, st.TCPConns, st.TCPChunks, st.TCPStalled)
		// Gossip sends few UDP packets (a handful per second), so at 2%
		// none may be lost; the ballot streams carry thousands of chunks.
		if st.UDPForwarded == 0 || st.TCPChunks == 0 || st.TCPStalled == 0 {
			t.Errorf("the proxy did not carry or shape the traffic: %+v", *st)
		}
	}
	shape(0, 0, 0)
	s := c.finish()
	how := "tc netem"
	if viaProxy {
		how = "userspace proxy"
	}
	t.Logf("figures: slow network (%s): %d ops checked; slow phase %s", how, s.ops, latencyReport(slow))
}

// latencyReport gives percentiles of the reads, tries and acquires that
// succeeded.
func latencyReport(ts []timed) string {
	by := make(map[string][]time.Duration)
	for _, x := range ts {
		if x.code == "" {
			by[x.kind] = append(by[x.kind], x.took())
		}
	}
	var parts []string
	for _, kind := range []string{control.OpHolder, control.OpTry, control.OpAcquire} {
		p := percentiles(by[kind], 50, 90, 99)
		parts = append(parts, fmt.Sprintf("%s n=%d p50 %v p90 %v p99 %v", kind, len(by[kind]),
			p[0].Round(100*time.Microsecond), p[1].Round(100*time.Microsecond), p[2].Round(100*time.Microsecond)))
	}
	return strings.Join(parts, "; ")
}
