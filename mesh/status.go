package mesh

import (
	"github.com/lockmesh/lockmesh/quorum"
)

// Status is a snapshot of a node, for operators and tests.
type Status struct {
	Name string
	// Addr is the gossip address other nodes join through; RPCAddr the
	// ballot address.
	Addr, RPCAddr string
	// Members are the nodes gossip knows, this one included.
	Members []Member
	// Voters is the voter configuration (empty until it formed) and
	// ConfigID its identifier; Config has the rest of it.
	Voters   []string
	ConfigID uint64
	Config   Configuration
	// Ready: this node can serve locks, and its vote (if a voter) counts:
	// it knows a voter configuration; as a voter, it votes (VotingState
	// Live); and a majority of the voters is known live (LiveVoters). See
	// Mesh.Ready. Waiting says what keeps it from being ready.
	Ready bool
	// VotingState is whether and how this node votes.
	VotingState VotingState
	// LiveVoters are the voters known live now: this node if it votes, and
	// the voters that answered its probe within the last few probe
	// intervals saying that they vote.
	LiveVoters []string `json:",omitempty"`
	Waiting    Waiting
	// Voting is this node's acceptor state as text: "" (not a voter),
	// "quarantined", "catching up" or "live" (a silenced voter shows its
	// acceptor's state).
	//
	// Deprecated: use VotingState, which also tells a silenced voter.
	Voting string
	// Leases is how many leases this node holds now.
	Leases int
	// Proposer and Acceptor count what the state machines did.
	Proposer quorum.ProposerStats
	Acceptor quorum.AcceptorStats

	// Security is what this node saw of other processes using names, and
	// of its limits (securitystatus.go).
	Security SecurityStatus
	// DataDir is the data directory's state (nil without Config.DataDir).
	DataDir *DataDirStatus `json:",omitempty"`
}

// Member is one node as gossip sees it.
type Member struct {
	Name    string
	Addr    string
	RPCAddr string
	// State is "alive", "dead" or "left", as gossip last said: a hint only;
	// it never changes the size of a quorum.
	State string
	Voter bool
}

// Status returns a snapshot of the node.
func (m *Mesh) Status() Status {
	st := Status{Name: m.cfg.Name, RPCAddr: m.tr.Addr()}
	voters := m.current.Load()
	if voters != nil {
		st.Config = configuration(*voters)
		st.ConfigID, st.Voters = st.Config.ID, st.Config.Voters
	}
	st.Addr = m.Addr()
	for _, p := range m.book.snapshot() {
		st.Members = append(st.Members, Member{
			Name:    p.name,
			Addr:    p.gossip,
			RPCAddr: p.meta.RPC,
			State:   p.state,
			Voter:   voters != nil && voters.IsVoter(quorum.NodeID(p.name)),
		})
	}
	if v := m.voting.Load(); v != nil && v.Voter {
		st.Voting = v.Acceptor.String()
	}
	st.VotingState = m.votingState()
	var rec *quorum.Recovery
	m.nodeMu.Lock()
	if m.node != nil {
		st.Leases = m.node.TaggedLeases()
		st.Proposer, st.Acceptor = m.node.Stats()
		r := m.node.Recovery()
		rec = &r
	}
	m.nodeMu.Unlock()
	r := m.readiness(rec)
	st.Ready, st.Waiting, st.LiveVoters = r.ready && !m.isClosed(), r.waiting, r.live
	m.setReady(st.Ready)
	st.Security = m.securityStatus()
	st.DataDir = m.dd.status()
	return st
}
