package main

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

func defaultAgentFlags() agentFlags {
	return agentFlags{name: "n1", bind: "0.0.0.0:7946", profile: "auto", logLevel: "off", socketMode: "0600"}
}

var privateIP = func() (net.IP, error) { return net.ParseIP("10.1.2.3"), nil }

// TestMeshConfig: the agent's flags as a mesh configuration.
func TestMeshConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*agentFlags)
		check func(*testing.T, *mesh.Config)
		err   string
	}{
		{name: "defaults: every interface, the private address advertised", check: func(t *testing.T, c *mesh.Config) {
			want := [...]string{"0.0.0.0", "10.1.2.3", "0.0.0.0:7947", "10.1.2.3:7947"}
			if got := [...]string{c.BindAddr, c.AdvertiseAddr, c.RPCAddr, c.RPCAdvertise}; got != want {
				t.Errorf("bind, advertise, rpc, rpc advertise = %q, want %q", got, want)
			}
			if c.Timing.TTL != 10*time.Second {
				t.Errorf("TTL %v: want the lan profile's", c.Timing.TTL)
			}
		}},
		{name: "loopback: local profile, nothing to advertise", edit: func(f *agentFlags) { f.bind = "127.0.0.1:0" },
			check: func(t *testing.T, c *mesh.Config) {
				if c.Timing.TTL != time.Second || c.AdvertiseAddr != "" || c.RPCAdvertise != "" || c.RPCAddr != "127.0.0.1:0" {
					t.Errorf("TTL %v, advertise %q, rpc %q, rpc advertise %q", c.Timing.TTL, c.AdvertiseAddr, c.RPCAddr, c.RPCAdvertise)
				}
			}},
		{name: "-advertise names the ballot address too", edit: func(f *agentFlags) { f.advertise = "192.168.9.9" },
			check: func(t *testing.T, c *mesh.Config) {
				if c.AdvertiseAddr != "192.168.9.9" || c.RPCAdvertise != "192.168.9.9:7947" {
					t.Errorf("advertise %q, rpc advertise %q", c.AdvertiseAddr, c.RPCAdvertise)
				}
			}},
		{name: "-rpc-advertise wins", edit: func(f *agentFlags) { f.rpcAdvertise = "proxy:9000" },
			check: func(t *testing.T, c *mesh.Config) {
				if c.RPCAdvertise != "proxy:9000" {
					t.Errorf("rpc advertise %q", c.RPCAdvertise)
				}
			}},
		{name: "-data-dir", edit: func(f *agentFlags) { f.dataDir = "/var/lib/lockmesh" },
			check: func(t *testing.T, c *mesh.Config) {
				if c.DataDir != "/var/lib/lockmesh" {
					t.Errorf("data dir %q", c.DataDir)
				}
			}},
		{name: "voters, seeds, ttl, tls, gossip", edit: func(f *agentFlags) {
			f.voters, f.seeds, f.ttl, f.maxTTL = "a, b,c", "h1:7946,h2:7946", 4*time.Second, 8*time.Second
			f.tlsCert, f.tlsKey, f.tlsCA = "c.pem", "k.pem", "ca.pem"
			f.gossipKey, f.gossipLabel = "MDEyMzQ1Njc4OWFiY2RlZg==", "prod"
		}, check: func(t *testing.T, c *mesh.Config) {
			if strings.Join(c.Voters, ",") != "a,b,c" || len(c.Seeds) != 2 || c.Timing.TTL != 4*time.Second || c.MaxTTL != 8*time.Second {
				t.Errorf("voters %q, seeds %q, TTL %v, max TTL %v", c.Voters, c.Seeds, c.Timing.TTL, c.MaxTTL)
			}
			if c.TLSCertFile != "c.pem" || c.TLSKeyFile != "k.pem" || c.TLSCAFile != "ca.pem" {
				t.Errorf("TLS files %q %q %q", c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile)
			}
			if string(c.GossipKey) != "0123456789abcdef" || c.GossipLabel != "prod" {
				t.Errorf("gossip key %q, label %q", c.GossipKey, c.GossipLabel)
			}
		}},
		{name: "voters and bootstrap-expect", edit: func(f *agentFlags) { f.voters, f.bootstrapExpect = "a", 3 }, err: "not both"},
		{name: "gossip key not base64", edit: func(f *agentFlags) { f.gossipKey = "not base64!" }, err: "base64"},
		{name: "gossip key of 5 bytes", edit: func(f *agentFlags) { f.gossipKey = "aGVsbG8=" }, err: "GossipKey"},
		{name: "two TLS files of three", edit: func(f *agentFlags) { f.tlsCert, f.tlsKey = "c", "k" }, err: "TLS"},
		{name: "free port on every interface", edit: func(f *agentFlags) { f.bind = "0.0.0.0:0" }, err: "-rpc-advertise"},
		{name: "bad profile", edit: func(f *agentFlags) { f.profile = "wan" }, err: "-profile"},
		{name: "bad log level", edit: func(f *agentFlags) { f.logLevel = "loud" }, err: "-log-level"},
		{name: "no port", edit: func(f *agentFlags) { f.bind = "0.0.0.0" }, err: "-bind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := defaultAgentFlags()
			if tc.edit != nil {
				tc.edit(&f)
			}
			c, err := meshConfig(f, privateIP)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.check != nil:
				tc.check(t, c)
			}
		})
	}
}

