package mesh

import (
	"bufio"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// startDuplicate starts a second process with of's name and configuration
// (a copied configuration: the same name, voters, certificate, gossip key),
// on ports of its own, joining through seed.
func startDuplicate(t *testing.T, of *Mesh, seed *Mesh) *Mesh {
	t.Helper()
	cfg := of.cfg
	cfg.BindPort, cfg.AdvertisePort, cfg.RPCAddr = 0, 0, ""
	cfg.Seeds = []string{seed.Addr()}
	cfg.Seed = 99
	dup, err := New(&cfg)
	if err != nil {
		t.Fatalf("starting the duplicate: %v", err)
	}
	t.Cleanup(func() { dup.Shutdown() })
	return dup
}

// conflictShown reports whether m's Status lists name among its conflicts.
func conflictShown(m *Mesh, name string) bool {
	for _, c := range m.Status().Security.NameConflicts {
		if c.Name == name {
			return true
		}
	}
	return false
}

// TestAttackDuplicateName: a second process started with a voter's name
// (an operator's mistake: a copied configuration, or a pod started on
// another host while the old one runs), with lock traffic on every node,
// the duplicate included. Both processes log it and show it in Status; the
// later one does not vote; nothing is granted twice and tokens only rise;
// once it stops, the mesh is as before.
func TestAttackDuplicateName(t *testing.T) {
	requireAttacks(t)
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			log := &testLog{}
			var ca *testCA
			if withTLS {
				ca = newTestCA(t, "mesh-ca")
			}
			c := newCluster(t, clusterOpts{voters: 3, proposers: 1, tcp: true, tweak: func(cfg *Config) {
				cfg.Timing.TTL = 3 * time.Second
				cfg.Logger = log.logger(cfg.Name)
				if ca != nil {
					ca.useFiles(cfg)
				}
			}})
			c.waitVoting()
			tr := startTraffic(t, c.nodes, []string{"a", "b", "c"}, 2)
			names := []string{"node0", "node1", "node2", "node3"}
			if _, ok := tr.grantedEverywhere(names, time.Now(), 10*time.Second); !ok {
				t.Fatal("no grant on every node before the duplicate")
			}
			start := time.Now()
			orig := c.nodes[1]
			dup := startDuplicate(t, orig, c.nodes[0])
			dupTraffic := startTraffic(t, []*Mesh{dup}, []string{"a", "b", "c"}, 2)

			seen := poll(15*time.Second, func() bool {
				return conflictShown(dup, "node1") && conflictShown(orig, "node1") && dup.Status().Security.NotVoting
			})
			took := time.Since(start)
			// Let both run side by side for a while under traffic.
			pause(3 * time.Second)
			dupTraffic.halt()
			origVoting := !orig.Status().Security.NotVoting
			dup.Shutdown()
			left := time.Now()
			tr.mu.Lock()
			tr.grants = append(tr.grants, dupTraffic.grants...)
			tr.mu.Unlock()
			during := tr.check(start, left)
			tr.resetFails()
			rec, ok := tr.grantedEverywhere(names, left, 10*time.Second)
			tr.halt()
			after := tr.check(left, time.Now())
			dupGrants := len(dupTraffic.grants)
			t.Logf("duplicate of node1 (%s): during %v (%d by the duplicate); after %v; every node granted %v after it stopped (ok=%v); conflict shown on both and the duplicate not voting after %v (%v)",
				name, during, dupGrants, after, rec.Round(time.Millisecond), ok, took.Round(time.Millisecond), seen)
			if during.doubles+after.doubles > 0 || during.regressions+after.regressions > 0 {
				t.Errorf("exclusion or tokens broken: during %v, after %v", during, after)
			}
			if !seen {
				t.Errorf("within 15 s: conflict in the duplicate's Status %v, in node1's %v; duplicate not voting %v",
					conflictShown(dup, "node1"), conflictShown(orig, "node1"), dup.Status().Security.NotVoting)
			}
			if !origVoting {
				t.Error("the earlier process stopped voting")
			}
			if !ok {
				t.Error("not every node granted within 10 s of the duplicate stopping")
			}
			for _, n := range []string{"node=node1"} {
				if _, found := log.line(n, "TWO PROCESSES USE ONE NODE NAME"); !found {
					t.Errorf("no log line on %s about the duplicate", n)
				}
			}
		})
	}
}

