package transport

import (
	"crypto/tls"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTCPConfigValidate(t *testing.T) {
	valid := func() TCPConfig {
		c := DefaultLocalTCPConfig()
		c.Name = "node-1"
		c.Handler = echo
		return c
	}
	if c := valid(); c.Validate() != nil {
		t.Fatalf("DefaultLocalTCPConfig with Name and Handler: %v", c.Validate())
	}
	zero := TCPConfig{Name: "n", BindAddr: "127.0.0.1:0", Handler: echo}
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero numeric fields mean defaults, got %v", err)
	}
	cases := []struct {
		field  string
		adjust func(*TCPConfig)
	}{
		{"Name", func(c *TCPConfig) { c.Name = "" }},
		{"Name", func(c *TCPConfig) { c.Name = strings.Repeat("x", 256) }},
		{"Name", func(c *TCPConfig) { c.Name = "tab\there" }},
		{"BindAddr", func(c *TCPConfig) { c.BindAddr = "" }},
		{"BindAddr", func(c *TCPConfig) { c.BindAddr = "no-port" }},
		{"AdvertiseAddr", func(c *TCPConfig) { c.AdvertiseAddr = "no-port" }},
		{"Handler", func(c *TCPConfig) { c.Handler = nil }},
		{"MaxFrameSize", func(c *TCPConfig) { c.MaxFrameSize = minFrameSize - 1 }},
		{"MaxFrameSize", func(c *TCPConfig) { c.MaxFrameSize = maxFrameSizeLimit + 1 }},
		{"MaxFrameSize", func(c *TCPConfig) { c.MaxFrameSize = -1 }},
		{"ConnsPerPeer", func(c *TCPConfig) { c.ConnsPerPeer = -1 }},
		{"ConnsPerPeer", func(c *TCPConfig) { c.ConnsPerPeer = maxConnsPerPeer + 1 }},
		{"MaxQueuedBytes", func(c *TCPConfig) { c.MaxQueuedBytes = c.MaxFrameSize }},
		{"MaxQueuedBytes", func(c *TCPConfig) { c.MaxQueuedBytes = -1 }},
		{"DialTimeout", func(c *TCPConfig) { c.DialTimeout = -time.Second }},
		{"WriteTimeout", func(c *TCPConfig) { c.WriteTimeout = -1 }},
		{"IdleTimeout", func(c *TCPConfig) { c.IdleTimeout = -1 }},
		{"HandshakeTimeout", func(c *TCPConfig) { c.HandshakeTimeout = -1 }},
		{"FrameTimeout", func(c *TCPConfig) { c.FrameTimeout = -1 }},
		{"MaxInflightPerConn", func(c *TCPConfig) { c.MaxInflightPerConn = -1 }},
		{"MaxConnsPerPeer", func(c *TCPConfig) { c.MaxConnsPerPeer = -1 }},
		{"MaxInboundConns", func(c *TCPConfig) { c.MaxInboundConns = maxInboundConnsLimit + 1 }},
		{"TLS", func(c *TCPConfig) { c.TLS = &tls.Config{} }},
	}
	for _, tc := range cases {
		c := valid()
		tc.adjust(&c)
		before := c
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig naming the field", tc.field, err)
		}
		if !reflect.DeepEqual(before, c) {
			t.Errorf("%s: Validate modified the config", tc.field)
		}
		if _, err := NewTCP(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewTCP accepted an invalid config (%v)", tc.field, err)
		}
	}
	var nilCfg *TCPConfig
	if err := nilCfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil config: %v", err)
	}
}

func TestNewTCPAppliesDefaultsToACopy(t *testing.T) {
	noGoroutineLeak(t)
	cfg := TCPConfig{Name: "n", BindAddr: "127.0.0.1:0", Handler: echo}
	tr, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if cfg.MaxFrameSize != 0 {
		t.Fatal("NewTCP modified the caller's config")
	}
	if tr.cfg.MaxFrameSize != DefaultMaxFrameSize || tr.cfg.ConnsPerPeer != DefaultConnsPerPeer ||
		tr.cfg.IdleTimeout != DefaultIdleTimeout || tr.cfg.MaxQueuedBytes != DefaultMaxQueuedBytes {
		t.Fatalf("defaults not applied: %+v", tr.cfg)
	}
}

func TestAdvertiseAddr(t *testing.T) {
	noGoroutineLeak(t)
	tr := newTCP(t, "n", echo, func(c *TCPConfig) { c.AdvertiseAddr = "10.0.0.7:7947" })
	if tr.Addr() != "10.0.0.7:7947" {
		t.Fatalf("Addr() = %q", tr.Addr())
	}
}
