package quorum

import "slices"

// Newer configurations. A voter saves a configuration before it adopts it
// and accepts one only with a disk (design.md R53, R60), so what a
// restarted voter and its peers say they accepted and have not adopted
// tells whether a newer configuration was chosen, which it then adopts,
// or may have been, which it waits for before it votes (R65-R68). Only
// votes count, never a copy of the configuration register merged in a
// catch-up (R68).

// ownNewerConfig is the configuration newer than the adopted one that this
// acceptor accepted itself, in this life or, from its disk, an earlier one,
// with the ballot it accepted it at (nil when there is none). It is read
// from what the disk keeps, not from the register: a catch-up merges the
// configuration register too (an acceptor that lost its disk must answer
// prepares with what a majority accepted), and a copy so learned is no vote.
// Counted as one, it let a restarted voter take a configuration two voters
// of five accepted for chosen (design.md R68). Without a disk an acceptor
// accepts no configuration (ReasonNoDisk, design.md R60).
func (a *Acceptor) ownNewerConfig() (*Ballot, *Membership) {
	c := a.rules.ownConfigVote(a)
	if a.disk == nil || c.Value.Config == nil || !a.m.Newer(*c.Value.Config) {
		return nil, nil
	}
	b := c.Accepted
	return &b, c.Value.Config
}

// ownConfigVote is the acceptor's own promise and vote on the
// configuration register, as its disk keeps them: never a copy merged in a
// catch-up (design.md R68).
func (a *Acceptor) ownConfigVote() DurableRegister { return a.dur.Config }

// newerConfigAccepted is the version of a configuration the acceptor has
// accepted itself but not adopted: it may have been chosen, so voters that
// know no newer one than their own must not take themselves for the whole
// mesh (0 when there is none).
func (a *Acceptor) newerConfigAccepted() uint64 {
	if _, m := a.ownNewerConfig(); m != nil {
		return m.Version()
	}
	return 0
}

// newerConfigRegister returns what newerConfigAccepted says, with the
// ballot, as a catch-up answer reports it (copies: the voters' own).
func (a *Acceptor) newerConfigRegister() (*Ballot, *Membership) {
	b, m := a.ownNewerConfig()
	if m == nil {
		return nil, nil
	}
	c := m.clone()
	return b, &c
}

// chosenNewer returns a configuration newer than the adopted one that
// majorities of the voters, and while a change is pending of the voters
// before it, accepted at one ballot, as their catch-up answers and this
// acceptor's own vote tell: it was chosen, whatever became of the proposer
// that wrote it.
func (a *Acceptor) chosenNewer() *Membership {
	ownB, ownM := a.ownNewerConfig()
	count := func(b Ballot, voters []NodeID) bool {
		n := 0
		if ownB != nil && *ownB == b && slices.Contains(voters, a.cfg.ID) {
			n++
		}
		for _, p := range a.catchUp.peers {
			if p.newerBallot != nil && *p.newerBallot == b && slices.Contains(voters, p.id) {
				n++
			}
		}
		return n >= len(voters)/2+1
	}
	chosen := func(b Ballot) bool {
		return count(b, a.m.Voters) && (!a.m.Pending || count(b, a.m.Prev))
	}
	if ownB != nil && chosen(*ownB) {
		m := ownM.clone()
		return &m
	}
	for _, p := range a.catchUp.peers {
		if p.newerBallot != nil && p.newerMembers != nil && chosen(*p.newerBallot) {
			m := p.newerMembers.clone()
			return &m
		}
	}
	return nil
}

// newerMaybeChosen reports whether a configuration newer than the adopted
// one may have been chosen, as far as the catch-up's answers tell: whether,
// for some configuration that a voter says it accepted (this one from its
// own vote), the voters that accepted it and those that have not answered
// make majorities of the voters, and of those before a pending change. A
// voter that accepted a configuration keeps it on its disk (a voter changes
// configurations only with one) and says so in every answer until it
// adopts it; then it answers with the configuration itself, which this
// acceptor adopts. One that cannot have been chosen does not keep the
// acceptor from voting in the configuration it has: a change that finishes
// it later reaches it as it reaches any voter.
func (a *Acceptor) newerMaybeChosen() bool { return a.rules.newerMaybeChosen(a) != 0 }

// newerMaybeChosenVersion is newerMaybeChosen's configuration's version (0
// when there is none; design.md R65).
func (a *Acceptor) newerMaybeChosenVersion() uint64 {
	_, own := a.ownNewerConfig()
	// Each configuration a voter says it accepted; nil stands for one a
	// voter of an earlier version named by its version alone.
	var named []*Membership
	if own != nil {
		named = append(named, own)
	}
	vague := false
	for _, p := range a.catchUp.peers {
		switch {
		case p.newer == 0:
		case p.newerMembers == nil:
			vague = true
		case !slices.ContainsFunc(named, func(m *Membership) bool { return m.Equal(*p.newerMembers) }):
			named = append(named, p.newerMembers)
		}
	}
	if vague && len(named) == 0 {
		named = append(named, nil)
	}
	// accepted reports whether a voter's word (what it said it accepted,
	// newer and members) allows that it accepted m.
	accepted := func(newer uint64, members, m *Membership) bool {
		return newer != 0 && (m == nil || members == nil || members.Equal(*m))
	}
	could := func(m *Membership, voters []NodeID) bool {
		n := 0
		for _, v := range voters {
			if v == a.cfg.ID {
				// Without the disk of its earlier life it may have
				// accepted m, and adopted it, and forgotten both.
				if a.rules.mayHaveAccepted(a) || (own != nil && (m == nil || own.Equal(*m))) {
					n++
				}
				continue
			}
			i := slices.IndexFunc(a.catchUp.peers, func(p *peerCatchUp) bool { return p.id == v })
			if i < 0 || !a.catchUp.peers[i].answered {
				n++ // unknown
				continue
			}
			if p := a.catchUp.peers[i]; p.forgot || accepted(p.newer, p.newerMembers, m) {
				n++ // it may have accepted m in a life it forgot
			}
		}
		return n >= len(voters)/2+1
	}
	for _, m := range named {
		if could(m, a.m.Voters) && (!a.m.Pending || could(m, a.m.Prev)) {
			if m != nil {
				return m.Version()
			}
			v := uint64(0)
			for _, p := range a.catchUp.peers {
				v = max(v, p.newer)
			}
			return v
		}
	}
	return 0
}

// mayHaveAccepted reports whether the acceptor counts itself as one that
// may have accepted any newer configuration: without the disk of its
// earlier life it may have accepted one, and adopted it, and forgotten
// both; a restored one counts only its disk's vote (design.md R66).
func (a *Acceptor) mayHaveAccepted() bool { return !a.restored }
