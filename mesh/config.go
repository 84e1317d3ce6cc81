package mesh

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/transport"
)

// Config configures a Mesh. Start from DefaultConfig (a LAN) or
// DefaultLocalConfig (one machine, short timers), change what you need, and
// pass it to New, which checks it with Validate. A Config must not be
// changed once passed to New.
type Config struct {
	// Name identifies this node in the mesh: unique among every node that
	// ever joins it, and stable across restarts of the same replica (a
	// voter is a name). Zero means the host name.
	Name string

	// BindAddr and BindPort are where gossip (memberlist, TCP and UDP)
	// listens. BindPort zero picks a free port (tests; see Status for the
	// one picked). AdvertiseAddr and AdvertisePort, when set, are what
	// other nodes are told to use instead (NAT, containers).
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int

	// RPCAddr is where the ballot transport listens ("host:port"). Empty
	// means BindAddr with port BindPort+1 (or a free port when BindPort is
	// zero). The address peers dial is published in gossip metadata.
	RPCAddr string
	// RPCAdvertise, when set, is the ballot address peers are told to dial.
	RPCAdvertise string

	// Seeds are gossip addresses ("host:port") of nodes to join at start
	// and to rejoin while any of them is missing. Empty: start alone.
	Seeds []string

	// Voters names the nodes whose majority grants locks: the same list on
	// every node (order does not matter), this node included or not. Nodes
	// not listed still take locks; they just do not vote. Set at most one
	// of Voters and BootstrapExpect; a node with neither learns the voter
	// configuration from the voters through gossip.
	Voters []string
	// BootstrapExpect, instead of Voters, makes this node a voter and
	// waits until exactly that many voters (nodes started with the same
	// BootstrapExpect) see each other; their names then become the voter
	// configuration. No lock is granted before. Set the same value (1, 3,
	// 5 or 7) on every voter; use Voters on the other nodes, or nothing
	// (they learn the configuration from the voters).
	BootstrapExpect int

	// Timing sets the default lease TTL and the clock-rate error ρ the
	// mesh is safe under (see package lease). Every node must use the same
	// Drift: nodes refuse to vote with or for a node whose Drift differs
	// from theirs (see Mesh.SettingsMismatches).
	Timing lease.Timing
	// MaxTTL is the longest TTL an Acquire may ask for (WithTTL). A voter
	// that restarts without its state refuses to vote for about this long.
	// Zero means Timing.TTL. Every two nodes' [Timing.TTL, MaxTTL] must
	// overlap, or they refuse each other like nodes of different Drift.
	MaxTTL time.Duration

	// RoundTimeout is how long one ballot round waits for a majority
	// before it is retried. Zero means 250ms (DefaultConfig) or 50ms
	// (DefaultLocalConfig). It must leave time to renew: below the
	// holder's duration less the notice margin.
	RoundTimeout time.Duration

	// RejoinInterval is how often the node rejoins seeds and last-known
	// voters that gossip does not show alive, so that a partition longer
	// than memberlist's dead-node gossip heals by itself. Zero means 30s
	// (DefaultConfig) or 1s (DefaultLocalConfig); negative disables it.
	RejoinInterval time.Duration

	// Autopilot, when set, replaces dead voters and keeps the voter count
	// at a target without an operator (see AutopilotConfig). Set the same
	// on every node that may vote. Nil: voters change only by AddVoter and
	// RemoveVoter.
	Autopilot *AutopilotConfig
	// NoVote keeps this node from ever being made a voter by the
	// autopilot (AddVoter still can).
	NoVote bool

	// MaxKeyLength bounds a lock key in bytes, here and in every message
	// received (a longer one is refused, counted in
	// limit_hits{limit="key_length"}). Zero means 512.
	MaxKeyLength int
	// MaxOpsPerMessage bounds the operations (keys) one ballot message may
	// carry: larger batches are split when sent, and a message carrying more
	// is refused (limit_hits{limit="ops"}). Use the same value on every node.
	// Zero means 16384.
	MaxOpsPerMessage int
	// MaxValueSize bounds a lease's value (WithValue, Lease.SetValue,
	// Campaign), in bytes, here and in every message received (a longer one is
	// refused, counted in limit_hits{limit="value"}). Every renewal carries
	// the value to every voter, so keep it small: an address, an id. Use the
	// same value on every node. Range 1 to 65536; zero means 1024.
	MaxValueSize int

	// TLS, when set, secures the ballot transport (listen and dial) with
	// this configuration as given, and TLSCertFile, TLSKeyFile and
	// TLSCAFile are ignored. Require client certificates for mutual TLS;
	// a dialer's certificate must then name it (its DNS SAN equal to its
	// Name), or its connections are refused. Prefer the file fields, which
	// do all of this.
	TLS *tls.Config
	// TLSCertFile and TLSKeyFile are this node's certificate (PEM; any
	// intermediates after it) and private key; TLSCAFile holds the PEM
	// certificates of the CA(s) that sign the mesh's nodes. Set all three
	// for mutual TLS 1.3 on the ballot transport: both ends of every
	// connection must present a certificate issued by a CA in TLSCAFile,
	// valid now, for both client and server authentication, and the
	// dialer's certificate must name it: a DNS SAN equal to its Name. A
	// node with any other certificate, or none, cannot vote or take locks.
	// The files are re-read when they change (checked at most once a
	// second, at a handshake), so certificates and CAs can be replaced
	// without a restart; see docs/security.md. Empty: no TLS.
	TLSCertFile string
	TLSKeyFile  string
	TLSCAFile   string
	// MaxFrameSize bounds one ballot message on the wire, in bytes; a peer
	// announcing a longer one is disconnected
	// (limit_hits{limit="frame_size"}). Range 1 KiB to 1 GiB. Zero means
	// 4 MiB.
	MaxFrameSize int
	// MaxInflightPerConn bounds the requests a peer may leave unanswered on
	// one connection by not reading the replies: past it the connection is
	// no longer read, and it is closed once its replies make no progress
	// (limit_hits{limit="inflight"}). Zero means 256.
	MaxInflightPerConn int
	// MaxConnsPerPeer bounds the ballot connections open at once from one
	// node; more are closed (limit_hits{limit="conns"}). Zero means 16.
	MaxConnsPerPeer int
	// MaxInboundConns bounds the ballot connections open at once in all,
	// handshaking ones included; more are closed (limit_hits{limit="conns"}).
	// Zero means 1024.
	MaxInboundConns int
	// MaxBytesInFlight bounds, in bytes, what the ballot transport holds of
	// frames at once over all its connections (bodies being received or
	// handled, replies not yet written): a frame that does not fit waits,
	// unread, and is refused (its connection closed,
	// limit_hits{limit="memory"}) if its FrameTimeout runs out first. It
	// bounds the memory a flood of connections can pin. At least MaxFrameSize,
	// at most 1 TiB. Zero means 64 MiB (or MaxFrameSize, if larger).
	MaxBytesInFlight int
	// FrameTimeout bounds the time from a ballot message's first byte to its
	// last: a peer trickling bytes is cut off
	// (limit_hits{limit="slow_frame"}). Keep it above MaxFrameSize over the
	// slowest link's bandwidth. Zero means 10s.
	FrameTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake and hello of an incoming
	// ballot connection (limit_hits{limit="handshake"}). Zero means 5s (1s in
	// DefaultLocalConfig).
	HandshakeTimeout time.Duration
	// IdleTimeout closes an incoming ballot connection that carried nothing
	// for this long (limit_hits{limit="idle"}, normal for quiet peers). Use
	// the same value on every node. Zero means 2 minutes.
	IdleTimeout time.Duration

	// GossipKey encrypts and authenticates gossip (memberlist's primary
	// keyring key, AES-GCM): 16, 24 or 32 bytes for AES-128, -192 or -256, the
	// same on every node. A node without it, or with another key, never joins:
	// its gossip is dropped (gossip_refused{reason="key"}). Empty means gossip
	// in the clear. It overrides Memberlist.SecretKey and Keyring.
	GossipKey []byte
	// GossipKeys are more keys that gossip is accepted under (never sent
	// under), for rotation; see Mesh.InstallGossipKey. Each 16, 24 or 32
	// bytes. They need GossipKey.
	GossipKeys [][]byte
	// GossipLabel is prefixed to every gossip packet and stream, and
	// authenticated with GossipKey when there is one; gossip with another
	// label (or none) is dropped (gossip_refused{reason="label"}). It keeps
	// meshes that share a network apart, e.g. "payments-prod". Up to 255
	// bytes; empty means none. It overrides Memberlist.Label.
	GossipLabel string

	// Logger receives the mesh's logs, memberlist's included; for a
	// *slog.Logger, use SlogLogger(l). WARN and ERROR are for what an
	// operator must act on; a restart, a join or a leave logs at INFO or
	// DEBUG. Nil means silent.
	Logger hclog.Logger
	// MetricSink receives the mesh's metrics (acquire and renew durations,
	// leases held and lost, quorum failures, messages and bytes), each
	// under its family's name, labelled with the node name and the
	// family's label (docs/metrics.md). Nil means none; Mesh.Collector
	// serves Prometheus either way. (memberlist reports to go-metrics'
	// global instance; point it at the same sink with metrics.NewGlobal to
	// see both.)
	MetricSink metrics.MetricSink

	// Memberlist, when set, is used as the base gossip configuration
	// (encryption keys, labels, probe timing). Name, addresses, delegates
	// and logger are set by the mesh.
	Memberlist *memberlist.Config

	// Transport, when set, builds the ballot transport instead of TCP; the
	// mesh passes its handler. Tests use it to run over an in-memory
	// network with faults. The transport must keep the rule of
	// transport.Transport: a body passed to Call, Send or Go is not read
	// after the method returns. The mesh reuses a request's buffer for the
	// next request at once.
	Transport func(name string, h transport.Handler) (transport.Transport, error)

	// Seed seeds the mesh's random source (retry jitter). Zero means the
	// time.
	Seed int64

	// DataDir, when set, is a directory (created if missing, one per
	// node) where a voter keeps the little it must not forget across
	// restarts: whether it ever voted, its voter configuration, and marks
	// above every fencing token and ballot it saw (see datadir.go). With
	// it, a brand-new mesh needs no quarantine (see NewMesh), a full
	// restart comes back with a majority of the voters, tokens
	// never depend on wall clocks, and voters can be added and removed
	// (which needs a data directory on every voter). Without it, state
	// lives in memory. Locks themselves stay in memory either way.
	DataDir string

	// NewMesh is the operator's word that this mesh is brand-new: no
	// voter of it has ever voted. Set it only to found a mesh whose voters
	// cannot all start together, and only for that first start; it needs
	// DataDir.
	//
	// A voter on an empty data directory cannot tell a brand-new mesh
	// from a wipe of its own directory (a deleted volume, a re-imaged
	// machine): either way it finds nothing. So without NewMesh it votes
	// at once only when so many other voters say they never voted that
	// no majority can have voted without one of them (with 3 voters, both
	// others; with 5, three of the other four); otherwise it waits out a
	// quarantine and catches up, as a voter without a data directory
	// does. With NewMesh it also votes at once when a majority, itself
	// included, says it never voted. New refuses NewMesh once this node's
	// data directory shows that it voted, and a voter that hears another
	// say it voted ignores it (Status().Waiting.NewMeshRefused, and an
	// ERROR log line). Left set after the first start, it would turn a
	// wiped directory's emptiness back into evidence: remove it.
	NewMesh bool

	// WallClock, when set, is the wall clock the fencing tokens' floor
	// and the node's incarnation read instead of time.Now (the mesh's
	// other timing uses the monotonic clock only). Tests set it back to
	// show that with a data directory tokens do not depend on it, and that
	// a restart is recognised whichever way the clock moved.
	WallClock func() time.Time
	// Clock, when set, is a clock the test moves ahead at once: the
	// node's leases, rounds and timers read the process's monotonic clock
	// plus how far Clock moved since New (see Clock). Nodes may share one.
	// Nil means the process's clock alone, which production wants.
	Clock *Clock

	local bool // DefaultLocalConfig: smaller defaults
	// maxVersion, when set (tests only), makes the node speak protocol
	// versions up to it only, as a node of an earlier release would.
	maxVersion int
}

