package quorum

import (
	"slices"
	"time"
)

// Wiped directories (simConfig.Wipes): a voter's data directory is wiped
// (a deleted volume, a re-imaged machine, an operator's rm -rf) and the
// voter restarts under its name on an empty one, while voters that never
// voted are about and those that did are slow to answer it or cut off from
// it. An empty directory then looks like a brand-new voter's, and only the
// other voters' word can tell the two apart (neverVotedMajorities).
//
// From the start, n−q of the voters (q a majority) hear no ballot request:
// they answer catch-ups and never vote (deaf). A second or more into the
// run, with leases held, a voter that voted is wiped: it crashes and
// restarts under its name on an empty disk, and the deaf voters hear
// requests from then on. Around the restart the voters that voted are
// slow half the time (every message to or from them takes 20–60ms, for
// 100–300ms), and otherwise cut off from the wiped voter for 100ms–1s.
// Later wipes, about every two seconds, take any voter that voted, with
// the same slowness or cuts around them; a voter that never voted, wiped,
// loses nothing.
//
// In half the runs the first wipe is early (earlyWipe): at the mesh's
// first ballot, as soon as a voter that votes promised or accepted a
// ballot of a node that is no voter, while every message from such nodes
// to the other voters that vote is slow and no client of a voter acts
// until the wiped voter's new life has its answers. The others may then
// have promised the ballot, their accepts on the way (design.md R55).
//
// The family keeps within what lockmesh claims: one directory lost at a
// time (the wiped voter votes again before the next is wiped), and the
// operator's word that the mesh is new (simConfig.NewMesh) only at the
// founding voters' first start; half the runs start without it, every
// voter then going live on the others' word.
type wipes struct {
	Wiped, Slowed, Cut, Early int
	// hold keeps every client of a voter from acting, and those of the
	// other nodes until every founding voter votes, before an early wipe.
	hold bool
	// lost is the voter wiped last, until it votes again.
	lost *simNode
}

// wipeDisks turns the family on.
func wipeDisks(c *simConfig) {
	c.Disks, c.Wipes = true, true
	c.NewMesh = c.Seed%28 < 14
	// A fixed set of voters, all with disks, no state lost but the wiped
	// directories': the family's restarts are its own.
	c.Reconfig, c.DiskLoss, c.LostAdopters, c.DisklessVoter = false, false, false, false
	c.MajorityCrash, c.FullRestart, c.Retime = false, false, false
}

// scheduleWipes makes the deaf voters and plans the wipes.
func (s *sim) scheduleWipes(heal time.Duration) {
	s.wipe = &wipes{}
	voters := s.votersUp()
	s.rand.Shuffle(len(voters), func(i, j int) { voters[i], voters[j] = voters[j], voters[i] })
	for _, v := range voters[:len(voters)-s.boot.Majority()] {
		s.setDeaf(v, true)
	}
	first := time.Second + s.jitter(time.Second)
	if s.cfg.Seed/28%2 == 1 {
		first = s.earlyWipe()
	} else {
		s.at(first, func() { s.wipeOne(true) })
	}
	for t := first + s.jitter(2*time.Second); t < heal-time.Second; t += s.jitter(2 * time.Second) {
		s.at(t, func() { s.wipeOne(false) })
	}
	s.at(heal, func() { clear(s.deaf) })
}

// votersUp are the founding voters that run.
func (s *sim) votersUp() []*simNode {
	var vs []*simNode
	for _, n := range s.nodes {
		if n.up && s.boot.IsVoter(n.id) {
			vs = append(vs, n)
		}
	}
	return vs
}

