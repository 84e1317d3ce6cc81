package quorum

import (
	"math"
	"slices"
	"time"
)

// Going live after a restart. An acceptor restored from its disk that
// never voted is live at once (design.md R50); one on a new disk first
// asks whether any voter voted (R55); any other quarantines and catches up
// (acceptor_quarantine.go, acceptor_catchup.go), and goes live when its
// catch-up meets every majority it was of (R38, R39), when a majority of
// the voters restarted from disks with it (R54), or, once every voter
// answered, when a majority of them lost their registers: a full restart,
// on the wall-clock floor (R41, R42). Going live saves what its disk must
// say first (R48, R56).

// restore starts the acceptor from the state its earlier life saved: on the
// newest configuration it adopted, with its configuration register, its
// epochs above every one it accepted, and, if it ever voted, quarantined for
// the longest lease it may have accepted.
func (a *Acceptor) restore(d *Durable) {
	a.dur = d.clone()
	a.restored = true
	m, vote := a.rules.restartConfig(a.m, &a.dur)
	a.dur.Config = vote
	if a.m.Newer(m) {
		a.m = m
		a.epochFloor = max(a.epochFloor, a.m.EpochFloor)
	}
	if c := a.dur.Config; !c.Promise.IsZero() || !c.Accepted.IsZero() {
		r := a.register(ConfigKey)
		r.promise, r.accepted, r.value = c.Promise, c.Accepted, c.Value
		if v := c.Value.Config; v != nil {
			cc := v.clone()
			r.value.Config = &cc
		}
	}
	a.rules.takeEpochMark(a, a.dur.Reserved)
	a.rules.takeBallotMark(a, a.dur.Ballots)
	if !a.dur.Voted {
		// It never accepted anything: nothing of its earlier life to
		// protect (the incarnation check refuses accepts of the promises
		// it forgot).
		a.state = Live
		a.persistLive()
		return
	}
	a.persistStart()
	a.learnHorizon(a.dur.Horizon)
}

// restartConfig is the configuration an acceptor restarted from d starts
// on, the newer of m and the newest it adopted, and its own promise and
// vote on the configuration register, which d kept (design.md R53).
func restartConfig(m Membership, d *Durable) (Membership, DurableRegister) {
	if m.Newer(d.Membership) {
		m = d.Membership.clone()
	}
	return m, d.Config
}

// takeEpochMark raises the epoch floor to an epoch mark saved on a disk:
// this acceptor's own, or that of a peer recovering from its disk
// (design.md R51).
func (a *Acceptor) takeEpochMark(mark uint64) { a.epochFloor = max(a.epochFloor, mark) }

// takeBallotMark raises the promise floor to the ballot mark this
// acceptor's disk saved (design.md R52).
func (a *Acceptor) takeBallotMark(mark uint64) {
	a.promiseFloor = maxBallot(a.promiseFloor, Ballot{Counter: mark})
}

// neverVotedMajorities reports whether an acceptor on a new disk may vote at
// once: whether the voters that said they never voted show that no
// majority of the configuration ever accepted anything, so that nothing
// was chosen and no lease runs.
//
// The acceptor's own empty disk is no evidence: a disk wiped, replaced or
// re-imaged under a name that voted is empty too, and that voter's earlier
// votes are exactly what must not be forgotten. So only the others' word
// counts: those that never voted must meet every majority, n−q+1 of the
// others for n voters with majority q (both others of 3, three of the
// other four of 5). Each answered after this life began, so after every
// vote of the earlier lives; a majority that had accepted anything would
// hold one of them, which would have voted.
//
// A brand-new mesh that must start with fewer voters up than that cannot
// tell itself from a wiped voter with a slow one (a voter cut off, and
// one that never voted, look alike from every node that answers); it needs
// the operator's word instead (NewMesh), which takes a majority of the
// voters, itself included, that never voted.
func (a *Acceptor) neverVotedMajorities() bool {
	others := 0
	for _, p := range a.catchUp.peers {
		if p.fresh && a.m.IsVoter(p.id) {
			others++
		}
	}
	return a.rules.neverVoted(a, others)
}