// DefaultConfig returns settings for a mesh spread over a LAN: gossip on
// port 7946, ballots on 7947, a 10-second lease TTL, 1% clock-rate error.
func DefaultConfig() *Config {
	host, _ := os.Hostname()
	return &Config{
		Name:     host,
		BindAddr: "0.0.0.0",
		BindPort: 7946,
		Timing:   lease.DefaultTiming(),
	}
}

// DefaultLocalConfig returns settings for nodes on one machine (loopback):
// free ports, a 1-second TTL and short timers. Use it for tests and demos.
func DefaultLocalConfig() *Config {
	host, _ := os.Hostname()
	return &Config{
		Name:     host,
		BindAddr: "127.0.0.1",
		BindPort: 0,
		Timing:   lease.LocalTiming(),
		local:    true,
	}
}

// Validate reports what is wrong with c, if anything. It neither changes c
// nor panics.
func (c *Config) Validate() error {
	if c == nil {
		return fmt.Errorf("%w: nil config", ErrInvalidConfig)
	}
	if c.Name == "" {
		return fmt.Errorf("%w: no node name", ErrInvalidConfig)
	}
	if len(c.Name) > 255 {
		return fmt.Errorf("%w: node name of %d bytes (limit 255)", ErrInvalidConfig, len(c.Name))
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return fmt.Errorf("%w: port out of range", ErrInvalidConfig)
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("%w: BindAddr %q is not an IP address", ErrInvalidConfig, c.BindAddr)
	}
	if c.RPCAddr != "" {
		if _, _, err := net.SplitHostPort(c.RPCAddr); err != nil {
			return fmt.Errorf("%w: RPCAddr %q: %v", ErrInvalidConfig, c.RPCAddr, err)
		}
	}
	switch {
	case len(c.Voters) > 0 && c.BootstrapExpect > 0:
		return fmt.Errorf("%w: set Voters or BootstrapExpect, not both", ErrInvalidConfig)
	case c.BootstrapExpect < 0 || c.BootstrapExpect > maxVoters:
		return fmt.Errorf("%w: BootstrapExpect %d outside [1, %d]", ErrInvalidConfig, c.BootstrapExpect, maxVoters)
	case len(c.Voters) > maxVoters:
		return fmt.Errorf("%w: %d voters (limit %d)", ErrInvalidConfig, len(c.Voters), maxVoters)
	}
	seen := make(map[string]bool, len(c.Voters))
	for _, v := range c.Voters {
		if v == "" || seen[v] {
			return fmt.Errorf("%w: voter %q empty or listed twice", ErrInvalidConfig, v)
		}
		seen[v] = true
	}
	if v, ok := c.misspeltVoter(); ok {
		return fmt.Errorf("%w: Name %q is not among Voters %q, but voter %q differs from it only in case or spaces: names are compared exactly, so this node would never vote",
			ErrInvalidConfig, c.Name, c.Voters, v)
	}
	if err := c.Timing.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Timing.NoticeMargin <= 0 {
		// C3: a holder is told of a loss before its deadline, not at it.
		return fmt.Errorf("%w: Timing.NoticeMargin must be positive", ErrInvalidConfig)
	}
	if c.MaxTTL != 0 && c.MaxTTL < c.Timing.TTL {
		return fmt.Errorf("%w: MaxTTL %v below the default TTL %v", ErrInvalidConfig, c.MaxTTL, c.Timing.TTL)
	}
	if c.MaxTTL > lease.MaxTTL {
		return fmt.Errorf("%w: MaxTTL %v above %v", ErrInvalidConfig, c.MaxTTL, lease.MaxTTL)
	}
	if rt := c.roundTimeout(); rt <= 0 || rt >= c.Timing.HolderTTL()-c.Timing.NoticeMargin {
		return fmt.Errorf("%w: round timeout %v leaves no time to renew a lease of %v (notice %v)",
			ErrInvalidConfig, rt, c.Timing.HolderTTL(), c.Timing.NoticeMargin)
	}
	if err := c.Autopilot.validate(); err != nil {
		return err
	}
	if c.NewMesh && c.DataDir == "" {
		return fmt.Errorf("%w: NewMesh needs a DataDir: without one, every voter of a new mesh must answer before it votes", ErrInvalidConfig)
	}
	if c.Autopilot != nil && c.DataDir == "" {
		return fmt.Errorf("%w: Autopilot changes voters, and voter changes need a DataDir on every voter", ErrInvalidConfig)
	}
	if c.MaxKeyLength < 0 || c.MaxOpsPerMessage < 0 || c.MaxFrameSize < 0 {
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	}
	if c.MaxValueSize < 0 || c.MaxValueSize > maxValueSize {
		return fmt.Errorf("%w: MaxValueSize %d outside [1, %d] (0: %d)", ErrInvalidConfig, c.MaxValueSize, maxValueSize, wire.DefaultMaxValueLen)
	}
	return c.validateSecurity()
}

