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
	// start (see Proposer.ChangeVoters). Prev is then the voters of the
	// configuration before the change.
	Pending bool     `codec:"p,omitempty"`
	Prev    []NodeID `codec:"pv,omitempty"`
	// Joined lists voters that a change added, each with the incarnation
	// that was running when it was added. That incarnation never voted
	// before (a voter's name is never reused), so it may vote at once with
	// an empty state; any later incarnation of it has forgotten what it
	// voted and must wait out its quarantine and catch up.
	Joined []Joined `codec:"j,omitempty"`
	// EpochFloor is the highest epoch of the keys the voters before this
	// configuration had dropped when it was settled (see
	// acceptor_registers.go): a voter that joins learns it with the
	// configuration, so that a dropped key's next token is above every
	// earlier one whichever voters grant it. It only grows.
	EpochFloor uint64 `codec:"ef,omitempty"`
}

// Joined names a voter added by a change and the incarnation added.
type Joined struct {
	ID  NodeID `codec:"id"`
	Inc uint64 `codec:"inc"`
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

// Next returns the configuration that follows m, with the given voters; a
// pending one remembers m's voters as Prev. A voter that is not among
// m's is recorded as joined with incarnation inc.
func (m Membership) Next(voters []NodeID, pending bool, inc uint64) Membership {
	n := NewMembership(m.ID+1, voters...)
	n.EpochFloor = m.EpochFloor
	n.Retired = slices.Clone(m.Retired)
	for _, v := range m.Voters {
		if !n.IsVoter(v) && !slices.Contains(n.Retired, v) {
			n.Retired = append(n.Retired, v)
		}
	}
	for _, j := range m.Joined {
		if n.IsVoter(j.ID) {
			n.Joined = append(n.Joined, j)
		}
	}
	for _, v := range n.Voters {
		if !m.IsVoter(v) && inc != 0 {
			n.Joined = append(n.Joined, Joined{ID: v, Inc: inc})
		}
	}
	if pending {
		n.Pending, n.Prev = true, slices.Clone(m.Voters)
	}
	return n
}

// JoinedAs reports the incarnation with which a change added voter id, if
// a change added it.
func (m Membership) JoinedAs(id NodeID) (uint64, bool) {
	for _, j := range m.Joined {
		if j.ID == id {
			return j.Inc, true
		}
	}
	return 0, false
}

// Equal reports whether m and o are the same configuration.
func (m Membership) Equal(o Membership) bool {
	return m.ID == o.ID && m.EpochFloor == o.EpochFloor && slices.Equal(m.Voters, o.Voters) && m.Pending == o.Pending &&
		slices.Equal(m.Prev, o.Prev) && slices.Equal(m.Retired, o.Retired) && slices.Equal(m.Joined, o.Joined)
}

// clone copies m, so that a round keeps the configuration it started in.
func (m Membership) clone() Membership {
	m.Voters = slices.Clone(m.Voters)
	m.Retired = slices.Clone(m.Retired)
	m.Prev = slices.Clone(m.Prev)
	m.Joined = slices.Clone(m.Joined)
	return m
}

// oneChange reports whether a and b differ by at most one voter: then every
// majority of one meets every majority of the other.
func oneChange(a, b []NodeID) bool {
	diff := 0
	for _, v := range a {
		if !slices.Contains(b, v) {
			diff++
		}
	}
	for _, v := range b {
		if !slices.Contains(a, v) {
			diff++
		}
	}
	return diff <= 1
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
	if m.Pending != (len(m.Prev) > 0) {
		return fmt.Errorf("%w: a pending configuration, and only one, names the voters before it", ErrBadMembership)
	}
	if m.Pending && !oneChange(m.Prev, m.Voters) {
		return fmt.Errorf("%w: voters %v and %v differ by more than one", ErrBadMembership, m.Prev, m.Voters)
	}
	for _, j := range m.Joined {
		if !m.IsVoter(j.ID) || j.Inc == 0 {
			return fmt.Errorf("%w: joined voter %q (incarnation %d) is not a voter", ErrBadMembership, j.ID, j.Inc)
		}
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
	m    Membership // the round's configuration, as it was when it began
	yes  uint64     // bit i: voter i said yes
	no   uint64     // bit i: voter i said no
	nyes int
	nno  int
	// refusedByRival: some refusal came from another proposer's ballot or
	// grant, not from a voter that cannot vote.
	refusedByRival bool
	// handedOff: some refusal was a grant refused in favour of a waiter.
	handedOff bool
	extra     map[int]bool // for configurations of more than 64 voters
}

func newTally(m Membership) tally { return tally{m: m} }

// refusedFor notes why a voter refused, if a rival's ballot, grant or
// waiter made it.
func (t *tally) refusedFor(why Reason) {
	switch why {
	case ReasonHandoff:
		t.handedOff = true
		t.refusedByRival = true
	case ReasonPromised, ReasonHeld:
		t.refusedByRival = true
	}
}

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
