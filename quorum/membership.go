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
type Membership struct {
	ID     uint64   `codec:"id"`
	Voters []NodeID `codec:"v"`
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
		seen[v] = true
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