// TestAttackStolenCertificate: under lock traffic, a holder of a member's
// certificate (node3's, a non-voter) sends a request in node1's name, and a
// holder of another CA's certificate in its own: both connections are
// refused before anything is read, nothing is granted twice.
func TestAttackStolenCertificate(t *testing.T) {
	requireAttacks(t)
	s := newSecureCluster(t, 3, nil)
	spare := s.outsider("node3", func(*Config) {})
	nodes := append(append([]*Mesh(nil), s.nodes...), spare)
	tr := startTraffic(t, nodes, []string{"a", "b"}, 1)
	start := time.Now()
	target := s.nodes[0]
	rpc := target.Status().RPCAddr
	cfgID := s.configID()
	other := newTestCA(t, "other-ca")
	for _, tc := range []struct {
		what, hello string
		cert        tls.Certificate
		metric      string
	}{
		{"node3's certificate, node1's name", "node1", must(s.ca.issue("node3", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))), "transport.refused.identity"},
		{"another CA's certificate", "node1", must(other.issue("node1", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))), "transport.refused.tls_unknown_ca"},
	} {
		conn, err := tls.Dial("tcp", rpc, clientTLS(tc.cert, s.ca.pool()))
		if err == nil {
			conn.Write(append(hello(tc.hello), frame(2, 1, peek(cfgID, tc.hello, "node0", "a"))...))
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _, rerr := readFrame(bufio.NewReader(conn))
			conn.Close()
			if rerr == nil {
				t.Errorf("%s: answered", tc.what)
			}
		} else if !strings.Contains(err.Error(), "certificate") {
			t.Logf("%s: dial: %v", tc.what, err)
		}
		waitFor(t, 10*time.Second, tc.metric, func() bool { return count(s.sink, tc.metric, "node0") > 0 })
	}
	pause(time.Second)
	tr.halt()
	v := tr.check(start, time.Now())
	t.Logf("stolen and foreign certificates: %v", v)
	if v.doubles > 0 || v.regressions > 0 {
		t.Errorf("exclusion or tokens broken: %v", v)
	}
}

func must(c tls.Certificate, _ any) tls.Certificate { return c }

// TestAttackHandshakeFlood: an outsider holds every inbound slot of a voter
// (MaxInboundConns) with connections that never finish their TLS
// handshake, opening a new one as each is closed. Connections already open
// keep working, locks keep being granted (a majority of the others
// suffices), and once the flood stops the voter is dialed again within
// HandshakeTimeout.
func TestAttackHandshakeFlood(t *testing.T) {
	requireAttacks(t)
	s := newSecureCluster(t, 3, func(cfg *Config) {
		cfg.MaxInboundConns = 64
		cfg.HandshakeTimeout = time.Second
	})
	tr := startTraffic(t, s.nodes, []string{"a", "b"}, 1)
	if _, ok := tr.grantedEverywhere([]string{"node0", "node1", "node2"}, time.Now(), 10*time.Second); !ok {
		t.Fatal("no grant on every node before the flood")
	}
	rpc := s.nodes[0].Status().RPCAddr
	start := time.Now()
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		var open []net.Conn
		opened := 0
		for {
			select {
			case <-stop:
				for _, c := range open {
					c.Close()
				}
				done <- opened
				return
			default:
			}
			if len(open) < 96 {
				if c, err := net.Dial("tcp", rpc); err == nil {
					open = append(open, c)
					opened++
					continue
				}
			}
			// Drop the ones the node closed, then open more.
			kept := open[:0]
			for _, c := range open {
				c.SetReadDeadline(time.Now().Add(time.Millisecond))
				var b [1]byte
				if _, err := c.Read(b[:]); err != nil && !isTimeoutErr(err) {
					c.Close()
					continue
				}
				kept = append(kept, c)
			}
			open = kept
		}
	}()
	pause(4 * time.Second)
	close(stop)
	opened := <-done
	left := time.Now()
	during := tr.check(start, left)
	tr.resetFails()
	rec, ok := tr.grantedEverywhere([]string{"node0", "node1", "node2"}, left, 10*time.Second)
	tr.halt()
	after := tr.check(left, time.Now())
	t.Logf("handshake flood (%d connections opened): during %v; after %v; every node granted %v after it stopped; %v refused (limit.conns), %v timed out (limit.handshake)",
		opened, during, after, rec.Round(time.Millisecond), count(s.sink, "limit.conns", "node0"), count(s.sink, "limit.handshake", "node0"))
	if during.doubles+after.doubles > 0 || during.regressions+after.regressions > 0 {
		t.Errorf("exclusion or tokens broken: during %v, after %v", during, after)
	}
	if during.grants == 0 {
		t.Error("nothing was granted during the flood")
	}
	if !ok {
		t.Error("not every node granted within 10 s of the flood stopping")
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
