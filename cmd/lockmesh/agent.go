package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

const agentHelp = `
Runs one node of a lock mesh, and serves the local API that lock, elect,
holder, locks, status and voters use (a unix socket, -socket, readable by
the agent's user only unless -socket-mode says otherwise).

Gossip listens on -bind; ballots on -rpc (default: the next port). Give
every voter the same -voters list, or -bootstrap-expect N instead; nodes
with neither learn the voters from the mesh and take locks all the same.
A voter with -data-dir on an empty directory votes at once only when
every other voter (of 3; three of the other four of 5) says it never
voted: an empty directory is also what a wiped one looks like. To found a
mesh with a voter missing, start it with -new-mesh, once.
TLS (-tls-cert, -tls-key, -tls-ca: all three, or none) secures the ballot
transport with mutual TLS: each node's certificate must carry its -name as
a DNS SAN. Set the gossip key through LOCKMESH_GOSSIP_KEY rather than
-gossip-key: the command line is visible to every local user.

-http serves /healthz (200 while the agent runs), /readyz (200 once the
node is ready: a voter configuration is known, on a voter its own vote is
live, and a majority of the voters is known live; otherwise 503 and what it
waits for; ?verbose lists the checks), /status (the node's status as JSON)
and /metrics (Prometheus).

On stdout the agent prints "started name=... gossip=... rpc=... socket=...
http=...", then "ready voters=..." once /readyz would answer 200, and "left"
when it is done. SIGINT or SIGTERM makes it leave: every lease it holds is
released (its lock clients stop their commands) and it exits 0; a second
signal stops it at once.

exit status: 0 after leaving; 1 if the node cannot start; 64 for bad flags.`

