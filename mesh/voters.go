package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
)

// Voter changes. The configuration is a register of the voters themselves
// (package quorum, "Changing the voters"): AddVoter and RemoveVoter run a
// change through this node's proposer and wait for it. The rest of this file
// spreads what was decided: every node's proposer and acceptor adopt the
// newest configuration either of them has heard of (each was chosen by a
// majority, so adopting it is safe), gossip metadata carries its id, and a
// node that sees a newer id on a peer fetches the configuration from it.

// Configuration is a voter configuration as a node knows it.
type Configuration struct {
	// ID names the configuration: the mesh (fixed at its founding) and a
	// version that every change raises.
	ID      uint64
	Version uint64
	// Voters are the nodes whose majority grants locks.
	Voters []string
	// Pending is set while a change is being settled (keys are being
	// moved into the new voters); Previous are then the voters before it.
	// The next change waits for, or finishes, this one.
	Pending  bool
	Previous []string
	// Retired are the nodes removed from the voters; their names never
	// vote again in this mesh.
	Retired []string
}

func configuration(m quorum.Membership) Configuration {
	c := Configuration{ID: m.ID, Version: m.Version(), Pending: m.Pending}
	for _, v := range m.Voters {
		c.Voters = append(c.Voters, string(v))
	}
	for _, v := range m.Prev {
		c.Previous = append(c.Previous, string(v))
	}
	for _, v := range m.Retired {
		c.Retired = append(c.Retired, string(v))
	}
	return c
}

var (
	// ErrUnknownNode: AddVoter named a node that gossip does not show
	// alive (it must be running and joined, so that it can vote at once).
	ErrUnknownNode = errors.New("mesh: unknown node")
	// ErrBadVoterChange: a voter change that is not allowed: a retired
	// name, the last voter, or another change already running on this
	// node.
	ErrBadVoterChange = errors.New("mesh: voter change not allowed")
)

// Voters returns the voter configuration this node knows of (the newest it
// has heard of; another node may know a newer one for a moment).
func (m *Mesh) Voters() (Configuration, error) {
	v := m.current.Load()
	if v == nil {
		return Configuration{}, ErrNoVoters
	}
	return configuration(*v), nil
}

// AddVoter makes the named node a voter, and returns once the change is in
// effect. The node must be running and joined (alive in gossip): it starts
// voting at once, with no quarantine, because the configuration records
// which incarnation of it was added. Any node may call it, voter or not.
// Adding a node that is a voter already does nothing.
//
// A change keeps every majority of the old voters meeting every majority of
// the new ones, so locks stay safe throughout; it moves every key into the
// new voters (one round per key, in batches) before it returns. If ctx ends
// or the voters cannot be reached first, the error wraps ErrNoQuorum, and
// the change may be half made: the next AddVoter or RemoveVoter, from any
// node, finishes it first.
func (m *Mesh) AddVoter(ctx context.Context, name string) error {
	inc, err := m.aliveInc(name)
	if err != nil {
		return err
	}
	return m.changeVoters(ctx, quorum.NodeID(name), inc, "")
}

// RemoveVoter removes the named node from the voters, and returns once the
// change is in effect. The node need not be alive: this is how a mesh
// drops a machine that is gone for good. Its name may never vote again in
// this mesh (restart the machine under a new name to add it back). Removing
// a node that is not a voter does nothing. Errors as for AddVoter.
//
// To replace a dead voter, add the new one first and then remove the dead
// one: the mesh keeps a majority alive throughout.
func (m *Mesh) RemoveVoter(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%w: no node named", ErrBadVoterChange)
	}
	return m.changeVoters(ctx, "", 0, quorum.NodeID(name))
}

// aliveInc returns the incarnation gossip reports for a live node.
func (m *Mesh) aliveInc(name string) (uint64, error) {
	if name == m.cfg.Name {
		return m.inc, nil
	}
	for _, p := range m.book.snapshot() {
		if p.name == name {
			if p.state != "alive" || p.meta.RPC == "" {
				return 0, fmt.Errorf("%w: %q is %s in gossip", ErrUnknownNode, name, p.state)
			}
			return p.meta.Inc, nil
		}
	}
	return 0, fmt.Errorf("%w: %q has not joined the mesh", ErrUnknownNode, name)
}