// neverVoted reports whether others, the other voters that said they never
// voted, meet every majority, or with the operator's word (NewMesh) make
// a majority with this one (design.md R55).
func (a *Acceptor) neverVoted(others int) bool {
	if a.cfg.NewMesh {
		return others+1 >= a.m.Majority()
	}
	return others >= len(a.m.Voters)-a.m.Majority()+1
}

// abandonProbe turns a probing acceptor into one that forgot its state: it
// waits out its quarantine (counted from its start) and catches up.
func (a *Acceptor) abandonProbe() {
	a.probing, a.amnesiac = false, true
	a.catchUp = nil
	a.state = Quarantined
	a.maybeEndQuarantine()
}

func (a *Acceptor) maybeGoLive() {
	if a.state != CatchingUp || a.diskErr != nil {
		return
	}
	if a.probing {
		switch {
		case a.neverVotedMajorities():
			a.probing = false
			a.goLive()
		case len(a.m.Voters) == 1:
			// A voter alone has nobody to ask: it recovers as one
			// that forgot (without NewMesh).
			a.abandonProbe()
		}
		return
	}
	if !a.rules.horizonOver(a, a.clock.Now()) {
		return
	}
	if m := a.rules.chosenNewer(a); m != nil {
		// Adopting it starts the catch-up again, among its voters.
		a.Adopt(*m)
		return
	}
	answered := 1 // this acceptor, recovering
	for _, p := range a.catchUp.peers {
		if a.rules.countsAsLost(p) || p.done {
			answered++
		}
	}
	switch {
	case a.restored && a.restartedMajority(a.m.Voters):
		a.noteRestartedWith(false)
		a.rules.demoteCopies(a)
	case a.rules.caughtUp(a) && (a.restored || !a.newerMaybeChosen()):
		// Caught up from voters that meet every majority this acceptor
		// was part of. One restored from its disk is on the newest
		// configuration it adopted (Adopt saves it first), as before
		// its restart. One that lost its disk may have adopted a newer
		// one and forgotten it: voting in an older one could then form a
		// majority of a configuration that was replaced. It waits while
		// a newer one may have been chosen, to adopt it from a voter
		// that did, or from chosenNewer, or to learn that it was not
		// (Recovery says so: NewerConfig; design.md R65).
	case a.caughtUpFrom(a.m.Voters) && a.restored && a.restartedMajority(a.m.Prev):
		a.noteRestartedWith(false)
		a.rules.demoteCopies(a)
		// A majority of the voters before the pending change restarted
		// with this one: what a majority of them alone held is lost
		// (every lease they accepted has ended, and their marks keep
		// epochs and ballots going up), and the change cannot finish
		// without them. Waiting would stall the mesh for good.
		a.floorOnly = true
	case a.rules.lostMajority(a) && a.rules.heardAll(a, answered) && !a.rules.newerStopsFullRestart(a):
		// Every voter answered and a majority of them lost their state:
		// a full restart (design.md R41).
		a.floorOnly = true
		a.noteRestartedWith(true)
		a.rules.demoteCopies(a)
	default:
		return
	}
	a.goLive()
}

// countsAsLost reports whether p counts among the voters that lost their
// registers with this acceptor, for a full restart: it is recovering too,
// or it concluded the full restart on this acceptor's word and votes by
// now, having lost its registers all the same; what it accepted since,
// this acceptor has merged (done), and what the others did, it merges from
// them: every voter answered (design.md R45).
func (p *peerCatchUp) countsAsLost() bool { return p.recovering || p.lostWith && p.done }

// heardAll reports whether every voter answered, answered counting this
// acceptor too. A full restart waits for every voter, not only a
// majority: a majority of an old configuration's voters, restarted
// together, must not take itself for the mesh, and a current voter among
// them tells them the newer configuration instead (design.md R41).
func (a *Acceptor) heardAll(answered int) bool { return answered == len(a.catchUp.peers)+1 }

// lostMajority reports whether the voters that lost their registers with
// this acceptor (itself, and the peers countsAsLost) are a majority of the
// voters or, while a change is pending, of those before it, which alone
// hold the keys the change has not moved yet. Counting the new voters
// only, two of three voters before an addition that restarted, one on a
// new disk, waited for each other for good, and the pending change could
// not finish without them (design.md R42).
func (a *Acceptor) lostMajority() bool {
	return a.lostIn(a.m.Voters) || a.m.Pending && a.lostIn(a.m.Prev)
}