// Warnings says what in c is allowed but often a mistake, one sentence
// each; New logs them at startup. Today: a Name that is not among Voters
// (the node then takes locks but does not vote; right for a node that
// AddVoter will add later, wrong for a misspelt voter, which leaves its
// mesh a voter short), unless NoVote says the node is not meant to vote.
// Validate refuses the certain mistakes.
func (c *Config) Warnings() []string {
	if c == nil || c.NoVote || len(c.Voters) == 0 || slices.Contains(c.Voters, c.Name) {
		return nil
	}
	return []string{fmt.Sprintf("this node's Name %q is not among Voters %q: it will take locks but not vote "+
		"(expected on a node to be added later by AddVoter; otherwise check its Name, which must match one of Voters exactly)",
		c.Name, c.Voters)}
}

// misspeltVoter returns a voter that differs from Name only in case or
// surrounding spaces, when Name itself is not a voter.
func (c *Config) misspeltVoter() (string, bool) {
	if slices.Contains(c.Voters, c.Name) {
		return "", false
	}
	name := strings.TrimSpace(c.Name)
	for _, v := range c.Voters {
		if strings.EqualFold(strings.TrimSpace(v), name) {
			return v, true
		}
	}
	return "", false
}

// maxVoters bounds a voter configuration: beyond 7, every grant waits on
// more round trips than a lock is worth.
const maxVoters = wire.MaxVoters

