package mesh

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/transport"
)

// Nodes agree on what safety depends on (design.md R93). A node tells the
// others its wire.Settings in its gossip metadata and in the transport
// hello (both ways: a listener answers a dialer's hello with its own), and
// refuses a ballot connection, as dialer or as listener, with a peer whose
// settings would break exclusion (C1):
//
//   - protocol versions: the two ranges must overlap (they then speak the
//     highest version both know);
//   - Timing.Drift (ρ) must be equal: a holder computes its deadline with
//     its own ρ, an acceptor times its exclusion and its quarantine with
//     its own; a holder that assumes a smaller ρ than its acceptors' clocks
//     may err by acts beyond the exclusion they keep;
//   - the TTL bounds [Timing.TTL, MaxTTL] must overlap: each node's default
//     lease is one the other grants and votes for. (Unequal MaxTTLs are
//     otherwise safe: a voter refuses an accept longer than its own MaxTTL,
//     and a restarted voter learns the longest lease others protect in
//     catch-up, CatchUpResponse.Horizon.)
//
// Refused, the two never vote with or for each other: no ballot, answer,
// notification or push passes between them. It is counted in
// rpc.refused_settings, logged at error level (once a minute per peer), and
// listed by SettingsMismatches. A node of protocol version 1 says nothing of
// its settings: it is taken as it is (only its version is judged), as its
// own checks were before version 2, unless its gossip metadata speaks for it.

// errSettings refuses a peer whose settings would break exclusion.
var errSettings = errors.New("mesh: a peer's settings would break exclusion (C1)")

// SettingsMismatch is a setting of a peer this node refuses to vote with
// or for (or would, if they connected), and why.
type SettingsMismatch struct {
	// Peer is the other node's name.
	Peer string
	// What names the setting: "protocol version", "Timing.Drift" or "TTL"
	// (the bounds [Timing.TTL, MaxTTL]).
	What string
	// Ours and Theirs are the setting's values here and there.
	Ours, Theirs string
	// Via says how it was learned: "hello" (a ballot connection was
	// refused) or "gossip" (the peer's gossip metadata).
	Via string
	// Seen is when it was last seen.
	Seen time.Time
}

func (s SettingsMismatch) String() string {
	return fmt.Sprintf("%s is %s here and %s at %s", s.What, s.Ours, s.Theirs, s.Peer)
}

// settingsHold is how long a refusal seen in a hello stays listed after
// it was last seen (a peer that went away, or never dialed again).
const settingsHold = time.Minute

// refusals holds the mismatches seen in hellos, by peer.
type refusals struct {
	mu   sync.Mutex
	peer map[string][]SettingsMismatch
}

// settings are this node's.
func (m *Mesh) settings() wire.Settings {
	return wire.Settings{Versions: m.supported(), Drift: m.cfg.Timing.Drift, TTL: m.cfg.Timing.TTL, MaxTTL: m.cfg.maxTTL()}
}

// mismatches returns what in theirs would break exclusion beside ours;
// timing is false when theirs says nothing but the versions (a node of
// version 1).
func mismatches(ours, theirs wire.Settings, timing bool) []SettingsMismatch {
	var out []SettingsMismatch
	if _, ok := ours.Versions.Common(theirs.Versions); !ok {
		out = append(out, SettingsMismatch{What: "protocol version", Ours: ours.Versions.String(), Theirs: theirs.Versions.String()})
	}
	if !timing {
		return out
	}
	if ours.Drift != theirs.Drift {
		out = append(out, SettingsMismatch{What: "Timing.Drift", Ours: fmt.Sprint(ours.Drift), Theirs: fmt.Sprint(theirs.Drift)})
	}
	if max(ours.TTL, theirs.TTL) > min(ours.MaxTTL, theirs.MaxTTL) {
		out = append(out, SettingsMismatch{What: "TTL",
			Ours: fmt.Sprintf("%v to %v", ours.TTL, ours.MaxTTL), Theirs: fmt.Sprintf("%v to %v", theirs.TTL, theirs.MaxTTL)})
	}
	return out
}

// settingsTransport makes the ballot transport carry this node's settings
// in its hellos and judge its peers' (a hook of startTransport).
func (m *Mesh) settingsTransport(tc *transport.TCPConfig) {
	tc.Hello = wire.EncodeSettings(m.settings())
	tc.CheckHello = m.checkHello
	tc.HelloVersion = m.helloVersion
}

// checkHello is the ballot transport's CheckHello: it judges a peer by
// its hello, on every ballot connection, dialed or accepted.
func (m *Mesh) checkHello(peer string, version int, payload []byte) error {
	if version < wire.Version2 || len(payload) == 0 {
		// A node of version 1, or one of version 2 that took this node
		// for one of version 1 (gossip had not shown it yet), or whose
		// transport the mesh did not configure (Config.Transport): its
		// gossip metadata speaks for it, if it says anything.
		if meta, ok := m.book.peerMeta(peer); ok {
			if theirs, ok := meta.Settings(); ok {
				return m.judge(peer, theirs, true)
			}
		}
		return m.judge(peer, wire.Settings{Versions: wire.Legacy}, false)
	}
	theirs, err := wire.DecodeSettings(payload)
	if err != nil {
		m.incr("rpc.malformed", 1)
		if m.noisy.allow("malformed hello " + peer) {
			m.log.Warn("refusing a ballot connection: its hello is malformed", "peer", peer, "error", err)
		}
		return err
	}
	return m.judge(peer, theirs, true)
}

