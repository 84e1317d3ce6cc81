// Command node runs one lockmesh node as its own process, so that a mesh can
// be started in several terminals (see README.md):
//
//	go run ./examples/node -name a -bind 127.0.0.1:7946 -voters a,b,c
//	go run ./examples/node -name b -bind 127.0.0.1:7956 -voters a,b,c -seeds 127.0.0.1:7946
//
// It reads commands from stdin, one per line (type "help"), or, with -hold,
// takes one key, holds it for a while and releases it. With -json every
// event is one JSON object on its own stdout line, for scripts and tests;
// logs go to stderr. SIGINT and SIGTERM make the node leave gracefully.
//
// Exit status: 0 after leave or quit, 1 when the node cannot start or -hold
// cannot take its key, 2 for bad flags, 3 when -hold loses its lease.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

type options struct {
	name     string
	bind     string
	rpc      string
	rpcAdv   string
	seeds    string
	voters   string
	expect   int
	ttl      time.Duration
	profile  string
	logLevel string
	json     bool
	wait     time.Duration
	hold     string
	holdFor  time.Duration
}

func parseFlags() options {
	var o options
	host, _ := os.Hostname()
	flag.StringVar(&o.name, "name", host, "node name: unique in the mesh, stable across restarts")
	flag.StringVar(&o.bind, "bind", "127.0.0.1:7946", "gossip address host:port (port 0: a free one)")
	flag.StringVar(&o.rpc, "rpc", "", "ballot address host:port (default: the gossip host, next port)")
	flag.StringVar(&o.rpcAdv, "rpc-advertise", "", "ballot address host:port peers are told to dial (default: the -rpc address; for NAT or a proxy)")
	flag.StringVar(&o.seeds, "seeds", "", "comma-separated gossip addresses of nodes to join")
	flag.StringVar(&o.voters, "voters", "", "comma-separated names of the voters (the same on every node)")
	flag.IntVar(&o.expect, "bootstrap-expect", 0, "instead of -voters: be a voter and wait for this many (1, 3, 5 or 7)")
	flag.DurationVar(&o.ttl, "ttl", 0, "lease TTL (default: 1s with -profile local, 10s with lan)")
	flag.StringVar(&o.profile, "profile", "auto", "timer settings: local (one machine), lan, or auto (local when -bind is loopback)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "log level on stderr: trace, debug, info, warn, error, off")
	flag.BoolVar(&o.json, "json", false, "print events as JSON lines on stdout (and logs as JSON on stderr)")
	flag.DurationVar(&o.wait, "wait", 30*time.Second, "how long acquire (and -hold) waits for a held key")
	flag.StringVar(&o.hold, "hold", "", "non-interactive: take this key, hold it for -for, release it and leave")
	flag.DurationVar(&o.holdFor, "for", 30*time.Second, "with -hold: how long to hold the key")
	flag.Parse()
	if flag.NArg() > 0 {
		usageError("unexpected arguments %q", flag.Args())
	}
	return o
}

func usageError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "node: %s\n", fmt.Sprintf(format, args...))
	flag.Usage()
	os.Exit(2)
}

func main() {
	o := parseFlags()
	out := newPrinter(os.Stdout, o.json, o.name)
	cfg, err := buildConfig(o)
	if err != nil {
		usageError("%v", err)
	}
	m, err := mesh.New(cfg)
	if err != nil {
		out.error("start", err)
		os.Exit(1)
	}
	st := m.Status()
	out.emit(event{Event: "started", Addr: st.Addr, RPC: st.RPCAddr, Voters: cfg.Voters,
		Expect: cfg.BootstrapExpect, TTL: cfg.Timing.TTL.String()})

	// The first SIGINT or SIGTERM cancels ctx and the node leaves; stop
	// then restores the default, so a second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()

	n := newNode(m, out, o.wait)
	go n.announceReady(ctx)
	if o.hold != "" {
		os.Exit(n.hold(ctx, o.hold, o.holdFor))
	}
	os.Exit(n.interactive(ctx, os.Stdin))
}

// buildConfig turns the flags into a mesh.Config.
func buildConfig(o options) (*mesh.Config, error) {
	ip, port, err := splitBind(o.bind)
	if err != nil {
		return nil, err
	}
	local := ip.IsLoopback()
	switch o.profile {
	case "local":
		local = true
	case "lan":
		local = false
	case "auto":
	default:
		return nil, fmt.Errorf("-profile %q: want local, lan or auto", o.profile)
	}
	cfg := mesh.DefaultConfig()
	if local {
		cfg = mesh.DefaultLocalConfig()
	}
	cfg.Name = o.name
	cfg.BindAddr = ip.String()
	cfg.BindPort = port
	cfg.RPCAddr = o.rpc
	cfg.RPCAdvertise = o.rpcAdv
	cfg.Seeds = list(o.seeds)
	cfg.Voters = list(o.voters)
	cfg.BootstrapExpect = o.expect
	if len(cfg.Voters) > 0 && o.expect > 0 {
		return nil, errors.New("set -voters or -bootstrap-expect, not both")
	}
	if o.ttl != 0 {
		cfg.Timing = scaleTiming(cfg.Timing, o.ttl)
	}
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("-log-level %q: want trace, debug, info, warn, error or off", o.logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: level, Output: os.Stderr, JSONFormat: o.json})
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// splitBind parses "host:port"; the host may be a name, resolved here.
func splitBind(addr string) (net.IP, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, fmt.Errorf("-bind %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return nil, 0, fmt.Errorf("-bind %q: bad port", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return nil, 0, fmt.Errorf("-bind %q: cannot resolve %q: %v", addr, host, err)
		}
		ip = ips[0]
	}
	return ip, port, nil
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

// list splits a comma-separated flag, dropping blanks.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