// lostIn reports whether a majority of voters lost their registers with
// this acceptor, itself among them.
func (a *Acceptor) lostIn(voters []NodeID) bool {
	n := 0
	if slices.Contains(voters, a.cfg.ID) {
		n++
	}
	for _, p := range a.catchUp.peers {
		if a.rules.countsAsLost(p) && slices.Contains(voters, p.id) {
			n++
		}
	}
	return n >= len(voters)/2+1
}

// newerStopsFullRestart reports whether a full restart must wait: one that
// lost its disk waits while a newer configuration may have been chosen, as
// its catch-up does. Going live in the old one with a majority that lost
// its state let a later change write a second configuration with the
// chosen one's ID (design.md R67).
func (a *Acceptor) newerStopsFullRestart() bool {
	return !a.restored && a.newerMaybeChosen()
}

// restartedMajority reports whether an acceptor that restarted from its disk
// may vote although it could not catch up from enough of voters: a
// majority of them, itself included, restarted too, each with
// a disk. Then a majority lost its registers (a full restart, as far as
// locks go: every lease any of them accepted has ended once its quarantine
// is over, and the caller checks this one's), and what can be learned is
// what the disks hold. Their epoch marks are above every epoch they
// accepted (and each reports its own, to proposers, once it votes), their
// ballot marks above every ballot, so the values some voter that kept
// running may still hold are never again the highest a majority reports.
// What is left to know is that the configuration is the newest: none of
// them may have accepted a newer one. Every newer configuration was
// accepted by a majority of this one first, which meets this majority,
// each of which kept on disk what it accepted (or, with an empty disk,
// never accepted one).
//
// A voter that said it was recovering counts even if it votes again by now
// on this acceptor's word (the first of two restarted voters goes live on
// the other's word before the other hears back from it; it then answers
// LostWith): its registers are gone all the same, and a value chosen since
// it went live was chosen without this acceptor, by a majority every other
// majority meets in some voter that holds it. One that votes after
// catching up from others does not count: a value chosen with it since
// may live at it and at voters this acceptor has not heard from only.
//
// A voter that votes and says its disk holds no vote (Fresh) does not
// count: it may have gone live through the new-mesh probe on a disk that
// replaced one that voted (design.md R54). So two voters of three restarted together, the third
// gone, wait for it when the first had never voted: it went live at once
// and never said it was recovering.
//
// With fewer restarted voters the acceptor must catch up as any other: a
// value a majority chose may now live only at voters it has not heard
// from.
func (a *Acceptor) restartedMajority(voters []NodeID) bool {
	if a.newerMaybeChosen() || !slices.Contains(voters, a.cfg.ID) {
		return false
	}
	n := 1
	for _, p := range a.catchUp.peers {
		if a.rules.peerAcceptedNewer(p) {
			return false
		}
		if a.rules.countsAsRestarted(p) && slices.Contains(voters, p.id) {
			n++
		}
	}
	return n >= len(voters)/2+1
}

// acceptedNewer reports whether p said it accepted a configuration newer
// than the adopted one, which a majority restarted from disks must not
// overlook (design.md R65).
func (p *peerCatchUp) acceptedNewer() bool { return p.newer != 0 }

// countsAsRestarted reports whether p counts toward a majority restarted
// from disks: it said it was recovering from its disk, or went live on
// this acceptor's word (design.md R45, R54).
func (p *peerCatchUp) countsAsRestarted() bool { return p.lost }

// noteRestartedWith records, as the acceptor goes live on the word of
// voters that lost their registers with it, which voters (in which
// incarnation) it counted: those that ask it later may count it in turn
// (CatchUpResponse.LostWith). After a restart from disk those are the
// voters that said so from theirs (lost); concluding a full restart
// (recovering too), those still recovering as well. Without the second,
// the first of two voters to conclude a full restart votes, and the
// second, which never heard it say "recovering", can never conclude it:
// with a newer configuration accepted by both and adopted by neither (a
// change's last write, at two ballots) no other way to go live is open,
// and the configuration's only majority never votes again (design.md
// R45).
func (a *Acceptor) noteRestartedWith(recovering bool) {
	a.restartedWith = make(map[NodeID]uint64)
	for _, p := range a.catchUp.peers {
		if (p.lost || (recovering && p.recovering)) && p.inc != 0 {
			a.restartedWith[p.id] = p.inc
		}
	}
}

