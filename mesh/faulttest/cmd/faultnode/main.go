// Command faultnode is the lockmesh node the fault suite (package
// mesh/faulttest) runs as an OS process. It is driven over stdin and stdout
// with the JSON lines of package control: the suite asks it to acquire,
// release, read and write to the fenced resource, and to change the voters,
// and it reports every lease's end. It exits at the end of stdin (the suite died), on "leave",
// and on SIGTERM or SIGINT after leaving the mesh.
//
//	faultnode -name a -bind 127.0.0.1:0 -voters a,b,c
//	faultnode -name d -bind 127.0.0.1:0 -voters a,b,c -autopilot -autopilot-dead-after 2s
//	faultnode proxy -listen 10.0.0.254 -map 8000=10.0.0.1:7946,...
//
// The second form is the slow-network stand-in for tc netem: a UDP and TCP
// proxy that delays and drops what it forwards (see proxy.go).
//
// It is not an example to copy (see examples/node for that): it exposes
// what a test needs to see, such as the monotonic time of each grant.
package main

import (
	"context"
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
	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		os.Exit(runProxy(os.Args[2:]))
	}
	os.Exit(runNode(os.Args[1:]))
}

type nodeFlags struct {
	name, bind, rpc, advertise, rpcAdvertise string
	seeds, voters                            string
	ttl, roundTimeout, rejoin, deadWindow    time.Duration
	logLevel                                 string
	// autopilot turns Config.Autopilot on with the four settings after
	// it (zero: the library's defaults); noVote sets Config.NoVote.
	autopilot               bool
	apDeadAfter, apInterval time.Duration
	apTarget, apMin         int
	noVote                  bool
	dataDir                 string
	newMesh                 bool
	wallBack                time.Duration
}

func runNode(args []string) int {
	fs := flag.NewFlagSet("faultnode", flag.ContinueOnError)
	var f nodeFlags
	fs.StringVar(&f.name, "name", "", "node name (required)")
	fs.StringVar(&f.bind, "bind", "127.0.0.1:0", "gossip address ip:port (port 0: a free one)")
	fs.StringVar(&f.rpc, "rpc", "", "ballot address ip:port (default: the gossip ip, a free port)")
	fs.StringVar(&f.advertise, "advertise", "", "gossip address ip:port the others are told to use (a proxy)")
	fs.StringVar(&f.rpcAdvertise, "rpc-advertise", "", "ballot address ip:port the others are told to dial (a proxy)")
	fs.StringVar(&f.seeds, "seeds", "", "comma-separated gossip addresses to join")
	fs.StringVar(&f.voters, "voters", "", "comma-separated voter names, the same on every node; a node not listed does not vote")
	fs.DurationVar(&f.ttl, "ttl", 0, "lease TTL (default: DefaultLocalConfig's); the margins scale with it")
	fs.DurationVar(&f.roundTimeout, "round-timeout", 0, "one ballot round's wait (default: DefaultLocalConfig's)")
	fs.DurationVar(&f.rejoin, "rejoin", 0, "how often missing seeds and voters are rejoined (default: DefaultLocalConfig's)")
	fs.DurationVar(&f.deadWindow, "gossip-to-the-dead", 0, "memberlist's GossipToTheDeadTime (default: memberlist's local 15s)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level on stderr")
	fs.BoolVar(&f.autopilot, "autopilot", false, "replace dead voters (Config.Autopilot), with the -autopilot-* settings")
	fs.DurationVar(&f.apDeadAfter, "autopilot-dead-after", 0, "Autopilot.DeadAfter (default: the library's)")
	fs.DurationVar(&f.apInterval, "autopilot-interval", 0, "Autopilot.Interval (default: the library's)")
	fs.IntVar(&f.apTarget, "autopilot-target", 0, "Autopilot.Target (default: the library's)")
	fs.IntVar(&f.apMin, "autopilot-min", 0, "Autopilot.Min (default: the library's)")
	fs.BoolVar(&f.noVote, "no-vote", false, "never to be made a voter by the autopilot (Config.NoVote)")
	fs.StringVar(&f.dataDir, "data-dir", "", "Config.DataDir (default: none, state in memory)")
	fs.BoolVar(&f.newMesh, "new-mesh", false, "Config.NewMesh: the mesh is brand-new (a first start with data directories)")
	fs.DurationVar(&f.wallBack, "wall-back", 0, "set the wall clock (Config.WallClock) back by this much")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := nodeConfig(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultnode: %v\n", err)
		return 2
	}
	m, err := mesh.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultnode: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return newServer(m, os.Stdout).serve(ctx, os.Stdin)
}

// nodeConfig starts from DefaultLocalConfig (short timers) whatever the
// address: the suite's nodes share one machine even when each has its own
// network namespace.
func nodeConfig(f nodeFlags) (*mesh.Config, error) {
	if f.name == "" {
		return nil, fmt.Errorf("-name is required")
	}
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = f.name
	ip, port, err := splitAddr(f.bind)
	if err != nil {
		return nil, fmt.Errorf("-bind: %w", err)
	}
	cfg.BindAddr, cfg.BindPort = ip, port
	if f.rpc != "" {
		cfg.RPCAddr = f.rpc
	} else {
		cfg.RPCAddr = net.JoinHostPort(ip, "0")
	}
	if f.advertise != "" {
		if cfg.AdvertiseAddr, cfg.AdvertisePort, err = splitAddr(f.advertise); err != nil {
			return nil, fmt.Errorf("-advertise: %w", err)
		}
	}
	cfg.RPCAdvertise = f.rpcAdvertise
	cfg.Seeds = list(f.seeds)
	cfg.Voters = list(f.voters)
	if f.ttl != 0 {
		cfg.Timing = scaleTiming(cfg.Timing, f.ttl)
	}
	cfg.RoundTimeout = f.roundTimeout
	cfg.RejoinInterval = f.rejoin
	if f.autopilot {
		cfg.Autopilot = &mesh.AutopilotConfig{DeadAfter: f.apDeadAfter, Interval: f.apInterval, Target: f.apTarget, Min: f.apMin}
	}
	cfg.NoVote = f.noVote
	cfg.DataDir = f.dataDir
	cfg.NewMesh = f.newMesh
	if f.wallBack != 0 {
		back := f.wallBack
		cfg.WallClock = func() time.Time { return time.Now().Add(-back) }
	}
	mc := memberlist.DefaultLocalConfig()
	// What the mesh does for its local profile when given no memberlist
	// configuration: push/pull often, so a lost join gossip heals soon.
	mc.PushPullInterval = 2 * time.Second
	if f.deadWindow != 0 {
		mc.GossipToTheDeadTime = f.deadWindow
	}
	cfg.Memberlist = mc
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("-log-level %q", f.logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: level, Output: os.Stderr, Name: f.name, TimeFormat: "15:04:05.000000"})
	return cfg, cfg.Validate()
}

// scaleTiming sets the TTL and scales the margins with it.
func scaleTiming(t lease.Timing, ttl time.Duration) lease.Timing {
	f := float64(ttl) / float64(t.TTL)
	t.SafetyMargin = time.Duration(float64(t.SafetyMargin) * f)
	t.NoticeMargin = time.Duration(float64(t.NoticeMargin) * f)
	t.TTL = ttl
	t.RenewInterval = 0 // TTL/3
	return t
}

func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q is not an IP address", host)
	}
	return host, port, nil
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
