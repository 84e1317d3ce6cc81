package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Mutual TLS from files (Config.TLSCertFile, TLSKeyFile, TLSCAFile).
//
// Every node is both a client and a server of the ballot transport, and
// every node holding a certificate from the mesh's CA is a member. So both
// ends verify the other's certificate against the CA file, for the usage
// of its side, and nothing else: the dialer does not check a host name
// (peers are dialed at addresses gossip hands out, which certificates
// rarely list). Who a dialer is, is bound by the transport: the name in its
// hello must be a DNS SAN of its certificate.
//
// The files are re-read when their size or modification time changes,
// checked at most once per reloadCheck, at a handshake (connections are
// long-lived, so handshakes are rare). A set of files that does not load
// (a certificate replaced before its key, say) is not used: the previous
// one stays until the files load again.

// reloadCheck is how often, at most, the files are checked for changes.
const reloadCheck = time.Second

// errPeerCertificate wraps every refusal of a peer's certificate.
var errPeerCertificate = errors.New("mesh: peer certificate refused")

// certFiles holds the certificate and CA pool loaded from the files.
type certFiles struct {
	certFile, keyFile, caFile string
	name                      string // this node's name, which its certificate must carry
	log                       hclog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	roots   *x509.CertPool
	stamps  [3]fileStamp // cert, key, CA as last loaded
	checked time.Time
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// tlsFromFiles loads the files and builds the ballot transport's TLS
// configuration. It fails with ErrInvalidConfig when they do not load, or
// when this node's certificate would be refused by its peers.
func tlsFromFiles(cfg *Config, log hclog.Logger) (*tls.Config, error) {
	f := &certFiles{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, caFile: cfg.TLSCAFile, name: cfg.Name, log: log}
	stamps, err := f.stat()
	if err == nil {
		err = f.load(stamps)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	f.checked = time.Now()
	return f.config(), nil
}

func (f *certFiles) config() *tls.Config {
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.current()
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.current()
		},
		// The dialer verifies the listener in VerifyConnection: against
		// the CA file as it is now, and without a host name.
		InsecureSkipVerify: true,
		VerifyConnection:   f.verifier(x509.ExtKeyUsageServerAuth),
		// The listener requires a certificate and verifies it in
		// VerifyConnection too, so that a replaced CA file takes effect.
		ClientAuth: tls.RequireAnyClientCert,
	}
	server := base.Clone()
	server.VerifyConnection = f.verifier(x509.ExtKeyUsageClientAuth)
	// GetConfigForClient runs on the listening side only: that is how the
	// listener gets the client-usage check and the dialer the server one.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return server, nil }
	return base
}

// verifier returns a VerifyConnection that checks the peer's certificate
// chain against the CA file for usage.
func (f *certFiles) verifier(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: none presented", errPeerCertificate)
		}
		_, roots, err := f.reload()
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		leaf := cs.PeerCertificates[0]
		_, err = leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{usage},
		})
		if err != nil {
			return fmt.Errorf("%w: %q (DNS names %q): %w", errPeerCertificate, leaf.Subject.CommonName, leaf.DNSNames, err)
		}
		return nil
	}
}

func (f *certFiles) current() (*tls.Certificate, error) {
	cert, _, err := f.reload()
	return cert, err
}

// reload returns the certificate and roots in use, first re-reading the
// files if they changed and were not checked for a while.
func (f *certFiles) reload() (*tls.Certificate, *x509.CertPool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= reloadCheck {
		f.checked = now
		stamps, err := f.stat()
		switch {
		case err != nil:
			f.log.Warn("cannot check the TLS files; keeping the ones loaded", "error", err)
		case stamps != f.stamps:
			if err := f.load(stamps); err != nil {
				f.log.Warn("the TLS files changed but do not load; keeping the ones loaded", "error", err)
			} else {
				f.log.Info("reloaded the TLS certificate and CA files", "not_after", f.cert.Leaf.NotAfter)
			}
		}
	}
	return f.cert, f.roots, nil
}

func (f *certFiles) stat() ([3]fileStamp, error) {
	var s [3]fileStamp
	for i, name := range []string{f.certFile, f.keyFile, f.caFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return s, fmt.Errorf("mesh: TLS file: %w", err)
		}
		s[i] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
	}
	return s, nil
}

// load reads the three files and, if they make a usable set, installs
// them. A certificate its peers would refuse is not usable: one that does
// not chain to the CA file, has expired, or does not name this node.
func (f *certFiles) load(stamps [3]fileStamp) error {
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("mesh: TLS certificate %s and key %s: %w", f.certFile, f.keyFile, err)
	}
	pem, err := os.ReadFile(f.caFile)
	if err != nil {
		return fmt.Errorf("mesh: TLS CA file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("mesh: TLS CA file %s holds no PEM certificate", f.caFile)
	}
	leaf := cert.Leaf // set by LoadX509KeyPair since Go 1.23
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("mesh: TLS certificate %s: %w", f.certFile, err)
		}
		cert.Leaf = leaf
	}
	if !slices.Contains(leaf.DNSNames, f.name) {
		return fmt.Errorf("mesh: TLS certificate %s is for DNS names %q, not this node's name %q: peers would refuse it",
			f.certFile, leaf.DNSNames, f.name)
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("mesh: TLS certificate %s would be refused by peers trusting %s: %w", f.certFile, f.caFile, err)
		}
	}
	f.cert, f.roots, f.stamps = &cert, roots, stamps
	return nil
}
