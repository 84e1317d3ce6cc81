package mesh

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/transport"
)

// Who may take part in a mesh, see docs/security.md: the ballot transport admits
// holders of a certificate from the mesh's CA (tlsfiles.go), gossip admits
// holders of the gossip key and label (below), and everything read from the
// network is bounded (limits.go).

// validateSecurity checks the TLS, gossip and limit fields.
func (c *Config) validateSecurity() error {
	files := 0
	for _, f := range []string{c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile} {
		if f != "" {
			files++
		}
	}
	if files != 0 && files != 3 {
		return fmt.Errorf("%w: set all of TLSCertFile, TLSKeyFile and TLSCAFile, or none", ErrInvalidConfig)
	}
	if len(c.GossipKey) > 0 {
		if err := memberlist.ValidateKey(c.GossipKey); err != nil {
			return fmt.Errorf("%w: GossipKey: %w", ErrInvalidConfig, err)
		}
	}
	if len(c.GossipKeys) > 0 && len(c.GossipKey) == 0 {
		return fmt.Errorf("%w: GossipKeys without a GossipKey", ErrInvalidConfig)
	}
	for i, k := range c.GossipKeys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("%w: GossipKeys[%d]: %w", ErrInvalidConfig, i, err)
		}
	}
	if len(c.GossipLabel) > memberlist.LabelMaxSize {
		return fmt.Errorf("%w: GossipLabel of %d bytes (limit %d)", ErrInvalidConfig, len(c.GossipLabel), memberlist.LabelMaxSize)
	}
	if c.MaxBytesInFlight < 0 || (c.MaxBytesInFlight > 0 && c.MaxBytesInFlight < max(c.MaxFrameSize, 1)) || c.MaxBytesInFlight > 1<<40 {
		return fmt.Errorf("%w: MaxBytesInFlight %d outside [MaxFrameSize, 1 TiB]", ErrInvalidConfig, c.MaxBytesInFlight)
	}
	if c.MaxInflightPerConn < 0 || c.MaxConnsPerPeer < 0 || c.MaxInboundConns < 0 {
		return fmt.Errorf("%w: negative connection limit", ErrInvalidConfig)
	}
	if c.FrameTimeout < 0 || c.HandshakeTimeout < 0 || c.IdleTimeout < 0 {
		return fmt.Errorf("%w: negative ballot transport timeout", ErrInvalidConfig)
	}
	return nil
}

// secureTransport applies the TLS and limit fields to the ballot
// transport's configuration.
func (m *Mesh) secureTransport(tc *transport.TCPConfig) error {
	c := &m.cfg
	switch {
	case c.TLS != nil:
		tc.TLS = c.TLS
		if c.TLSCertFile != "" {
			m.log.Warn("both TLS and TLSCertFile are set; using TLS and ignoring the files")
		}
	case c.TLSCertFile != "":
		cfg, err := tlsFromFiles(c, m.log.Named("tls"))
		if err != nil {
			return err
		}
		tc.TLS = cfg
	}
	set := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	set(&tc.MaxFrameSize, c.MaxFrameSize)
	set(&tc.MaxInflightPerConn, c.MaxInflightPerConn)
	set(&tc.MaxConnsPerPeer, c.MaxConnsPerPeer)
	set(&tc.MaxInboundConns, c.MaxInboundConns)
	tc.MaxBytesInFlight = c.MaxBytesInFlight // zero: the transport's default, at least MaxFrameSize
	setD := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	setD(&tc.FrameTimeout, c.FrameTimeout)
	setD(&tc.HandshakeTimeout, c.HandshakeTimeout)
	setD(&tc.IdleTimeout, c.IdleTimeout)
	tc.OnError = m.transportRefused
	return nil
}

// secureGossip applies GossipKey, GossipKeys and GossipLabel to
// memberlist's configuration, and routes memberlist's log through
// gossipLog so that refused gossip is counted.
func (m *Mesh) secureGossip(mc *memberlist.Config) error {
	if len(m.cfg.GossipKey) > 0 {
		keys := make([][]byte, len(m.cfg.GossipKeys))
		for i, k := range m.cfg.GossipKeys {
			keys[i] = slices.Clone(k)
		}
		kr, err := memberlist.NewKeyring(keys, slices.Clone(m.cfg.GossipKey))
		if err != nil {
			return fmt.Errorf("%w: gossip keyring: %w", ErrInvalidConfig, err)
		}
		mc.Keyring, mc.SecretKey = kr, nil
	}
	if m.cfg.GossipLabel != "" {
		mc.Label = m.cfg.GossipLabel
	}
	m.keyring = mc.Keyring
	out := m.log.Named("memberlist").StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	mc.Logger = log.New(gossipLog{m: m, out: out}, "", 0)
	mc.LogOutput = nil
	return nil
}

// InstallGossipKey adds key (16, 24 or 32 bytes) to this node's gossip
// keyring: gossip sent under it is accepted from now on, while this node
// keeps sending under its primary key. It needs gossip encryption
// (Config.GossipKey); encryption cannot be turned on at run time.
//
// Rotation is up to the application, which must reach every node (an admin
// endpoint, a deployment): install the new key on every node, then make it
// primary on every node (UseGossipKey), then remove the old key everywhere
// (RemoveGossipKey). At each step every node can read what every other
// sends. Put the new key in Config.GossipKey (and the old in GossipKeys,
// until removed) for the next restart.
func (m *Mesh) InstallGossipKey(key []byte) error {
	if m.keyring == nil {
		return ErrGossipNotEncrypted
	}
	if err := m.keyring.AddKey(slices.Clone(key)); err != nil {
		return fmt.Errorf("mesh: installing a gossip key: %w", err)
	}
	m.log.Info("installed a gossip key", "keys", len(m.keyring.GetKeys()))
	return nil
}

