package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

// agentFlags are lockmesh agent's settings, from flags and environment.
type agentFlags struct {
	name, bind, advertise, rpc, rpcAdvertise string
	seeds, voters                            string
	bootstrapExpect                          int
	profile                                  string
	ttl, maxTTL                              time.Duration
	tlsCert, tlsKey, tlsCA                   string
	gossipKey, gossipLabel                   string
	dataDir                                  string
	newMesh                                  bool
	http, socket, socketMode                 string
	logLevel                                 string
	logJSON                                  bool
	config                                   string
	apiSocket, apiAddr                       string
	apiOpen                                  bool
	apiTLS, apiTLSCert, apiTLSKey            string
}

// meshConfig turns the settings into a mesh configuration. privateIP picks
// the address to advertise when the agent binds to every interface.
func meshConfig(f agentFlags, privateIP func() (net.IP, error)) (*mesh.Config, error) {
	bindIP, bindPort, err := splitHostPort("-bind", f.bind, true)
	if err != nil {
		return nil, err
	}
	cfg, err := profileConfig(f.profile, bindIP)
	if err != nil {
		return nil, err
	}
	if f.name != "" {
		cfg.Name = f.name
	}
	cfg.BindAddr, cfg.BindPort = bindIP.String(), bindPort
	cfg.Seeds = list(f.seeds)
	cfg.Voters = list(f.voters)
	cfg.BootstrapExpect = f.bootstrapExpect
	cfg.DataDir = f.dataDir
	cfg.NewMesh = f.newMesh
	if len(cfg.Voters) > 0 && f.bootstrapExpect > 0 {
		return nil, errors.New("set -voters or -bootstrap-expect, not both")
	}
	if err := advertise(cfg, f, privateIP); err != nil {
		return nil, err
	}
	if f.ttl != 0 {
		cfg.Timing = scaleTiming(cfg.Timing, f.ttl)
	}
	cfg.MaxTTL = f.maxTTL
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = f.tlsCert, f.tlsKey, f.tlsCA
	if f.gossipKey != "" {
		key, err := base64.StdEncoding.DecodeString(f.gossipKey)
		if err != nil {
			return nil, fmt.Errorf("-gossip-key (%s): not standard base64: %w", envName("gossip-key"), err)
		}
		cfg.GossipKey = key
	}
	cfg.GossipLabel = f.gossipLabel
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("-log-level %q: want trace, debug, info, warn, error or off", f.logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: level, Output: os.Stderr, JSONFormat: f.logJSON})
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// profileConfig is DefaultConfig (lan) or DefaultLocalConfig (local); auto
// picks local for a loopback -bind.
func profileConfig(profile string, bindIP net.IP) (*mesh.Config, error) {
	switch profile {
	case "local":
		return mesh.DefaultLocalConfig(), nil
	case "lan":
		return mesh.DefaultConfig(), nil
	case "auto":
		if bindIP.IsLoopback() {
			return mesh.DefaultLocalConfig(), nil
		}
		return mesh.DefaultConfig(), nil
	}
	return nil, fmt.Errorf("-profile %q: want auto, lan or local", profile)
}

// advertise sets the addresses: where ballots listen, and what the other
// nodes are told to use.
//
// The mesh publishes the ballot listener's own address, which for an
// unspecified host (0.0.0.0, the default -bind) is one that no peer can
// dial. So when the ballot host is unspecified and -rpc-advertise is not
// given, the agent advertises the gossip advertise address (-advertise, or
// this host's first private address, memberlist's own rule) with the ballot
// port, and tells gossip to advertise that same address.
func advertise(cfg *mesh.Config, f agentFlags, privateIP func() (net.IP, error)) error {
	var advIP net.IP
	if f.advertise != "" {
		ip, port, err := splitHostPort("-advertise", f.advertise, false)
		if err != nil {
			return err
		}
		advIP = ip
		cfg.AdvertiseAddr, cfg.AdvertisePort = ip.String(), port
	}
	cfg.RPCAddr = f.rpc
	if cfg.RPCAddr == "" {
		port := 0
		if cfg.BindPort != 0 {
			port = cfg.BindPort + 1
		}
		cfg.RPCAddr = net.JoinHostPort(cfg.BindAddr, strconv.Itoa(port))
	}
	rpcIP, rpcPort, err := splitHostPort("-rpc", cfg.RPCAddr, true)
	if err != nil {
		return err
	}
	cfg.RPCAdvertise = f.rpcAdvertise
	if cfg.RPCAdvertise != "" || !rpcIP.IsUnspecified() {
		return nil
	}
	if rpcPort == 0 {
		return errors.New("-rpc: a free port on every interface cannot be advertised: give a port, or -rpc-advertise")
	}
	if advIP == nil {
		if advIP, err = privateIP(); err != nil {
			return fmt.Errorf("-bind %s: %w; set -advertise", f.bind, err)
		}
		if cfg.BindPort != 0 && net.ParseIP(cfg.BindAddr).IsUnspecified() {
			cfg.AdvertiseAddr = advIP.String()
		}
	}
	cfg.RPCAdvertise = net.JoinHostPort(advIP.String(), strconv.Itoa(rpcPort))
	return nil
}

// splitHostPort parses "host:port", resolving a host name. A missing port
// is an error when needPort, else 0.
func splitHostPort(flagName, addr string, needPort bool) (net.IP, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		if needPort {
			return nil, 0, fmt.Errorf("%s %q: %w", flagName, addr, err)
		}
		host, p = addr, "0"
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return nil, 0, fmt.Errorf("%s %q: bad port", flagName, addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return nil, 0, fmt.Errorf("%s %q: cannot resolve %q: %v", flagName, addr, host, err)
		}
		ip = ips[0]
	}
	return ip, port, nil
}

// firstPrivateIP is the first private (RFC 1918 or RFC 4193) address of an
// interface that is up, IPv4 first: what memberlist advertises when bound
// to every interface.
func firstPrivateIP() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || !n.IP.IsPrivate() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP, nil
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, errors.New("no private address on any interface")
}

// scaleTiming sets the TTL and scales the margins with it, so that a TTL
// far from the profile's default still passes lease.Timing.Validate.
func scaleTiming(t lease.Timing, ttl time.Duration) lease.Timing {
	f := float64(ttl) / float64(t.TTL)
	t.SafetyMargin = time.Duration(float64(t.SafetyMargin) * f)
	t.NoticeMargin = time.Duration(float64(t.NoticeMargin) * f)
	t.TTL = ttl
	t.RenewInterval = 0 // TTL/3
	return t
}