func agentCommand() *command {
	c := newCommand("agent", "", "run a node of the mesh and its local API", agentHelp)
	var f agentFlags
	fs := c.fs
	fs.StringVar(&f.name, "name", "", "node name: unique in the mesh, stable across restarts (default: the host name)")
	fs.StringVar(&f.bind, "bind", "0.0.0.0:7946", "gossip address host:port (TCP and UDP)")
	fs.StringVar(&f.advertise, "advertise", "", "gossip address host[:port] the other nodes are told to use (NAT, containers)")
	fs.StringVar(&f.rpc, "rpc", "", "ballot address host:port (default: the -bind host, next port)")
	fs.StringVar(&f.rpcAdvertise, "rpc-advertise", "", "ballot address host:port the other nodes are told to dial")
	fs.StringVar(&f.seeds, "seeds", "", "comma-separated gossip addresses of nodes to join")
	fs.StringVar(&f.voters, "voters", "", "comma-separated names of the founding voters, the same on every node")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "instead of -voters: be one of this many voters (1, 3, 5 or 7) that form the configuration")
	fs.StringVar(&f.profile, "profile", "auto", "timer defaults: lan, local (one machine), or auto (local for a loopback -bind)")
	fs.DurationVar(&f.ttl, "ttl", 0, "default lease TTL; margins scale with it (default: 10s lan, 1s local)")
	fs.DurationVar(&f.maxTTL, "max-ttl", 0, "longest TTL a lock may ask for, and a restarted voter's quarantine (default: -ttl)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "this node's certificate (PEM) for mutual TLS on the ballot transport")
	fs.StringVar(&f.tlsKey, "tls-key", "", "this node's private key (PEM)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "the CA certificate(s) (PEM) that sign the mesh's nodes")
	fs.StringVar(&f.gossipKey, "gossip-key", "", "gossip encryption key, base64 of 16, 24 or 32 bytes (prefer "+envName("gossip-key")+")")
	fs.StringVar(&f.gossipLabel, "gossip-label", "", "label that keeps meshes on one network apart")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory where a voter keeps what it must not forget across restarts (one per node; needed for voter changes)")
	fs.BoolVar(&f.newMesh, "new-mesh", false, "this mesh is brand-new: vote once a majority of the voters says it never voted, rather than every other voter (needs -data-dir; for the first start only: refused once this voter or another has voted)")
	fs.StringVar(&f.http, "http", "", "address for /healthz, /readyz, /status, /metrics, e.g. 127.0.0.1:8080 (default: off)")
	fs.StringVar(&f.socket, "socket", defaultSocket(), "the local API's unix socket")
	fs.StringVar(&f.socketMode, "socket-mode", "0600", "permissions of the socket: 0600 lets only this user in, 0660 its group too")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: trace, debug, info, warn, error, off")
	fs.BoolVar(&f.logJSON, "log-json", false, "logs as JSON lines")
	fs.StringVar(&f.config, "config", "", "JSON configuration file: settings (flag names, underscores for dashes), tokens, limits (see docs/agent.md)")
	fs.StringVar(&f.apiSocket, "api-socket", "", `the HTTP API's unix socket (default: -socket's path with "-http" before ".sock"; "off": none)`)
	fs.StringVar(&f.apiAddr, "api-addr", "", "TCP address of the HTTP API, e.g. 127.0.0.1:8500 (default: off)")
	fs.BoolVar(&f.apiOpen, "api-open", false, "let -api-addr listen on a non-loopback address without any token configured (anyone who reaches it may do anything)")
	fs.StringVar(&f.apiTLS, "api-tls", "auto", "TLS on -api-addr: auto (-api-tls-cert if given, else the mesh's -tls-cert, else none) or off")
	fs.StringVar(&f.apiTLSCert, "api-tls-cert", "", "certificate (PEM) of -api-addr, instead of the mesh's")
	fs.StringVar(&f.apiTLSKey, "api-tls-key", "", "its private key (PEM)")
	c.env = []string{"name", "bind", "advertise", "rpc", "rpc-advertise", "seeds", "voters", "bootstrap-expect",
		"profile", "ttl", "max-ttl", "tls-cert", "tls-key", "tls-ca", "gossip-key", "gossip-label", "data-dir",
		"new-mesh", "http", "socket", "socket-mode", "log-level", "log-json",
		"config", "api-socket", "api-addr", "api-open", "api-tls", "api-tls-cert", "api-tls-key"}
	c.run = func(args []string) error {
		if len(args) > 0 {
			return c.usageError("unexpected arguments %q", args)
		}
		file, err := applyConfigFile(fs, f.config)
		if err != nil {
			return c.usageError("-config: %v", err)
		}
		return runAgent(c, f, file)
	}
	return c
}

// leaveTimeout bounds a graceful leave.
const leaveTimeout = 5 * time.Second

func runAgent(c *command, f agentFlags, file agentFile) error {
	cfg, err := meshConfig(f, firstPrivateIP)
	if err != nil {
		return c.usageError("%v", err)
	}
	plan, err := planAPI(f, file, cfg.Logger)
	if err != nil {
		return c.usageError("%v", err)
	}
	mode, err := strconv.ParseUint(f.socketMode, 8, 32)
	if err != nil || mode&^0o777 != 0 {
		return c.usageError("-socket-mode %q: want octal permissions such as 0600", f.socketMode)
	}
	ln, err := listenSocket(f.socket, os.FileMode(mode))
	if err != nil {
		return fail(exitError, "agent: %v", err)
	}
	defer ln.Close()
	m, err := mesh.New(cfg)
	if err != nil {
		return fail(exitError, "agent: %v", err)
	}
	httpAddr := "off"
	if f.http != "" {
		hs, addr, err := serveHTTP(f.http, m)
		if err != nil {
			m.Shutdown()
			return fail(exitError, "agent: -http: %v", err)
		}
		defer hs.Close()
		httpAddr = addr
	}
	api := newHTTPAPI(m, cfg, plan.limits, plan.acl, cfg.Logger)
	apiSocket, apiAddr, err := plan.listen(api, os.FileMode(mode))
	if err != nil {
		m.Shutdown()
		return fail(exitError, "agent: %v", err)
	}
	defer plan.close()
	st := m.Status()
	fmt.Printf("started name=%s gossip=%s rpc=%s socket=%s http=%s api-socket=%s api=%s\n", st.Name, st.Addr, st.RPCAddr, f.socket, httpAddr, apiSocket, apiAddr)

	srv := newAPIServer(m, cfg)
	go srv.serve(ln)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go announceReady(ctx, m)
	<-ctx.Done()
	stop() // a second signal kills the process
	ln.Close()
	api.close() // every session ends: its leases are released
	lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	err = m.Leave(lctx) // releases every lease: their clients are told "lost"
	srv.close()
	if err != nil {
		m.Shutdown()
		return fail(exitError, "agent: leaving: %v", err)
	}
	fmt.Println("left")
	return nil
}

// listenSocket listens on the unix socket path with the given permissions.
// A socket file left by an agent that died is replaced; one that an agent
// still answers on is not.
func listenSocket(path string, mode os.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another agent is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket: %w", err)
		}
	}
	// The file gets its permissions as it is created (under a umask), so
	// that no one else can connect in between.
	var ln net.Listener
	err := withUmask(0o777&^mode, func() (err error) {
		ln, err = net.Listen("unix", path)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil { // the umask cannot add bits
		ln.Close()
		return nil, err
	}
	return ln, nil
}
