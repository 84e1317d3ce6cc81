package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// selfSignedTLS returns a mutual-TLS config: one self-signed certificate
// for 127.0.0.1 that every node presents and trusts, as a server and as a
// client. Its DNS names are the node names it vouches for.
func selfSignedTLS(t *testing.T, names ...string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lockmesh test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              names,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

func TestTCPWithMutualTLS(t *testing.T) {
	noGoroutineLeak(t)
	cfg := selfSignedTLS(t, "server", "client", "stranger", "wary")
	log := newErrorLog()
	server := newTCP(t, "server", echo, func(c *TCPConfig) { c.TLS = cfg; c.OnError = log.record })
	client := newTCP(t, "client", echo, func(c *TCPConfig) { c.TLS = cfg })

	if reply := mustCall(t, client, server.Addr(), []byte("over tls")); string(reply) != "over tls" {
		t.Fatalf("reply %q", reply)
	}

	// The listener really speaks TLS: a raw TLS dial with the same trust
	// completes a handshake.
	conn, err := tls.Dial("tcp", server.Addr(), cfg)
	if err != nil {
		t.Fatalf("tls.Dial: %v", err)
	}
	conn.Close()

	t.Run("plain client refused", func(t *testing.T) {
		plain := newTCP(t, "plain", echo, nil)
		if _, err := plain.Call(callCtx(t), "", server.Addr(), []byte("x")); !errors.Is(err, ErrConnClosed) {
			t.Fatalf("err %v, want ErrConnClosed", err)
		}
		log.waitUntil(t, "about a TLS record header", func(err error) bool {
			var rh tls.RecordHeaderError
			return errors.Is(err, ErrHandshake) && errors.As(err, &rh)
		})
	})
	t.Run("client with an untrusted certificate refused", func(t *testing.T) {
		// It trusts the server, but presents a certificate the server
		// does not trust.
		untrusted := cfg.Clone()
		untrusted.Certificates = selfSignedTLS(t, "stranger").Certificates
		stranger := newTCP(t, "stranger", echo, func(c *TCPConfig) { c.TLS = untrusted })
		_, err := stranger.Call(callCtx(t), "", server.Addr(), []byte("x"))
		if !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrConnClosed) {
			t.Fatalf("err %v, want the call to fail", err)
		}
		log.waitUntil(t, "about the client's certificate", func(err error) bool {
			return errors.Is(err, ErrHandshake) && strings.Contains(err.Error(), "certificate")
		})
	})
	t.Run("server not trusted", func(t *testing.T) {
		other := selfSignedTLS(t, "wary")
		wary := newTCP(t, "wary", echo, func(c *TCPConfig) { c.TLS = other })
		_, err := wary.Call(callCtx(t), "", server.Addr(), []byte("x"))
		var unknownAuthority x509.UnknownAuthorityError
		if !errors.Is(err, ErrUnreachable) || !errors.As(err, &unknownAuthority) {
			t.Fatalf("err %v, want ErrUnreachable caused by an unknown authority", err)
		}
	})
	mustCall(t, client, server.Addr(), []byte("still serving"))
}

// With client certificates, the name in a peer's hello must be one its
// certificate vouches for: a member cannot speak in another member's name.
func TestTCPBindsHelloNameToCertificate(t *testing.T) {
	noGoroutineLeak(t)
	// The server and alice each have a self-signed certificate; both
	// trust both.
	serverTLS, aliceTLS := selfSignedTLS(t, "server"), selfSignedTLS(t, "alice")
	pool := x509.NewCertPool()
	pool.AddCert(serverTLS.Certificates[0].Leaf)
	pool.AddCert(aliceTLS.Certificates[0].Leaf)
	serverTLS.ClientCAs, serverTLS.RootCAs = pool, pool
	aliceTLS.ClientCAs, aliceTLS.RootCAs = pool, pool
	sayFrom := handlerFuncs{request: func(from string, body []byte) ([]byte, error) { return []byte(from), nil }}

	log := newErrorLog()
	server := newTCP(t, "server", sayFrom, func(c *TCPConfig) { c.TLS = serverTLS; c.OnError = log.record })
	alice := newTCP(t, "alice", echo, func(c *TCPConfig) { c.TLS = aliceTLS })
	if from := mustCall(t, alice, server.Addr(), []byte("x")); string(from) != "alice" {
		t.Fatalf("handler saw %q, want alice", from)
	}

	t.Run("another name refused", func(t *testing.T) {
		bob := newTCP(t, "bob", echo, func(c *TCPConfig) { c.TLS = aliceTLS })
		if _, err := bob.Call(callCtx(t), "", server.Addr(), []byte("x")); !errors.Is(err, ErrConnClosed) {
			t.Fatalf("err %v, want ErrConnClosed", err)
		}
		e := log.waitFor(t, ErrHandshake, ErrIdentity)
		t.Logf("OnError(%q, %v)", e.peer, e.err)
		if !strings.Contains(e.err.Error(), `"bob"`) || !strings.Contains(e.err.Error(), `"alice"`) {
			t.Fatalf("the report does not name the claimed and the certified names: %v", e.err)
		}
		if e.peer == "bob" {
			t.Fatal("the report names the peer by its unproven name")
		}
	})
	t.Run("VerifyPeerName replaces the rule", func(t *testing.T) {
		byCN := newTCP(t, "by-cn", sayFrom, func(c *TCPConfig) {
			c.TLS = serverTLS
			c.VerifyPeerName = func(name string, cert *x509.Certificate) error {
				if name == "carol" && cert.Subject.CommonName == "lockmesh test" {
					return nil
				}
				return errors.New("only carol")
			}
		})
		carol := newTCP(t, "carol", echo, func(c *TCPConfig) { c.TLS = aliceTLS })
		if from := mustCall(t, carol, byCN.Addr(), []byte("x")); string(from) != "carol" {
			t.Fatalf("handler saw %q, want carol", from)
		}
		if _, err := alice.Call(callCtx(t), "", byCN.Addr(), []byte("x")); !errors.Is(err, ErrConnClosed) {
			t.Fatalf("alice: err %v, want ErrConnClosed", err)
		}
	})
	mustCall(t, alice, server.Addr(), []byte("still serving"))
}

// A dialer uses a connection to a node only if the listener's certificate
// names that node: a member whose address was handed out as another's
// cannot answer in that one's name.
func TestTCPDialerChecksListenerName(t *testing.T) {
	noGoroutineLeak(t)
	cfg := selfSignedTLS(t, "client", "mallory")
	mallory := newTCP(t, "mallory", echo, func(c *TCPConfig) { c.TLS = cfg })
	client := newTCP(t, "client", echo, func(c *TCPConfig) { c.TLS = cfg })
	if reply, err := client.Call(callCtx(t), "mallory", mallory.Addr(), []byte("x")); err != nil || string(reply) != "x" {
		t.Fatalf("calling mallory as mallory: %q, %v", reply, err)
	}
	_, err := client.Call(callCtx(t), "voter1", mallory.Addr(), []byte("x"))
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrIdentity) {
		t.Fatalf("calling voter1 at mallory's address: %v, want ErrUnreachable and ErrIdentity", err)
	}
	if err := client.Send("voter1", mallory.Addr(), []byte("x")); err != nil && !errors.Is(err, ErrUnreachable) {
		t.Fatalf("sending to voter1 at mallory's address: %v", err)
	}
	// The pool keeps connections per node: mallory's own still works.
	mustCall(t, client, mallory.Addr(), []byte("still"))
}
