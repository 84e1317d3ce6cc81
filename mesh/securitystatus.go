package mesh

import "github.com/lockmesh/lockmesh/transport"

// SecurityStatus is the part of Status about who is who and what the
// limits refused (docs/security.md).
type SecurityStatus struct {
	// NameConflicts are the names this node saw used by two processes at
	// once within the last few gossip push/pull intervals: a copied
	// configuration, a node started twice, or a forgery. Each is also
	// logged (an error, once a minute per name) and counted
	// (identity.conflict).
	NameConflicts []NameConflict
	// NotVoting is set on a voter that refuses to vote because another
	// process with its name, started before it, still answers: it then
	// answers ballots as a node that does not vote, until that process is
	// gone for a few push/pull intervals.
	NotVoting bool
	// BallotBytesInFlight is what frames take of the ballot transport's
	// MaxBytesInFlight now, and PeakBallotBytesInFlight the most they ever
	// took (TCP transport only).
	BallotBytesInFlight, PeakBallotBytesInFlight int64
	// LogLinesSuppressed counts log lines about refused peers and forged
	// input that the rate limit dropped.
	LogLinesSuppressed uint64
}

func (m *Mesh) securityStatus() SecurityStatus {
	s := SecurityStatus{
		NameConflicts:      m.book.ids.recent(),
		NotVoting:          m.notVoting(),
		LogLinesSuppressed: m.noisy.dropped(),
	}
	if tcp, ok := m.tr.(*transport.TCP); ok {
		st := tcp.Stats()
		s.BallotBytesInFlight, s.PeakBallotBytesInFlight = st.BytesInFlight, st.PeakBytesInFlight
	}
	return s
}
