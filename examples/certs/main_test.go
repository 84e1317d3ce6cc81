package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The files it makes are what a mesh with mutual TLS needs: three nodes
// started on them grant and hand over a lock.
func TestCertificatesMakeAMesh(t *testing.T) {
	dir := t.TempDir()
	o, err := parseFlags([]string{"-dir", dir, "-nodes", "a,b,c"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(o, &out, time.Now()); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	keyText, err := os.ReadFile(filepath.Join(dir, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	gossipKey, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(keyText)))
	if err != nil || len(gossipKey) != 32 {
		t.Fatalf("gossip key %q: %v", keyText, err)
	}

	var nodes []*mesh.Mesh
	for _, name := range o.nodes {
		cfg := mesh.DefaultLocalConfig()
		cfg.Name = name
		cfg.Voters = o.nodes
		cfg.TLSCertFile = filepath.Join(dir, name+".pem")
		cfg.TLSKeyFile = filepath.Join(dir, name+"-key.pem")
		cfg.TLSCAFile = filepath.Join(dir, "ca.pem")
		cfg.GossipKey = gossipKey
		cfg.GossipLabel = o.label
		if len(nodes) > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		m, err := mesh.New(cfg)
		if err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		t.Cleanup(func() { m.Shutdown() })
		nodes = append(nodes, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := nodes[0].Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("acquire over mutual TLS: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[2].Acquire(ctx, "k"); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

// A second run reuses the CA and the gossip key; -expired certificates
// have expired.
func TestRerunReusesTheCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	first, _ := parseFlags([]string{"-dir", dir, "-nodes", "a"})
	if err := run(first, io.Discard, now); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	key1, _ := os.ReadFile(filepath.Join(dir, "gossip.key"))
	again, _ := parseFlags([]string{"-dir", dir, "-nodes", "b", "-expired"})
	if err := run(again, io.Discard, now); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	key2, _ := os.ReadFile(filepath.Join(dir, "gossip.key"))
	if !bytes.Equal(ca1, ca2) || !bytes.Equal(key1, key2) {
		t.Fatal("the second run replaced the CA or the gossip key")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca1)
	for name, wantValid := range map[string]bool{"a": true, "b": false} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		leaf := pair.Leaf
		if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != name {
			t.Errorf("%s: DNS names %v", name, leaf.DNSNames)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: now})
			if (err == nil) != wantValid {
				t.Errorf("%s: verify for usage %v: %v", name, usage, err)
			}
		}
	}
	if _, err := parseFlags([]string{"-dir", dir}); err == nil {
		t.Error("no -nodes accepted")
	}
}
