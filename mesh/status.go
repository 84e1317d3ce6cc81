package mesh

import (
	"time"

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
	// VoterHealth is every voter (and, while a change is pending, every
	// voter before it) as this node's probes find it: live or why not, its
	// voting state, when it last answered. It is what readiness counts,
	// and it sees a voter stop answering seconds before gossip (Members)
	// marks it dead.
	VoterHealth []VoterHealth `json:",omitempty"`
	Waiting     Waiting
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

// VoterHealth is one voter as this node's probes of the ballot transport
// find it (Status.VoterHealth).
type VoterHealth struct {
	Name string
	// Self: this node.
	Self bool `json:",omitempty"`
	// Live: known live, one of Status.LiveVoters.
	Live bool
	// State is the voting state it said in its last answer (VotingState's
	// text), this node's own for Self; "" if it never answered, or is of a
	// release too old to say.
	State string `json:",omitempty"`
	// Answered is how long before this snapshot its last answer came: a
	// voter is probed every four round timeouts (1 s with DefaultConfig),
	// so a longer time means missed probes. Zero for Self, and for a voter
	// that never answered.
	Answered time.Duration `json:",omitempty"`
	// Why says why it is not known live ("" when it is): "not seen in
	// gossip", "no answer yet", "no answer for 3.2s", "another mesh", its
	// voting state, a mismatch.
	Why string `json:",omitempty"`
	// ProbeError is why this node's last probe of it failed, if it did
	// (an answer since clears it): a voter that stops answering shows it
	// at the next probe, before its last answer is too old to count.
	ProbeError string `json:",omitempty"`
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
	st.VoterHealth = m.voterHealth()
	m.setReady(st.Ready)
	st.Security = m.securityStatus()
	st.DataDir = m.dd.status()
	return st
}
