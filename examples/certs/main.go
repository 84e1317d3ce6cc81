// Command certs makes a development certificate authority and a key and
// certificate for each node of a mesh, for mutual TLS on the ballot
// transport, plus a gossip encryption key, and prints the mesh.Config
// fields that use them:
//
//	go run ./examples/certs -dir ./certs -nodes a,b,c
//
// Each node's certificate names the node (a DNS subject alternative name
// equal to its mesh.Config.Name: that is how a peer proves who it is) and
// the -ips addresses, and serves both as the node's server and client
// certificate. Running it again with the same -dir reuses the CA (and the
// gossip key) and issues fresh certificates for the nodes named: that is
// how nodes are added and certificates renewed. -expired issues
// certificates that expired an hour ago, to watch a mesh refuse them.
//
// This is for development and tests: the CA's private key sits in -dir,
// unencrypted. In production, issue node certificates from your own CA
// (Vault, cert-manager, step-ca...) and keep its key elsewhere; see
// docs/security.md.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type options struct {
	dir        string
	nodes      []string
	ips        []net.IP
	validFor   time.Duration
	caValidFor time.Duration
	expired    bool
	label      string
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(2)
	}
	if err := run(o, os.Stdout, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var nodes, ips string
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", "certs", "directory for the CA, the node certificates and the gossip key")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node names (each node's mesh.Config.Name)")
	fs.StringVar(&ips, "ips", "127.0.0.1,::1", "comma-separated IP addresses every node certificate also names")
	fs.DurationVar(&o.validFor, "valid-for", 90*24*time.Hour, "how long node certificates are valid")
	fs.DurationVar(&o.caValidFor, "ca-valid-for", 5*365*24*time.Hour, "how long a new CA is valid")
	fs.BoolVar(&o.expired, "expired", false, "issue node certificates that expired an hour ago (to try the refusal)")
	fs.StringVar(&o.label, "label", "lockmesh-dev", "gossip label printed in the configuration")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.nodes = append(o.nodes, n)
		}
	}
	if len(o.nodes) == 0 {
		return o, errors.New("-nodes names no node")
	}
	for _, s := range strings.Split(ips, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			return o, fmt.Errorf("-ips: %q is not an IP address", s)
		}
		o.ips = append(o.ips, ip)
	}
	if o.validFor <= 0 || o.caValidFor <= 0 {
		return o, errors.New("-valid-for and -ca-valid-for must be positive")
	}
	return o, nil
}

// run makes or reuses the CA and the gossip key in o.dir, issues a
// certificate for each node, and prints the configuration to out.
func run(o options, out io.Writer, now time.Time) error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	ca, caKey, created, err := loadOrCreateCA(o.dir, now, o.caValidFor)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(out, "Made a development CA: %s (its key: %s)\n", filepath.Join(o.dir, "ca.pem"), filepath.Join(o.dir, "ca-key.pem"))
	} else {
		fmt.Fprintf(out, "Reusing the CA in %s\n", filepath.Join(o.dir, "ca.pem"))
	}
	key, err := loadOrCreateGossipKey(o.dir)
	if err != nil {
		return err
	}
	notBefore, notAfter := now.Add(-5*time.Minute), now.Add(o.validFor)
	if o.expired {
		notBefore, notAfter = now.Add(-o.validFor-time.Hour), now.Add(-time.Hour)
	}
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	for _, name := range o.nodes {
		if err := issue(o.dir, name, o.ips, ca, caKey, notBefore, notAfter); err != nil {
			return fmt.Errorf("node %q: %w", name, err)
		}
		fmt.Fprintf(out, "Issued %s for node %q, valid until %s\n", filepath.Join(o.dir, name+".pem"), name, notAfter.Format(time.RFC3339))
	}
	fmt.Fprintf(out, `
Each node's mesh.Config (here for node %[1]q; the gossip key and label are the
same on every node, and so is the CA file):

	cfg.Name = %[1]q
	cfg.TLSCertFile = %[2]q
	cfg.TLSKeyFile = %[3]q
	cfg.TLSCAFile = %[4]q
	cfg.GossipKey, _ = base64.StdEncoding.DecodeString(%[5]q) // from %[6]s
	cfg.GossipLabel = %[7]q

Development only: the CA's key is in %[8]s. See docs/security.md for production.
`, o.nodes[0], filepath.Join(o.dir, o.nodes[0]+".pem"), filepath.Join(o.dir, o.nodes[0]+"-key.pem"),
		filepath.Join(o.dir, "ca.pem"), key, filepath.Join(o.dir, "gossip.key"), o.label, filepath.Join(o.dir, "ca-key.pem"))
	return nil
}

func loadOrCreateCA(dir string, now time.Time, validFor time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, err := os.ReadFile(certFile)
	if err == nil {
		keyPEM, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, nil, false, fmt.Errorf("%s exists but its key does not: %w", certFile, err)
		}
		ca, key, err := parseCA(certPEM, keyPEM)
		return ca, key, false, err
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "lockmesh development CA", Organization: []string{"lockmesh"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // signs node certificates only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, false, err
	}
	if err := writeKey(keyFile, key); err != nil {
		return nil, nil, false, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, false, err
	}
	return ca, key, true, nil
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("ca.pem or ca-key.pem is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("ca.pem: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("ca-key.pem: %w", err)
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("ca-key.pem is not the key of ca.pem")
	}
	return ca, key, nil
}

// issue writes <name>.pem and <name>-key.pem: a certificate for the node,
// for server and client authentication.
func issue(dir, name string, ips []net.IP, ca *x509.Certificate, caKey *ecdsa.PrivateKey, notBefore, notAfter time.Time) error {
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." || name == "ca" {
		return errors.New("not usable as a file name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"lockmesh"}},
		DNSNames:     []string{name}, // the name the node's hello must carry
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	// The key first: a certificate without its key would not load anyway.
	if err := writeKey(filepath.Join(dir, name+"-key.pem"), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der, 0o644)
}

func loadOrCreateGossipKey(dir string) (string, error) {
	file := filepath.Join(dir, "gossip.key")
	if b, err := os.ReadFile(file); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	key := make([]byte, 32) // AES-256
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	s := base64.StdEncoding.EncodeToString(key)
	return s, writeFile(file, []byte(s+"\n"), 0o600)
}

func writeKey(file string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(file, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(file, typ string, der []byte, perm os.FileMode) error {
	return writeFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm)
}

// writeFile replaces file atomically, so that a running node that re-reads
// it never sees half of it.
func writeFile(file string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".tmp-"+filepath.Base(file))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// serial is a random positive 128-bit serial number.
func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil
}
