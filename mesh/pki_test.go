package mesh

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test: certificates and
// keys are generated in memory and written to the test's temporary
// directory, so no test depends on files of an earlier run.
type testCA struct {
	t      testing.TB
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
	serial int64
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{t: t, dir: t.TempDir(), cert: cert, key: key, serial: 1}
	ca.caFile = ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	ca.t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

// issue makes a node certificate for name (its DNS SAN, plus 127.0.0.1),
// valid from notBefore to notAfter, for client and server authentication.
func (ca *testCA) issue(name string, notBefore, notAfter time.Time) (tls.Certificate, *x509.Certificate) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		ca.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, leaf
}

// nodeFiles issues a certificate valid now for name and writes it and its
// key; it returns the certificate and key file names.
func (ca *testCA) nodeFiles(name string) (certFile, keyFile string) {
	return ca.nodeFilesValid(name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

func (ca *testCA) nodeFilesValid(name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	ca.t.Helper()
	cert, _ := ca.issue(name, notBefore, notAfter)
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		ca.t.Fatal(err)
	}
	ca.serial++
	suffix := big.NewInt(ca.serial).String()
	return ca.write(name+"-"+suffix+".pem", "CERTIFICATE", cert.Certificate[0]),
		ca.write(name+"-"+suffix+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// useFiles points cfg at a fresh certificate for its node name.
func (ca *testCA) useFiles(cfg *Config) {
	cfg.TLSCertFile, cfg.TLSKeyFile = ca.nodeFiles(cfg.Name)
	cfg.TLSCAFile = ca.caFile
}

// pool is a pool holding the CA's certificate.
func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// clientTLS is a hand-made TLS client configuration that presents cert and
// trusts roots: what an attacker (or a misconfigured node) would use.
func clientTLS(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ClientCAs:    roots,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}
