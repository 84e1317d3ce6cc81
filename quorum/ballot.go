package quorum

import (
	"fmt"
	"time"
)

// NodeID names a node of the mesh. It is the memberlist node name and must be
// unique among the nodes that ever join one mesh.
type NodeID string

// Ballot orders the proposals made on one key. Ballots compare by Counter,
// then Incarnation, then Node, so two proposers never share a ballot, and a
// proposer that restarted (and so forgot its counters) still never reuses one:
// each start of a node picks a new Incarnation.
type Ballot struct {
	Counter     uint64 `codec:"c,omitempty"`
	Incarnation uint64 `codec:"i,omitempty"`
	Node        NodeID `codec:"n,omitempty"`
}

// Compare returns -1, 0 or +1 as b is lower than, equal to or higher than o.
func (b Ballot) Compare(o Ballot) int {
	switch {
	case b.Counter != o.Counter:
		return cmp(b.Counter, o.Counter)
	case b.Incarnation != o.Incarnation:
		return cmp(b.Incarnation, o.Incarnation)
	case b.Node < o.Node:
		return -1
	case b.Node > o.Node:
		return 1
	}
	return 0
}

// Less reports whether b is lower than o.
func (b Ballot) Less(o Ballot) bool { return b.Compare(o) < 0 }

// IsZero reports whether b is the zero ballot, lower than any real one.
func (b Ballot) IsZero() bool { return b == Ballot{} }

func (b Ballot) String() string {
	if b.IsZero() {
		return "0"
	}
	return fmt.Sprintf("%d.%d.%s", b.Counter, b.Incarnation, b.Node)
}

func maxBallot(a, b Ballot) Ballot {
	if a.Less(b) {
		return b
	}
	return a
}

func cmp(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// Value is the content of one key's register.
//
// A held value names its holder by node and incarnation, so a node that
// restarted never mistakes a grant of its earlier life for its own. Epoch is
// the fencing token: every grant gets a higher one, a renewal keeps it, a
// release keeps it (so the next grant goes above it).
//
// Lease is the ballot of the write that started the current lease period (the
// grant or the latest renewal). An acceptor runs its exclusion timer for the
// grant, TTL from the moment it accepts, only when it accepts a value at
// exactly that ballot; writing the value back at a later ballot (a
// linearizable read does that) never starts or extends a timer, so reads
// cannot keep a dead holder's key locked, and never stops one either.
type Value struct {
	Held      bool          `codec:"h,omitempty"`
	Holder    NodeID        `codec:"o,omitempty"`
	HolderInc uint64        `codec:"oi,omitempty"`
	Epoch     uint64        `codec:"e,omitempty"`
	TTL       time.Duration `codec:"t,omitempty"`
	Lease     Ballot        `codec:"l,omitempty"`
	// Config is the value of ConfigKey, the voter configuration; nil on
	// every other key.
	Config *Membership `codec:"c,omitempty"`
	// Data is the holder's value on a held key: bytes the holder publishes
	// with its grant (a leader's address, say), set by the acquire that
	// wrote the grant and changed by the holder's updates (Proposer.Update).
	// Renewals and write-backs carry it on; a release clears it. A string,
	// so that values stay comparable and immutable; any bytes may be in it.
	Data string `codec:"d,omitempty"`
}

// ConfigKey is the register that holds the voter configuration. Lock keys
// never start with a zero byte.
const ConfigKey = "\x00voters"

// sameGrant reports whether v and o are the same grant (perhaps different
// lease periods of it), and so share one exclusion timer.
func (v Value) sameGrant(o Value) bool {
	return v.Held && o.Held && v.Holder == o.Holder && v.HolderInc == o.HolderInc && v.Epoch == o.Epoch
}

// heldBy reports whether v is a grant to the given node incarnation.
func (v Value) heldBy(id NodeID, inc uint64) bool {
	return v.Held && v.Holder == id && v.HolderInc == inc
}

func (v Value) String() string {
	if v.Config != nil {
		return fmt.Sprintf("config %d %v pending=%v", v.Config.ID, v.Config.Voters, v.Config.Pending)
	}
	if !v.Held {
		return fmt.Sprintf("free@%d", v.Epoch)
	}
	if v.Data != "" {
		return fmt.Sprintf("held(%s/%d)@%d ttl=%v lease=%v data=%dB", v.Holder, v.HolderInc, v.Epoch, v.TTL, v.Lease, len(v.Data))
	}
	return fmt.Sprintf("held(%s/%d)@%d ttl=%v lease=%v", v.Holder, v.HolderInc, v.Epoch, v.TTL, v.Lease)
}