// demoteCopies marks what an acceptor that goes live without a full
// catch-up learned in it as copies, not as accepted: each register keeps
// its value (and its lease timer) at copyBallot of the ballot it was
// accepted at, which no other voter's register can hold.
//
// A majority lost its registers, and what it holds now it copied from the
// voters that answered, which need not meet every majority: a value chosen
// before the loss may live only at a voter it did not hear from, and what
// it copied may be older. Left at the ballot it was accepted at, the same
// stale value copied into a majority of restarted voters looks chosen (a
// majority reports one ballot), and a read concludes it without writing
// it: a later round that reaches the voter holding the newer value, at a
// higher ballot, finds that one again, and the register goes back and
// forth with no write between (design.md R44). As copies, no two voters
// agree on them: a round that builds on one writes it first, at a ballot
// above every one the restarted voters promised (their ballot marks), so
// that the value it returns is the register's from then on. (A sweep
// finds no two voters agreeing on them either, and writes such a key back
// before it forgets it: Proposer.maybeWriteBack.)
//
// The configuration register of an acceptor restored from its disk is no
// copy (merge leaves it alone); that of one that lost its disk is, and is
// demoted like the others. (The rules of voter changes read the votes the
// disk kept, not the register: ownNewerConfig.)
func (a *Acceptor) demoteCopies() {
	for key, r := range a.regs {
		if (key != ConfigKey || !a.restored) && !r.accepted.IsZero() {
			r.accepted = a.copyBallot(r.accepted)
		}
	}
}

// copyBallot is the ballot this acceptor holds a copy of a value accepted
// at b at: just below b, above every real ballot below b's counter, and
// this acceptor's own (no proposer uses incarnation MaxUint64, and no
// other voter names this one). Copies keep the order of the ballots they
// copy among themselves and against every real ballot but b's counter's.
// (Real counters start at 1; a copy of a copy at counter 0 stays there,
// below every real ballot.)
func (a *Acceptor) copyBallot(b Ballot) Ballot {
	c := b.Counter
	if c > 0 {
		c--
	}
	return Ballot{Counter: c, Incarnation: math.MaxUint64, Node: a.cfg.ID}
}

// quietLives are the acceptor's earlier lives, from its disk, since the
// last one that went live (Durable.Quiet, less this one).
func (a *Acceptor) quietLives() []uint64 {
	var q []uint64
	for _, inc := range a.dur.Quiet {
		if inc != a.cfg.Incarnation {
			q = append(q, inc)
		}
	}
	return q
}

// persistStart saves, as an acceptor that voted before starts from its
// disk, this life among the quiet ones (Durable.Quiet), before it tells
// any voter that it is recovering from its disk: a voter that counts it
// as restarted with it may then count its later lives too, so long as
// none of them goes live. A failed save silences it, as any other.
func (a *Acceptor) persistStart() {
	if a.cfg.Incarnation == 0 {
		return
	}
	a.persist(func(d *Durable) {
		d.Quiet = append(d.Quiet, a.cfg.Incarnation)
		if n := len(d.Quiet); n > MaxQuietLives {
			d.Quiet = slices.Delete(d.Quiet, 0, n-MaxQuietLives)
		}
	})
}

// goLive makes the acceptor vote, once what its disk must say is saved.
func (a *Acceptor) goLive() {
	a.catchUp = nil
	if !a.persistLive() {
		a.state = Quarantined // for good: see DiskError
		return
	}
	a.state = Live
}

