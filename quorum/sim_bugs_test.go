package quorum

// Rules broken on purpose, to show the simulator's checkers catch each.

func (s *sim) applyAcceptorBug(n *simNode) {
	switch s.cfg.Bug {
	case "skip-quarantine":
		n.acc.faults.skipQuarantine = true
	}
}

func (s *sim) applyProposerBug(n *simNode) {
	switch s.cfg.Bug {
	case "count-messages":
		n.prop.faults.countMessages = true
	case "clock-after-prepare":
		n.prop.faults.clockAtGrant = true
	case "alive-majority":
		n.prop.faults.aliveMajority = func() []NodeID { return s.reachableVoters(n) }
	case "reuse-epoch":
		n.prop.faults.noEpochFloor = true
	}
}

// reachableVoters is what gossip would tell n: the voters that are up and
// that n can reach.
func (s *sim) reachableVoters(n *simNode) []NodeID {
	var ids []NodeID
	for _, v := range s.nodes {
		if v.voter && v.up && !s.cut[[2]int{n.idx, v.idx}] {
			ids = append(ids, v.id)
		}
	}
	if len(ids) == 0 {
		ids = append(ids, s.m.Voters[0])
	}
	return ids
}