// judge refuses a peer whose settings would break exclusion: it counts,
// logs and records the refusal, and returns an error naming both values.
func (m *Mesh) judge(peer string, theirs wire.Settings, timing bool) error {
	diffs := mismatches(m.settings(), theirs, timing)
	now := time.Now()
	m.refused.mu.Lock()
	if len(diffs) == 0 {
		delete(m.refused.peer, peer)
		m.refused.mu.Unlock()
		return nil
	}
	if m.refused.peer == nil {
		m.refused.peer = make(map[string][]SettingsMismatch)
	}
	text := make([]string, len(diffs))
	for i := range diffs {
		diffs[i].Peer, diffs[i].Via, diffs[i].Seen = peer, "hello", now
		text[i] = diffs[i].String()
	}
	if len(m.refused.peer) < maxVets || m.refused.peer[peer] != nil {
		m.refused.peer[peer] = diffs
	}
	m.refused.mu.Unlock()
	m.incr("rpc.refused_settings", 1)
	why := strings.Join(text, "; ")
	if m.noisy.allow("settings " + peer) {
		m.log.Error("REFUSING A PEER whose settings would break exclusion (C1): the two nodes do not vote with or for each other "+
			"until they agree (every node must use the same Timing.Drift, TTL bounds that overlap, and protocol versions that overlap)",
			"peer", peer, "mismatch", why)
	}
	return fmt.Errorf("%w: %s", errSettings, why)
}

// SettingsMismatches lists the settings of peers that would break
// exclusion beside this node's (design.md R93): peers whose ballot
// connections this node refused in the last minute (Via "hello"), and live
// peers whose gossip metadata shows such settings (Via "gossip"), by peer
// and setting. While a peer is listed, the two do not vote with or for
// each other. Empty when every node agrees.
func (m *Mesh) SettingsMismatches() []SettingsMismatch {
	now := time.Now()
	var out []SettingsMismatch
	m.refused.mu.Lock()
	for peer, diffs := range m.refused.peer {
		if now.Sub(diffs[0].Seen) > settingsHold {
			delete(m.refused.peer, peer)
			continue
		}
		out = append(out, diffs...)
	}
	m.refused.mu.Unlock()
	ours := m.settings()
	for _, p := range m.book.snapshot() {
		theirs, ok := p.meta.Settings()
		if p.state != "alive" || !ok || p.name == m.cfg.Name {
			continue
		}
		for _, d := range mismatches(ours, theirs, true) {
			if !slices.ContainsFunc(out, func(o SettingsMismatch) bool { return o.Peer == p.name && o.What == d.What }) {
				d.Peer, d.Via, d.Seen = p.name, "gossip", now
				out = append(out, d)
			}
		}
	}
	slices.SortFunc(out, func(a, b SettingsMismatch) int {
		if c := strings.Compare(a.Peer, b.Peer); c != 0 {
			return c
		}
		return strings.Compare(a.What, b.What)
	})
	return out
}

// peerVersion is the protocol version to speak to node: the highest both
// speak, by its gossip metadata; 1 for a node whose metadata says nothing
// of it (or that gossip has not shown).
func (m *Mesh) peerVersion(node string) int {
	meta, ok := m.book.peerMeta(node)
	if !ok {
		return wire.Version1
	}
	theirs, _ := meta.Settings()
	if v, ok := m.supported().Common(theirs.Versions); ok {
		return v
	}
	return wire.Version1
}

// helloVersion is the ballot transport's HelloVersion: a node whose gossip
// metadata names its versions takes a hello of version 2 (even one whose
// versions do not overlap ours, so that both sides say why they refuse);
// any other gets the first hello, which every version takes.
func (m *Mesh) helloVersion(node string) int {
	if meta, ok := m.book.peerMeta(node); ok {
		if _, ok := meta.Settings(); ok {
			return wire.Version2
		}
	}
	return wire.Version1
}

// peerMeta returns what gossip last showed of name.
func (b *book) peerMeta(name string) (nodeMeta, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[name]
	if p == nil {
		return nodeMeta{}, false
	}
	return p.meta, true
}

// settingsMismatchesWith is what SettingsMismatches lists for one peer,
// its Whats in order, without a copy of the whole book: readiness asks it
// of every voter after every probe answer.
func (m *Mesh) settingsMismatchesWith(peer string) []string {
	var whats []string
	m.refused.mu.Lock()
	if diffs := m.refused.peer[peer]; len(diffs) > 0 && time.Since(diffs[0].Seen) <= settingsHold {
		for _, d := range diffs {
			whats = append(whats, d.What)
		}
	}
	m.refused.mu.Unlock()
	if p, ok := m.book.get(peer); ok && p.state == "alive" && peer != m.cfg.Name {
		if theirs, ok := p.meta.Settings(); ok {
			for _, d := range mismatches(m.settings(), theirs, true) {
				if !slices.Contains(whats, d.What) {
					whats = append(whats, d.What)
				}
			}
		}
	}
	slices.Sort(whats)
	return whats
}
