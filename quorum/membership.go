package quorum

import (
	"fmt"
	"slices"
)

// Membership is a voter configuration: the acceptors whose majority decides
// every key. Its ID travels on every ballot message, and an acceptor answers
// only messages of its own configuration, because majorities of two different
// voter sets need not intersect. What gossip believes about liveness never
// changes a Membership.
//
// Configurations change one voter at a time (ChangeVoters), by a write to
// the register ConfigKey decided by the current configuration: majorities of
// two configurations that differ by one voter always intersect. The ID's low
// 16 bits are the configuration's version, the rest names the mesh (the
// cluster, fixed at its first configuration): a node adopts a configuration
// it hears of only if it is of its own cluster and newer.
type Membership struct {
	ID     uint64   `codec:"id"`
	Voters []NodeID `codec:"v"`
	// Retired lists every voter ever removed; its name may never vote
	// again (it may still hold locks as a non-voter).
	Retired []NodeID `codec:"r,omitempty"`
	// Pending is set while a change is being settled: every key is being
	// written again under this configuration before the next change may
	// start (see ChangeVoters).
	Pending bool `codec:"p,omitempty"`
}

// versionBits is how much of an ID is the version.
const versionBits = 16

// ClusterID returns the ID of a mesh's first configuration of the given
// voters: the cluster named by a hash of their names, version 1.
func ClusterID(voters []NodeID) uint64 {
	s := slices.Clone(voters)
	slices.Sort(s)
	h := uint64(14695981039346656037)
	for _, n := range s {
		for i := 0; i < len(n); i++ {
			h = (h ^ uint64(n[i])) * 1099511628211
		}
		h = (h ^ 0) * 1099511628211
	}
	return h&^(1<<versionBits-1) | 1
}

// Cluster is the part of the ID that names the mesh.
func (m Membership) Cluster() uint64 { return m.ID &^ (1<<versionBits - 1) }

// Version is the part of the ID that counts changes.
func (m Membership) Version() uint64 { return m.ID & (1<<versionBits - 1) }

// Newer reports whether o is a later configuration of m's cluster.
func (m Membership) Newer(o Membership) bool {
	return o.Cluster() == m.Cluster() && o.Version() > m.Version()
}

// Next returns the configuration that follows m, with the given voters.
func (m Membership) Next(voters []NodeID, pending bool) Membership {
	n := NewMembership(m.ID+1, voters...)
	n.Retired = slices.Clone(m.Retired)
	for _, v := range m.Voters {
		if !n.IsVoter(v) && !slices.Contains(n.Retired, v) {
			n.Retired = append(n.Retired, v)
		}
	}
	n.Pending = pending
	return n
}

// clone copies m, so that a round keeps the configuration it started in.
func (m Membership) clone() Membership {
	m.Voters = slices.Clone(m.Voters)
	m.Retired = slices.Clone(m.Retired)
	return m
}

// NewMembership returns a configuration of the given voters, sorted.
func NewMembership(id uint64, voters ...NodeID) Membership {
	v := slices.Clone(voters)
	slices.Sort(v)
	return Membership{ID: id, Voters: slices.Compact(v)}
}

// Validate reports whether m can decide anything.
func (m Membership) Validate() error {
	if m.ID == 0 {
		return fmt.Errorf("%w: configuration id 0 is reserved", ErrBadMembership)
	}
	if len(m.Voters) == 0 {
		return fmt.Errorf("%w: no voters", ErrBadMembership)
	}
	seen := make(map[NodeID]bool, len(m.Voters))
	for _, v := range m.Voters {
		if v == "" {
			return fmt.Errorf("%w: empty voter name", ErrBadMembership)
		}
		if seen[v] {
			return fmt.Errorf("%w: voter %q listed twice", ErrBadMembership, v)
		}
		if slices.Contains(m.Retired, v) {
			return fmt.Errorf("%w: voter %q was removed before; a removed voter never returns", ErrBadMembership, v)
		}
		seen[v] = true
	}
	if m.Version() == 0 {
		return fmt.Errorf("%w: configuration version 0 is reserved", ErrBadMembership)
	}
	return nil
}

// Majority is the number of distinct voters that make a quorum.
func (m Membership) Majority() int { return len(m.Voters)/2 + 1 }

// IsVoter reports whether id is one of m's voters.
func (m Membership) IsVoter(id NodeID) bool { return m.index(id) >= 0 }

func (m Membership) index(id NodeID) int {
	for i, v := range m.Voters {
		if v == id {
			return i
		}
	}
	return -1
}

// tally counts answers by distinct voter, never by message: a duplicated
// reply, or one from a node outside the configuration, adds nothing.
type tally struct {
	m    *Membership
	yes  uint64 // bit i: voter i said yes
	no   uint64 // bit i: voter i said no
	nyes int
	nno  int
	// refusedByRival: some refusal came from another proposer's ballot or
	// grant, not from a voter that cannot vote.
	refusedByRival bool
	// handedOff: some refusal was a grant refused in favour of a waiter.
	handedOff bool
	extra     map[int]bool // for configurations of more than 64 voters
}

func newTally(m *Membership) tally { return tally{m: m} }

// add records voter id's answer; it returns false when id is not a voter or
// has already answered.
func (t *tally) add(id NodeID, ok bool) bool {
	i := t.m.index(id)
	if i < 0 {
		return false
	}
	if i >= 64 {
		if t.extra == nil {
			t.extra = make(map[int]bool)
		}
		if _, dup := t.extra[i]; dup {
			return false
		}
		t.extra[i] = ok
	} else {
		bit := uint64(1) << i
		if (t.yes|t.no)&bit != 0 {
			return false
		}
		if ok {
			t.yes |= bit
		} else {
			t.no |= bit
		}
	}
	if ok {
		t.nyes++
	} else {
		t.nno++
	}
	return true
}

// reached reports whether a majority said yes.
func (t *tally) reached() bool { return t.nyes >= t.m.Majority() }

// lost reports whether so many said no that a majority of yes is impossible.
func (t *tally) lost() bool { return len(t.m.Voters)-t.nno < t.m.Majority() }
