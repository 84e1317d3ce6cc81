package mesh

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/lockmesh/lockmesh/quorum"
)

// Forged gossip. memberlist's alive message, as it travels: message type 4,
// then the struct below in msgpack (a map keyed by the field names), in a
// UDP packet; with a gossip key the packet is AES-GCM sealed (version byte
// 1, a 12-byte nonce, the sealed message, the label as additional data);
// with a label, the packet starts with 244, the label's length and the
// label.
type wireAlive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

func gossipPacket(t *testing.T, a wireAlive, key []byte, label string) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(4) // aliveMsg
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(a); err != nil {
		t.Fatal(err)
	}
	msg := buf.Bytes()
	if len(key) > 0 {
		block, err := aes.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			t.Fatal(err)
		}
		nonce := make([]byte, gcm.NonceSize())
		rand.Read(nonce)
		sealed := append([]byte{1}, nonce...)
		msg = gcm.Seal(sealed, nonce, msg, []byte(label))
	}
	if label != "" {
		msg = append(append([]byte{244, byte(len(label))}, label...), msg...)
	}
	return msg
}

// forgeAlive makes an alive message for victim, at victim's own gossip
// address, with incarnation inc and victim's metadata changed by edit.
func forgeAlive(t *testing.T, victim *Mesh, inc uint32, edit func(*nodeMeta)) wireAlive {
	t.Helper()
	n := victim.ml.LocalNode()
	victim.metaMu.Lock()
	meta := victim.meta
	victim.metaMu.Unlock()
	edit(&meta)
	b, err := meta.encode()
	if err != nil {
		t.Fatal(err)
	}
	return wireAlive{
		Incarnation: inc, Node: n.Name, Addr: []byte(n.Addr), Port: n.Port, Meta: b,
		Vsn: []uint8{n.PMin, n.PMax, n.PCur, n.DMin, n.DMax, n.DCur},
	}
}

// sendGossip sends packet to each node's gossip address over UDP.
func sendGossip(t *testing.T, packet []byte, to ...*Mesh) {
	t.Helper()
	for _, m := range to {
		c, err := net.Dial("udp", m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(packet)
		c.Close()
	}
}

// impostor is a ballot listener that answers every request in the name of
// the voter it is addressed to, as an acceptor that has accepted nothing:
// every prepare and accept is granted. With tlsCfg it serves TLS with the
// certificate it has (a member's, not the voters').
type impostor struct {
	ln       net.Listener
	lim      limits
	incs     map[quorum.NodeID]uint64 // the incarnation claimed for each voter
	answered atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startImpostor(t *testing.T, tlsCfg *tls.Config, incs map[quorum.NodeID]uint64) *impostor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	im := &impostor{ln: ln, lim: DefaultLocalConfig().limits(), incs: incs}
	im.wg.Add(1)
	go im.accept()
	t.Cleanup(im.stop)
	return im
}

func (im *impostor) addr() string { return im.ln.Addr().String() }

func (im *impostor) stop() {
	im.ln.Close()
	im.mu.Lock()
	for _, c := range im.conns {
		c.Close()
	}
	im.mu.Unlock()
	im.wg.Wait()
}

func (im *impostor) accept() {
	defer im.wg.Done()
	for {
		c, err := im.ln.Accept()
		if err != nil {
			return
		}
		im.mu.Lock()
		im.conns = append(im.conns, c)
		im.mu.Unlock()
		im.wg.Add(1)
		go im.serve(c)
	}
}

func (im *impostor) serve(c net.Conn) {
	defer im.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var hdr [13]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		typ, id := hdr[4], binary.BigEndian.Uint64(hdr[5:13])
		body := make([]byte, n-9)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if typ != 2 || len(body) == 0 || body[0] != kindRequest {
			continue // the hello, one-way messages, catch-ups: ignored
		}
		req, err := im.lim.decodeRequest(body)
		if err != nil {
			return
		}
		resp := &quorum.Response{Config: req.Config, From: req.To, Inc: im.incs[req.To]}
		for _, op := range req.Ops {
			r := quorum.Result{ID: op.ID, OK: true, Promised: op.Ballot}
			if op.Kind == quorum.OpAccept && !op.Next.IsZero() {
				r.Promised = op.Next
			}
			resp.Results = append(resp.Results, r)
		}
		im.answered.Add(1)
		if _, err := c.Write(frame(3, id, encodeResponse(resp))); err != nil {
			return
		}
	}
}

// hijack plays the attack of issue 12 on the voters of c: one forged alive
// message per voter, sent to every node, keeping the voter's gossip address,
// raising its incarnation to the top and pointing its ballot address at im.
// incBump is added to the incarnation the metadata claims.
func hijack(t *testing.T, nodes []*Mesh, voters []*Mesh, im *impostor, key []byte, label string, incBump uint64) {
	t.Helper()
	for _, v := range voters {
		a := forgeAlive(t, v, 0xFFFFFFFF, func(m *nodeMeta) {
			m.RPC = im.addr()
			m.Inc += incBump
		})
		sendGossip(t, gossipPacket(t, a, key, label), nodes...)
	}
}

// routedTo counts, over every node, the voters whose ballot address the
// node's book holds as addr.
func routedTo(nodes []*Mesh, voters []*Mesh, addr string) int {
	n := 0
	for _, m := range nodes {
		for _, v := range voters {
			if v == m {
				continue
			}
			if a, ok := m.book.rpcAddr(v.Name()); ok && a == addr {
				n++
			}
		}
	}
	return n
}