// TestAgentFlagsFromEnvironment: LOCKMESH_* set what the command line does
// not, and the command line wins.
func TestAgentFlagsFromEnvironment(t *testing.T) {
	t.Setenv("LOCKMESH_NAME", "from-env")
	t.Setenv("LOCKMESH_VOTERS", "x,y,z")
	t.Setenv("LOCKMESH_GOSSIP_KEY", "MDEyMzQ1Njc4OWFiY2RlZg==")
	t.Setenv("LOCKMESH_BOOTSTRAP_EXPECT", "three")
	c := agentCommand()
	_, err := c.parse([]string{"-name", "from-flag"})
	var e *exitErr
	if !errors.As(err, &e) || e.code != exitUsage || !strings.Contains(err.Error(), "LOCKMESH_BOOTSTRAP_EXPECT") {
		t.Fatalf("a bad environment value: %v, want a usage error naming it", err)
	}
	t.Setenv("LOCKMESH_BOOTSTRAP_EXPECT", "0")
	c = agentCommand()
	if _, err := c.parse([]string{"-name", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range []string{"name", "voters", "gossip-key"} {
		got[n] = c.fs.Lookup(n).Value.String()
	}
	want := map[string]string{"name": "from-flag", "voters": "x,y,z", "gossip-key": "MDEyMzQ1Njc4OWFiY2RlZg=="}
	for n := range want {
		if got[n] != want[n] {
			t.Errorf("-%s = %q, want %q", n, got[n], want[n])
		}
	}
}

// TestInterspersedFlags: the inspection commands take flags after their
// arguments too; "--" ends the flags.
func TestInterspersedFlags(t *testing.T) {
	c := holderCommand()
	args, err := c.parse([]string{"key", "-json", "-socket", "/s", "--", "-not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(args, " ") != "key -not-a-flag" || c.fs.Lookup("json").Value.String() != "true" || c.fs.Lookup("socket").Value.String() != "/s" {
		t.Errorf("args %q, -json %v, -socket %v", args, c.fs.Lookup("json").Value, c.fs.Lookup("socket").Value)
	}
	c = lockCommand()
	args, err = c.parse([]string{"-ttl", "3s", "key", "--", "cmd", "-x"})
	if err != nil || strings.Join(args, " ") != "key -- cmd -x" {
		t.Errorf("lock: args %q, %v", args, err)
	}
}

// TestReadiness: the status command's words for the mesh's readiness.
func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		st   mesh.Status
		want bool
		says string
	}{
		{mesh.Status{Waiting: mesh.Waiting{Configuration: true}}, false, "not ready: no voter configuration yet"},
		{mesh.Status{ConfigID: 7, VotingState: mesh.Quarantined, Waiting: mesh.Waiting{Quarantine: 1500 * time.Millisecond}},
			false, "not ready: quarantined for 1.5s more"},
		{mesh.Status{ConfigID: 7, VotingState: mesh.CatchingUp, Waiting: mesh.Waiting{CatchUp: []string{"b"}}},
			false, "not ready: catching up, waiting for b"},
		{mesh.Status{ConfigID: 7, VotingState: mesh.Live, Ready: true}, true, "ready"},
		{mesh.Status{ConfigID: 7, Ready: true}, true, "ready"}, // not a voter
	} {
		if got, why := readiness(tc.st); got != tc.want || why != tc.says {
			t.Errorf("readiness(%+v) = %v, %q; want %v, %q", tc.st, got, why, tc.want, tc.says)
		}
	}
}