func (c *Config) roundTimeout() time.Duration {
	switch {
	case c.RoundTimeout != 0:
		return c.RoundTimeout
	case c.local:
		return 50 * time.Millisecond
	}
	return 250 * time.Millisecond
}

func (c *Config) rejoinInterval() time.Duration {
	switch {
	case c.RejoinInterval != 0:
		return c.RejoinInterval
	case c.local:
		return time.Second
	}
	return 30 * time.Second
}

// maxValueSize bounds Config.MaxValueSize: every renewal carries the
// value, to every voter.
const maxValueSize = 64 << 10

func (c *Config) maxValueSize() int {
	if c.MaxValueSize > 0 {
		return c.MaxValueSize
	}
	return wire.DefaultMaxValueLen
}

// maxFrameSize is the ballot transport's frame limit (MaxFrameSize, or
// the transport's default).
func (c *Config) maxFrameSize() int {
	if c.MaxFrameSize > 0 {
		return c.MaxFrameSize
	}
	return transport.DefaultMaxFrameSize
}

func (c *Config) maxTTL() time.Duration {
	if c.MaxTTL != 0 {
		return c.MaxTTL
	}
	return c.Timing.TTL
}

func (c *Config) limits() limits {
	l := limits{wire.Limits{MaxOps: c.MaxOpsPerMessage, MaxKeyLen: c.MaxKeyLength, MaxKeys: 1 << 16, MaxEntries: 1 << 16,
		MaxValueLen: c.maxValueSize()}}
	if l.MaxOps == 0 {
		l.MaxOps = 16384
	}
	if l.MaxKeyLen == 0 {
		l.MaxKeyLen = 512
	}
	return l
}

// rpcBind is where the ballot transport listens.
func (c *Config) rpcBind(gossipPort int) string {
	if c.RPCAddr != "" {
		return c.RPCAddr
	}
	host := c.BindAddr
	if host == "" {
		host = "0.0.0.0"
	}
	port := 0
	if c.BindPort != 0 {
		port = c.BindPort + 1
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
