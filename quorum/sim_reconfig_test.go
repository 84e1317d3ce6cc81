package quorum

import (
	"fmt"
	"slices"
	"time"
)

// The reconfiguration driver: while the faults run, a random node is asked
// to add or remove one voter, working from whatever configuration it knows
// (perhaps an old one). Removed voters stay on as proposers; spares join as
// new nodes when no non-voter is left to add. Every change is checked: a
// change reported done is in effect in the configuration it names.

// maxSimNodes bounds how many nodes a run may grow to.
func (s *sim) maxSimNodes() int { return s.cfg.Voters + s.cfg.Proposers + 6 }

func (s *sim) reconfigure() {
	if s.healed || s.ended {
		return
	}
	s.changeFrom(s.randomUp(nil), "")
}

// reconfigureFrom asks n, if it is up and idle, to add or remove a voter.
func (s *sim) reconfigureFrom(n *simNode) { s.changeFrom(n, "") }

// changeFrom asks n, if it runs no change, to add or remove one voter, but
// not to remove keep.
func (s *sim) changeFrom(n *simNode, keep NodeID) {
	if n == nil || !n.up || n.node.prop.chg != nil {
		return
	}
	cur := n.node.Membership()
	lo, hi := max(s.cfg.Voters-1, 2), s.cfg.Voters+1
	add := len(cur.Voters) < lo || (len(cur.Voters) < hi && s.rand.Intn(2) == 0)
	ch := &simChange{}
	var addInc uint64
	if add {
		var cands []*simNode
		for _, c := range s.nodes {
			if !cur.IsVoter(c.id) && !slices.Contains(s.m.Retired, c.id) && !slices.Contains(cur.Retired, c.id) {
				cands = append(cands, c)
			}
		}
		var c *simNode
		switch {
		case len(cands) > 0 && (s.rand.Intn(3) > 0 || len(s.nodes) >= s.maxSimNodes()):
			c = cands[s.rand.Intn(len(cands))]
		case len(s.nodes) < s.maxSimNodes():
			c = s.addNode()
		default:
			return
		}
		ch.add = c.id
		if c.up {
			addInc = c.inc // as gossip reports it
		}
		s.stats.Adds++
	} else {
		// Prefer a voter that is down, as an operator replacing a dead
		// machine would; any voter otherwise.
		var down []NodeID
		for _, id := range cur.Voters {
			if !s.node(id).up {
				down = append(down, id)
			}
		}
		if len(down) > 0 && s.rand.Intn(2) == 0 {
			ch.remove = down[s.rand.Intn(len(down))]
		} else {
			ch.remove = cur.Voters[s.rand.Intn(len(cur.Voters))]
		}
		if ch.remove == keep {
			return
		}
		s.stats.Removes++
	}
	id, err := n.node.ChangeVoters(ch.add, addInc, ch.remove, n.clock.Now()+3*time.Second)
	if err != nil {
		s.failf("%s refused to start a change: %v", n.id, err)
		return
	}
	s.stats.Changes++
	n.changes[id] = ch
	s.tracef("%s starts a change: add %q (inc %d) remove %q, from configuration %d %v", n.id, ch.add, addInc, ch.remove, cur.ID&0xffff, cur.Voters)
	s.flush(n)
}

// addNode starts a new node, not a voter: a machine joining the mesh.
func (s *sim) addNode() *simNode {
	i := len(s.nodes)
	n := &simNode{s: s, idx: i, id: NodeID(fmt.Sprintf("n%d", i))}
	s.nodes = append(s.nodes, n)
	s.stats.Joins++
	s.start(n)
	return n
}

// changeResult checks what a change reported.
func (s *sim) changeResult(n *simNode, ch *simChange, res OpResult) {
	s.tracef("%s change add %q remove %q: %v (moved %d keys) -> %v err=%v", n.id, ch.add, ch.remove, res.Outcome, res.Moved, res.Members, res.Err)
	s.stats.KeysMoved += res.Moved
	switch res.Outcome {
	case Reconfigured:
		s.stats.ChangesDone++
		m := res.Members
		if m == nil {
			s.failf("%s reported a change done without its configuration", n.id)
			return
		}
		if ch.add != "" && !m.IsVoter(ch.add) || ch.remove != "" && m.IsVoter(ch.remove) {
			s.failf("%s reported add %q remove %q done, but configuration %d has voters %v", n.id, ch.add, ch.remove, m.ID&0xffff, m.Voters)
		}
		if m.Pending {
			s.failf("%s reported a change done while configuration %d is still pending", n.id, m.ID&0xffff)
		}
	case NoQuorum:
		s.stats.ChangesFailed++
	case Refused:
		s.stats.ChangesRefused++
		if res.Err == nil {
			s.failf("%s refused a change without saying why", n.id)
		}
	default:
		s.failf("%s ended a change with %v", n.id, res.Outcome)
	}
}