func (m *Mesh) changeVoters(ctx context.Context, add quorum.NodeID, inc uint64, remove quorum.NodeID) error {
	if err := m.waitReady(ctx); err != nil {
		return err
	}
	if err := m.checkDisks(add, remove); err != nil {
		return err
	}
	what := fmt.Sprintf("adding voter %s", add)
	if remove != "" {
		what = fmt.Sprintf("removing voter %s", remove)
	}
	m.log.Info("voter change", "change", what)
	out, ctxErr, err := m.runOp(ctx, m.opVoters(), func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error) {
		id, err := n.ChangeVoters(add, inc, remove, deadline)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %v", ErrBadVoterChange, what, err)
		}
		return id, nil
	})
	switch {
	case err != nil:
		return err
	case ctxErr != nil:
		// A change cannot be cancelled half way: it runs to its deadline,
		// and the next change, from any node, finishes what it left.
		return fmt.Errorf("%s: %w (the change runs on until its deadline; the next change finishes it if it stops half way)", what, ctxErr)
	}
	switch out.res.Outcome {
	case quorum.Reconfigured:
		m.log.Info("voter change done", "change", what, "voters", out.res.Members.Voters,
			"version", out.res.Members.Version(), "keys_moved", out.res.Moved)
		m.incr("voters.changes", 1)
		return nil
	case quorum.Refused:
		return fmt.Errorf("%w: %s: %v", ErrBadVoterChange, what, out.res.Err)
	}
	m.incr("voters.change_failures", 1)
	state := "nothing was changed"
	if out.res.Unknown {
		state = "it may be half made; the next change, from any node, finishes it"
	}
	return fmt.Errorf("%s: no majority of the voters answered in time (%s): %w", what, state, ErrNoQuorum)
}

// configChanged runs when the node moved to another configuration (nodeMu
// held): gossip announces the new id.
func (m *Mesh) configChanged(cur quorum.Membership) {
	if old := m.current.Load(); old != nil && old.ID == cur.ID {
		return
	}
	m.current.Store(&cur)
	m.log.Info("voter configuration", "version", cur.Version(), "voters", cur.Voters, "pending", cur.Pending,
		"voter", cur.IsVoter(m.name))
	m.gauge("voters.version", float32(cur.Version()))
	m.metaMu.Lock()
	m.meta.Config = cur.ID
	m.metaMu.Unlock()
	if m.ml != nil {
		go m.publishMeta()
	}
	m.kickTimer()
	m.kickReady()
}

// votingChanged runs when the node's voting state changed (nodeMu held).
func (m *Mesh) votingChanged(st quorum.VotingState) {
	old := m.voting.Swap(&st)
	m.kickReady()
	switch {
	case !st.Voter:
		if old != nil && old.Voter {
			m.log.Info("no longer a voter")
		}
	case st.DiskFailed:
		m.log.Error("stopped voting: the data directory could not be written; fix it and restart this node",
			"data_dir", m.cfg.DataDir, "error", m.node.DiskError())
	case st.Acceptor == quorum.Quarantined:
		if by := m.node.Recovery().NewMeshRefused; by != "" {
			m.log.Error("NewMesh REFUSED: another voter says it has voted, so this mesh is not new; "+
				"recovering as a voter whose data directory was lost (remove NewMesh, -new-mesh, LOCKMESH_NEW_MESH)",
				"voter", by, "quarantine", m.quarantine())
			return
		}
		m.log.Info("voting after a quarantine", "quarantine", m.quarantine())
	case st.Acceptor == quorum.CatchingUp && m.node.Recovery().NeverVoted:
		m.log.Info("new data directory: voting as soon as the other voters say they never voted (a brand-new mesh), "+
			"or after a quarantine once one says it voted", "new_mesh", m.cfg.NewMesh)
	case st.Acceptor == quorum.CatchingUp:
		m.log.Info("quarantine over; catching up from the other voters")
	case st.Acceptor == quorum.Live && st.FloorOnly:
		m.log.Info("voting; no majority of voters had state to catch up from (a new mesh, or most voters restarted together), so fencing tokens continue from the wall clock")
	case st.Acceptor == quorum.Live && (old == nil || old.Acceptor != quorum.Live):
		m.log.Info("voting")
	}
}

// learn adopts a configuration another node reported, if newer.
func (m *Mesh) learn(vs quorum.Membership) {
	if cur := m.current.Load(); cur != nil && cur.Newer(vs) {
		m.drive(func(n *quorum.Node) { n.Adopt(vs) })
	}
}