// UseGossipKey makes an installed key the one this node sends gossip
// under. See InstallGossipKey.
func (m *Mesh) UseGossipKey(key []byte) error {
	if m.keyring == nil {
		return ErrGossipNotEncrypted
	}
	if err := m.keyring.UseKey(key); err != nil {
		return fmt.Errorf("mesh: using a gossip key: %w", err)
	}
	m.log.Info("sending gossip under a new primary key")
	return nil
}

// RemoveGossipKey removes a key that is not the primary one from this
// node's keyring: gossip under it is dropped from now on. See
// InstallGossipKey.
func (m *Mesh) RemoveGossipKey(key []byte) error {
	if m.keyring == nil {
		return ErrGossipNotEncrypted
	}
	if err := m.keyring.RemoveKey(key); err != nil {
		return fmt.Errorf("mesh: removing a gossip key: %w", err)
	}
	m.log.Info("removed a gossip key", "keys", len(m.keyring.GetKeys()))
	return nil
}

// GossipKeys returns copies of the keys of this node's gossip keyring, the
// primary key first; nil when gossip is not encrypted.
func (m *Mesh) GossipKeys() [][]byte {
	if m.keyring == nil {
		return nil
	}
	primary := m.keyring.GetPrimaryKey()
	out := [][]byte{slices.Clone(primary)}
	for _, k := range m.keyring.GetKeys() {
		if !bytes.Equal(k, primary) {
			out = append(out, slices.Clone(k))
		}
	}
	return out
}

// gossipLog passes memberlist's log lines on, and counts (and says in our
// own words) the ones that report gossip dropped for its key or its label:
// memberlist reports those only in its log. The phrases are memberlist
// v0.7's; a test of a wrong gossip key notices if they change.
type gossipLog struct {
	m   *Mesh
	out io.Writer
}

var (
	gossipKeyPhrases = []string{
		"No installed keys could decrypt", "no installed keys could decrypt",
		"encryption is configured but remote state is not encrypted",
		"remote state is encrypted and encryption is not configured",
		"Decrypt packet failed",
	}
	gossipLabelPhrases = []string{"unacceptable label", "stream label header"}
)

func (g gossipLog) Write(p []byte) (int, error) {
	line := string(p)
	switch {
	case strings.Contains(line, "ignoring alive message for"):
		// Refused by checkAlive, which logs (rate-limited) what matters.
		return len(p), nil
	case containsAny(line, gossipKeyPhrases):
		g.m.incr("gossip.refused.key", 1)
		if g.m.noisy.allow("gossip key") {
			g.m.log.Warn("dropping gossip from a node without this mesh's gossip key (another GossipKey, or none); it cannot join")
		}
	case containsAny(line, gossipLabelPhrases):
		g.m.incr("gossip.refused.label", 1)
		if g.m.noisy.allow("gossip label") {
			g.m.log.Warn("dropping gossip from a node with another GossipLabel; it cannot join", "ours", g.m.cfg.GossipLabel)
		}
	default:
		if l, ok := relevel(line); ok {
			_, err := g.out.Write([]byte(l))
			return len(p), err
		}
	}
	return g.out.Write(p)
}

// gossipLevels are the levels memberlist's lines about routine peer
// failures are logged at, by the start of their text. A peer that is down,
// restarting or slow makes memberlist log [ERR] on each probe, gossip and
// push/pull that fails, though its failure detector deals with it and says
// what it concluded ("Suspect ... has failed", "Marking ... as failed",
// INFO). Other lines keep memberlist's level: decoding failures, a node
// without the gossip key, address conflicts stay errors.
var gossipLevels = []struct{ prefix, level string }{
	// A probe of a peer that does not answer: the failure detector's
	// business.
	{"Failed fallback TCP ping", "[DEBUG]"},
	{"Failed to send UDP ping", "[DEBUG]"},
	{"Failed to send UDP compound ping", "[DEBUG]"},
	{"Failed to send indirect UDP ping", "[DEBUG]"},
	{"Failed to send indirect ping", "[DEBUG]"},
	{"Failed to forward ack", "[DEBUG]"},
	{"Failed to send nack", "[DEBUG]"},
	{"Failed to send ack", "[DEBUG]"},
	// Gossip to a peer that is gone (memberlist keeps trying for
	// GossipToTheDeadTime).
	{"Failed to send gossip to", "[DEBUG]"},
	// A state exchange with a peer that went away half way: worth a
	// warning if it lasts, not an error.
	{"Push/Pull with", "[WARN]"},
	{"Failed to read remote state", "[WARN]"},
	{"Failed to push local state", "[WARN]"},
	{"failed to receive: ", "[WARN]"},
	{"Failed to receive user message", "[WARN]"},
	// Another node suspected this one, which answered: routine under load.
	{"Refuting a suspect message", "[INFO]"},
	// Word of this node's death, or of its earlier process alive, from
	// that process (which left) or from a peer that has not yet heard of
	// the restart: routine as a node restarts under its name, and answered.
	{"Refuting a dead message", "[INFO]"},
	{"Refuting an alive message", "[INFO]"},
}

// relevel returns line at the level gossipLevels gives it, if any.
func relevel(line string) (string, bool) {
	lvl, rest, ok := strings.Cut(line, " memberlist: ")
	if !ok || !strings.HasPrefix(lvl, "[") {
		return "", false
	}
	for _, g := range gossipLevels {
		if strings.HasPrefix(rest, g.prefix) {
			return g.level + " memberlist: " + rest, true
		}
	}
	return "", false
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