// earlyWipe plans the first wipe at the mesh's first ballot, in half the
// family's runs: no client of a voter acts, nor any before every founding
// voter votes; every message from a node that is no voter to the voters
// that will vote, but one, is slow; and that one is wiped as soon as it
// promised (or, half the time, accepted) another node's ballot. The other
// voters may then have promised it, their accepts on the way, or be
// about to promise it, when the new life asks whether they voted
// (design.md R55). It returns when the later wipes may start.
func (s *sim) earlyWipe() time.Duration {
	var voting []*simNode
	for _, v := range s.votersUp() {
		if !s.deaf[v] {
			voting = append(voting, v)
		}
	}
	v := voting[s.rand.Intn(len(voting))]
	atVote := s.rand.Intn(2) == 0
	per := 20*time.Millisecond + time.Duration(s.rand.Int63n(int64(40*time.Millisecond)))
	until := 500*time.Millisecond + time.Duration(s.rand.Int63n(int64(500*time.Millisecond)))
	for _, u := range voting {
		for _, n := range s.nodes {
			if u != v && !s.boot.IsVoter(n.id) {
				s.setSlowLink(n, u, per, until)
			}
		}
	}
	s.wipe.hold = true
	var watch func()
	watch = func() {
		switch {
		case s.ended || s.healed || !v.up || !s.wipe.hold:
		case s.votedForNonVoter(v, atVote):
			s.wipe.Early++
			s.tracef("%s's directory is wiped at its first %s", v.id, map[bool]string{true: "vote", false: "promise"}[atVote])
			s.wipeVoter(v, true, nil) // the others answer at once
			// The clients wait while the new life asks whether the
			// others voted.
			s.wipe.hold = true
			var release func()
			release = func() {
				if n := v.node; s.ended || !v.up || n != nil && n.acc != nil && n.acc.State() != CatchingUp || s.now >= until {
					s.wipe.hold = false
					return
				}
				s.after(100*time.Microsecond, release)
			}
			s.after(100*time.Microsecond, release)
		case s.now >= until:
			s.wipe.hold = false
		default:
			s.after(100*time.Microsecond, watch)
		}
	}
	s.after(100*time.Microsecond, watch)
	return until + time.Second
}

// holds reports whether c waits for an early wipe (wipes.hold).
func (w *wipes) holds(s *sim, c *simClient) bool {
	return w != nil && w.hold && (s.boot.IsVoter(c.n.id) || slices.ContainsFunc(s.votersUp(), func(v *simNode) bool { return !liveAcceptor(v) }))
}

// votedForNonVoter reports whether v's acceptor holds a ballot of a node
// that is no founding voter, accepted (atVote) or promised.
func (s *sim) votedForNonVoter(v *simNode, atVote bool) bool {
	for _, r := range v.node.acc.regs {
		b := r.promise
		if atVote {
			b = r.accepted
		}
		if b.Node != "" && !s.boot.IsVoter(b.Node) {
			return true
		}
	}
	return false
}

// wipeOne wipes the directory of a voter that voted, unless the last one
// wiped votes not yet; first ends the deafness as it does.
func (s *sim) wipeOne(first bool) {
	w := s.wipe
	if s.healed || s.ended {
		return
	}
	if w.lost != nil {
		if !liveAcceptor(w.lost) {
			return
		}
		w.lost = nil
	}
	var voted []*simNode
	for _, v := range s.votersUp() {
		if !s.deaf[v] && v.disk != nil && v.disk.saved != nil && v.disk.saved.Voted {
			voted = append(voted, v)
		}
	}
	if len(voted) == 0 {
		return
	}
	s.wipeVoter(voted[s.rand.Intn(len(voted))], first, voted)
}

// wipeVoter wipes v's directory and restarts it under its name, the other
// voters of voted (if any) slow to answer it or cut off from it around the
// restart;
// first ends the deafness, and the early wipe's hold, as it does.
func (s *sim) wipeVoter(v *simNode, first bool, voted []*simNode) {
	w := s.wipe
	w.Wiped++
	w.lost = v
	w.hold = false
	s.tracef("%s's directory is wiped; it restarts under its name", v.id)
	s.crash(v)
	v.disk = &simDisk{}
	if first {
		clear(s.deaf)
	}
	if voted == nil {
		s.start(v)
		return
	}
	others := slices.DeleteFunc(slices.Clone(voted), func(u *simNode) bool { return u == v })
	if s.rand.Intn(2) == 0 {
		w.Slowed++
		per := 20*time.Millisecond + time.Duration(s.rand.Int63n(int64(40*time.Millisecond)))
		until := s.now + 100*time.Millisecond + time.Duration(s.rand.Int63n(int64(200*time.Millisecond)))
		for _, u := range others {
			s.setSlow(u, per, until)
		}
	} else if len(others) > 0 {
		w.Cut++
		s.cutOff(v, others, 100*time.Millisecond+time.Duration(s.rand.Int63n(int64(900*time.Millisecond))))
	}
	s.start(v)
}