// fetchConfig asks a peer for its voter configuration.
func (m *Mesh) fetchConfig(ctx context.Context, peer string) (quorum.Membership, error) {
	info, err := m.fetchInfo(ctx, peer)
	return info.Membership, err
}

// fetchInfo asks a peer for its voter configuration, founding voters and
// voting state.
func (m *Mesh) fetchInfo(ctx context.Context, peer string) (wire.ConfigInfo, error) {
	addr, ok := m.book.rpcAddr(peer)
	if !ok {
		return wire.ConfigInfo{}, fmt.Errorf("%w: %q", ErrUnknownNode, peer)
	}
	reply, err := m.tr.Call(ctx, peer, addr, []byte{kindConfigFetch})
	if err != nil {
		return wire.ConfigInfo{}, err
	}
	return wire.DecodeConfigInfo(reply)
}

// learnFrom fetches a peer's configuration, which gossip says is newer than
// ours, and adopts it. One fetch per peer and id at a time.
func (m *Mesh) learnFrom(peer string, id uint64) {
	key := fetchKey{peer, id}
	m.fetchMu.Lock()
	if m.fetching[key] {
		m.fetchMu.Unlock()
		return
	}
	m.fetching[key] = true
	m.fetchMu.Unlock()
	defer func() {
		m.fetchMu.Lock()
		delete(m.fetching, key)
		m.fetchMu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*m.cfg.roundTimeout())
	defer cancel()
	info, err := m.fetchInfo(ctx, peer)
	if err != nil {
		m.log.Debug("fetching a newer voter configuration", "peer", peer, "error", err)
		return
	}
	m.learn(info.Membership)
	m.learnFounders(info)
}

type fetchKey struct {
	peer string
	id   uint64
}

// handlePush adopts a configuration another node pushed.
func (m *Mesh) handlePush(from string, body []byte) {
	push, err := m.lim.decodeConfigPush(body)
	if err == nil && string(push.From) != from {
		err = fmt.Errorf("%w: a push sent by %s in the name of %s", errMalformed, from, push.From)
	}
	if err != nil {
		m.incr("rpc.malformed", 1)
		if m.noisy.allow("malformed push " + from) {
			m.log.Warn("ignoring a malformed configuration push", "peer", from, "error", err)
		}
		return
	}
	m.learn(push.Members)
}

// handleConfigFetch answers a peer asking for this node's configuration
// (a node adopting it, or probing this one's readiness).
func (m *Mesh) handleConfigFetch() ([]byte, error) {
	cur := m.current.Load()
	if cur == nil {
		return nil, ErrNoVoters
	}
	info := wire.ConfigInfo{Membership: *cur, Voting: m.votingState().String()}
	if f := m.founders.Load(); f != nil {
		info.Founders = *f
	}
	return encode(kindConfigReply, info)
}

// setFounders records the founding voters of this node's mesh, when it
// knows them: the ones it was started with or bootstrapped, or those the
// node it learned its configuration from told it.
func (m *Mesh) setFounders(ids []quorum.NodeID) {
	if len(ids) == 0 {
		return
	}
	f := slices.Clone(ids)
	slices.Sort(f)
	m.founders.CompareAndSwap(nil, &f)
}

// learnFounders keeps the founding voters a peer told, if this node does
// not know its own and they founded the peer's mesh.
func (m *Mesh) learnFounders(info wire.ConfigInfo) {
	if m.founders.Load() != nil || len(info.Founders) == 0 {
		return
	}
	if (quorum.Membership{ID: quorum.ClusterID(info.Founders)}).Cluster() == info.Cluster() {
		m.setFounders(info.Founders)
	}
}

// checkPeerConfig looks at the configuration id a peer announces in
// gossip: a newer one of this mesh is fetched; one of another mesh is
// reported (see otherMesh), never adopted.
func (m *Mesh) checkPeerConfig(peer string, id uint64) {
	cur := m.current.Load()
	if cur == nil || id == 0 || id == cur.ID {
		return
	}
	other := quorum.Membership{ID: id}
	switch {
	case other.Cluster() != cur.Cluster():
		m.otherMesh(peer, "gossip")
	case other.Version() > cur.Version():
		go m.learnFrom(peer, id)
	}
}