// persistLive saves the configuration the acceptor votes in, if its disk
// does not hold it yet (and on a new disk, that it has not voted).
//
// An acceptor on a new disk that recovered as one that forgot (amnesiac)
// saves more: that it voted, the horizon, and marks above every epoch and
// ballot it now holds. What it copied stands in for the votes of its
// earlier life, which its new disk never saw; a disk that said it never
// voted let it go live at once after its next restart, with no quarantine
// and no registers, and a majority with it no longer met the one that had
// chosen a grant (I2, design.md R56).
func (a *Acceptor) persistLive() bool {
	amnesiac, quiet := a.rules.savesVoted(a), a.rules.endsQuiet(a)
	if a.disk == nil || (a.restored && a.dur.Membership.ID == a.m.ID && !amnesiac && !quiet) {
		return a.diskErr == nil
	}
	ok := a.persist(func(d *Durable) {
		d.Membership = a.m.clone()
		if quiet {
			// This life votes from now on: no longer a quiet one.
			d.Quiet = nil
		}
		if amnesiac {
			epoch, counter := a.marks()
			d.Voted = true
			d.Horizon = max(d.Horizon, a.Horizon())
			if epoch > d.Reserved {
				d.Reserved = epoch + epochReserve
			}
			if counter >= d.Ballots {
				d.Ballots = counter + ballotReserve
			}
		}
	})
	a.restored = a.restored || ok
	return ok
}

// savesVoted reports whether the acceptor, going live, saves that it
// voted: it is on a new disk and recovered as one that forgot; what it
// copied stands in for the votes of its earlier life (design.md R56).
func (a *Acceptor) savesVoted() bool { return a.amnesiac && !a.dur.Voted }

// endsQuiet reports whether going live empties the disk's quiet lives:
// this life votes from now on (design.md R48).
func (a *Acceptor) endsQuiet() bool { return len(a.dur.Quiet) > 0 }

// marks are the highest epoch and ballot counter the acceptor holds: its
// floors, and every register's promise, accepted ballot and epochs.
func (a *Acceptor) marks() (epoch, counter uint64) {
	epoch, counter = a.epochFloor, a.promiseFloor.Counter
	for _, r := range a.regs {
		epoch = max(epoch, r.maxEpoch, r.value.Epoch)
		counter = max(counter, r.promise.Counter, r.accepted.Counter)
	}
	return epoch, counter
}

// Recovery says what a recovering acceptor waits for.
type Recovery struct {
	// LiveFrom is the earliest time, on the acceptor's clock, at which it
	// may vote: its start plus its quarantine, or the longest lease horizon
	// another voter reported.
	LiveFrom time.Duration
	// Waiting are the voters that have not yet answered its catch-up in
	// full; Recovering those that answered that they are recovering too.
	Waiting, Recovering []NodeID
	// NewerConfig, for an acceptor that lost its disk (or has none), is
	// the version of a newer configuration that some voters accepted and
	// that may have been chosen: the acceptor waits to adopt it, or to
	// learn that it was not chosen (0: nothing of the kind). A voter
	// change, from any node, settles it.
	NewerConfig uint64
	// NeverVoted: the acceptor is on a new disk, and Waiting are the
	// voters it waits for to say they never voted (it votes at once when
	// enough of them do, and recovers as one that forgot as soon as one
	// says it voted).
	NeverVoted bool
	// NewMeshRefused names the voter that said it voted while this one,
	// on a new disk, was told the mesh was brand-new (AcceptorConfig.
	// NewMesh): the word was wrong, and the acceptor recovers as one that
	// forgot. It stays set after the acceptor votes.
	NewMeshRefused NodeID
}

// Recovery reports what the acceptor waits for before it votes (zero once
// it is live, but for NewMeshRefused).
func (a *Acceptor) Recovery() Recovery {
	if a.state == Live {
		return Recovery{NewMeshRefused: a.newMeshRefused}
	}
	r := Recovery{LiveFrom: a.liveFrom, NeverVoted: a.probing, NewMeshRefused: a.newMeshRefused}
	if a.catchUp == nil {
		return r
	}
	for _, p := range a.catchUp.peers {
		switch {
		case a.probing:
			if !p.fresh && a.m.IsVoter(p.id) {
				r.Waiting = append(r.Waiting, p.id)
			}
		case p.done:
		case p.recovering:
			r.Recovering = append(r.Recovering, p.id)
		default:
			r.Waiting = append(r.Waiting, p.id)
		}
	}
	if !a.restored && a.state == CatchingUp {
		r.NewerConfig = a.rules.newerMaybeChosen(a)
	}
	return r
}