// attackResult is what one hijack did.
type attackResult struct {
	during   verdict
	after    verdict
	routed   int           // voter addresses pointing at the impostor when it left
	answered int64         // ballot requests the impostor answered
	recovery time.Duration // from the impostor leaving to a grant on every node
	ok       bool          // recovered within the limit
}

// playHijack runs lock traffic on c's nodes, hijacks the voters for
// window, stops the impostor and watches recovery.
func playHijack(t *testing.T, nodes []*Mesh, voters []*Mesh, im *impostor, key []byte, label string, incBump uint64, window time.Duration) attackResult {
	t.Helper()
	tr := startTraffic(t, nodes, []string{"a", "b", "c"}, 2)
	names := make([]string, len(nodes))
	for i, m := range nodes {
		names[i] = m.Name()
	}
	if _, ok := tr.grantedEverywhere(names, time.Now(), 10*time.Second); !ok {
		t.Fatal("no grant on every node before the attack")
	}
	start := time.Now()
	hijack(t, nodes, voters, im, key, label, incBump)
	// Again half way: gossip is lossy, and an attacker repeats itself.
	pause(window / 2)
	hijack(t, nodes, voters, im, key, label, incBump)
	pause(window / 2)
	var r attackResult
	r.routed = routedTo(nodes, voters, im.addr())
	im.stop()
	r.answered = im.answered.Load()
	left := time.Now()
	r.during = tr.check(start, left)
	tr.resetFails()
	r.recovery, r.ok = tr.grantedEverywhere(names, left, 10*time.Second)
	tr.halt()
	r.after = tr.check(left, time.Now())
	return r
}

// pause waits d: the attack's own pace, not a wait for an event.
func pause(d time.Duration) {
	timer := time.NewTimer(d)
	<-timer.C
}

func (r attackResult) log(t *testing.T, what string) {
	t.Helper()
	rec := "never (10 s)"
	if r.ok {
		rec = r.recovery.Round(time.Millisecond).String()
	}
	t.Logf("%s: during the attack %v; impostor answered %d requests; %d voter addresses pointed at it when it left; after: %v; every node granted again after %s",
		what, r.during, r.answered, r.routed, r.after, rec)
}

// harmless fails the test unless the hijack changed nothing that matters.
func (r attackResult) harmless(t *testing.T) {
	t.Helper()
	if r.during.doubles+r.after.doubles > 0 || r.during.regressions+r.after.regressions > 0 {
		t.Errorf("exclusion or tokens broken: during %v, after %v", r.during, r.after)
	}
	if r.answered > 0 || r.routed > 0 {
		t.Errorf("the impostor answered %d ballot requests; %d voter addresses pointed at it", r.answered, r.routed)
	}
	if !r.ok {
		t.Error("not every node granted within 10 s of the attacker leaving")
	}
}

// TestAttackForgedAliveMember: a process holding a non-voter's certificate
// and the gossip key (a member) forges an alive message per voter that
// moves its ballot address to the process, and answers the ballots as the
// voters. Before issue 12: 400+ double grants in a few seconds, tokens going
// back, and no recovery when it left.
func TestAttackForgedAliveMember(t *testing.T) {
	requireAttacks(t)
	s := newSecureCluster(t, 3, nil)
	spare := s.outsider("node3", func(*Config) {})
	nodes := append(append([]*Mesh(nil), s.nodes...), spare)
	// The attacker has node3's certificate (stolen, or node3 gone rogue).
	cert, _ := s.ca.issue("node3", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	srv := clientTLS(cert, s.ca.pool())
	srv.ClientAuth = tls.RequestClientCert
	incs := make(map[quorum.NodeID]uint64)
	for _, v := range s.nodes {
		incs[v.name] = v.inc
	}
	im := startImpostor(t, srv, incs)
	r := playHijack(t, nodes, s.nodes, im, s.key, s.label, 1, 4*time.Second)
	r.log(t, "forged alive, member certificate and gossip key")
	r.harmless(t)
}

// TestAttackForgedAliveOutsider: in a mesh without a gossip key, a host on
// the network forges the same alive messages. With TLS it cannot answer the
// ballots (no certificate); without TLS it can.
func TestAttackForgedAliveOutsider(t *testing.T) {
	requireAttacks(t)
	for _, withTLS := range []bool{true, false} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			var ca *testCA
			if withTLS {
				ca = newTestCA(t, "mesh-ca")
			}
			c := newCluster(t, clusterOpts{voters: 3, proposers: 1, tcp: true, tweak: func(cfg *Config) {
				cfg.Timing.TTL = 3 * time.Second
				if ca != nil {
					ca.useFiles(cfg)
				}
			}})
			c.waitVoting()
			incs := make(map[quorum.NodeID]uint64)
			for _, v := range c.nodes[:3] {
				incs[v.name] = v.inc
			}
			var srv *tls.Config
			if withTLS {
				// Its own CA: all an outsider can have.
				other := newTestCA(t, "other-ca")
				cert, _ := other.issue("node0", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
				srv = clientTLS(cert, other.pool())
				srv.ClientAuth = tls.RequestClientCert
			}
			im := startImpostor(t, srv, incs)
			r := playHijack(t, c.nodes, c.nodes[:3], im, nil, "", 1, 4*time.Second)
			r.log(t, "forged alive, no gossip key, "+name)
			if withTLS {
				r.answered = 0 // its TLS handshakes fail; what counts is whether routing recovered
			}
			r.harmless(t)
		})
	}
}