// otherMesh reports a peer whose configuration belongs to another mesh
// (founded by other voters, usually a Voters list that differs between
// nodes): once a minute per peer, it asks the peer for its founding voters
// and voters and logs them beside ours, and records the mismatch for
// Status. what says how we heard ("gossip", "ballots", "a catch-up"). It
// never blocks: the fetch runs on its own goroutine.
func (m *Mesh) otherMesh(peer, what string) {
	if !m.noisy.allow("other mesh " + peer) {
		return
	}
	go func() {
		info, err := m.fetchInfoRetrying(peer)
		var ourFounders, ourVoters []quorum.NodeID
		if f := m.founders.Load(); f != nil {
			ourFounders = *f
		}
		if cur := m.current.Load(); cur != nil {
			ourVoters = cur.Voters
		}
		var theirFounders, theirVoters []quorum.NodeID
		if err == nil {
			theirFounders, theirVoters = info.Founders, info.Voters
		}
		mm := Mismatch{Peer: peer, What: "founding voters", Ours: voterList(ourFounders), Theirs: voterList(theirFounders)}
		if mm.Ours == "unknown" || mm.Theirs == "unknown" {
			// A side that learned its configuration from others may not
			// know who founded its mesh: compare the voters.
			mm = Mismatch{Peer: peer, What: "voters", Ours: voterList(ourVoters), Theirs: voterList(theirVoters)}
		}
		m.noteMismatch(mm)
		args := []any{"peer", peer, "heard_in", what,
			"our_founding_voters", logList(ourFounders), "their_founding_voters", logList(theirFounders),
			"our_voters", logList(ourVoters), "their_voters", logList(theirVoters)}
		if err != nil {
			args = append(args, "fetch_error", err)
		}
		m.log.Warn("refusing a node of another voter configuration: it belongs to another mesh, founded by other voters (every node must be started with the same Voters list)",
			args...)
	}()
}

// fetchInfoRetrying fetches a peer's configuration info, trying again for a
// while: a node that has just appeared in gossip may not know this one yet,
// and refuses it until it does.
func (m *Mesh) fetchInfoRetrying(peer string) (wire.ConfigInfo, error) {
	rt := m.cfg.roundTimeout()
	var err error
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*rt)
		var info wire.ConfigInfo
		info, err = m.fetchInfo(ctx, peer)
		cancel()
		if err == nil {
			return info, nil
		}
		t := time.NewTimer(2 * rt)
		select {
		case <-m.closed:
			t.Stop()
			return wire.ConfigInfo{}, ErrClosed
		case <-t.C: // a pause between attempts
		}
	}
	return wire.ConfigInfo{}, err
}

// voterList spells a list of voters for Status, sorted ("unknown" when
// empty).
func voterList(ids []quorum.NodeID) string {
	if len(ids) == 0 {
		return "unknown"
	}
	return strings.Join(logList(ids), ",")
}

// logList is a list of voters for a log line, sorted (["unknown"] when
// empty).
func logList(ids []quorum.NodeID) []string {
	if len(ids) == 0 {
		return []string{"unknown"}
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	slices.Sort(s)
	return s
}

// userKey checks a key a caller passed (limits.checkUserKey).
func (m *Mesh) userKey(key string) error { return m.lim.checkUserKey(key) }

// checkDisks refuses a voter change that a voter without a data directory
// would refuse anyway (quorum.ReasonNoDisk), saying which: a voter that can
// forget the configuration it accepted would come back after a restart on
// the founding voters, beside the current ones (design.md R60). The
// removal of such a voter is allowed.
func (m *Mesh) checkDisks(add, remove quorum.NodeID) error {
	if m.dd == nil {
		return fmt.Errorf("%w: voter changes need a data directory (Config.DataDir) on every voter, and this node has none", ErrBadVoterChange)
	}
	cur := m.current.Load()
	if cur == nil {
		return nil
	}
	// The voter a change removes may lack one: it refuses to vote on the
	// change (ReasonNoDisk), which the others decide. Removing it is the
	// way out for a mesh that has such a voter.
	voters := slices.DeleteFunc(slices.Clone(cur.Voters), func(v quorum.NodeID) bool { return v == remove })
	if add != "" {
		voters = append(voters, add)
	}
	var without []string
	for _, p := range m.book.snapshot() {
		if p.name != m.cfg.Name && slices.Contains(voters, quorum.NodeID(p.name)) && p.state == "alive" && !p.meta.Disk {
			without = append(without, p.name)
		}
	}
	if len(without) > 0 {
		slices.Sort(without)
		return fmt.Errorf("%w: voter changes need a data directory (Config.DataDir) on every voter, and %q have none", ErrBadVoterChange, without)
	}
	return nil
}
