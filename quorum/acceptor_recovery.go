package quorum

import (
	"math"
	"slices"
	"strings"
	"time"
)

// An acceptor forgets everything when its process ends. Coming back, it must
// not vote as if it remembered (see the package documentation):
//
//  1. Quarantine: it answers nothing until every lease it may have accepted
//     before has ended, measured on its own clock.
//  2. Catch-up: it asks every other voter for its registers, bucket by
//     bucket, and keeps for each key the highest promise, the value of the
//     highest accepted ballot and the highest epoch. It goes live once so
//     many others have answered in full that every accept majority of its
//     earlier life, less itself, meets them: of n voters with majority q,
//     n-q+1 others (a majority when n is odd). While a change is pending
//     this must hold for the voters before the change too, so the removed
//     voter, if it still answers, is asked as well.
//
// If so many voters are recovering at once that no such set exists, the state
// of a majority is gone for good; once every voter has answered, the
// acceptor then goes live on what it could learn, and epochs rest on the
// wall-clock floor (FloorOnly).

// catchUp tracks a recovering acceptor's transfer from each other voter.
type catchUp struct {
	buckets uint32
	peers   []*peerCatchUp
	outbox  []CatchUpRequest
	req     CatchUpRequest // template
}

type peerCatchUp struct {
	id         NodeID
	next       uint32 // next bucket to ask for
	done       bool   // every bucket merged
	recovering bool   // said it is recovering too
	askedAt    time.Duration
	asked      bool
	// What a peer with a disk said of itself (CatchUpResponse): durable,
	// recovering from its saved state; fresh, never voted; newer, the
	// version of a configuration it accepted and has not adopted.
	durable, fresh bool
	newer          uint64
	inc            uint64 // its incarnation, as it last answered
	answered       bool   // it answered (newer says what it accepted)
	forgot         bool   // it answered that it lost its earlier lives' state (newer says nothing of them)
	// lost: it said, since this acceptor started, that it was recovering
	// from its disk: its registers are gone, even if it votes again now on
	// this acceptor's word (LostWith). Once it answers as a voter that
	// caught up from others, it holds what a majority held, and no longer
	// counts.
	lost bool
	// lostWith: it said it went live on this acceptor's word, this
	// incarnation's, after both had lost their registers (LostWith).
	lostWith bool
	// With newer, when it said: the ballot it accepted that configuration
	// at, and the configuration.
	newerBallot  *Ballot
	newerMembers *Membership
}

// horizonBucket marks a catch-up request, and its answer, that asks for the
// lease horizon alone: no bucket of registers is ever numbered so.
const horizonBucket = ^uint32(0)

// askHorizons asks every voter that has not answered yet for its lease
// horizon (see horizonAsk).
func (a *Acceptor) askHorizons(now time.Duration) {
	a.horizonAsked = now
	a.horizonOut = a.horizonOut[:0]
	for _, v := range a.horizonAsk {
		a.horizonOut = append(a.horizonOut, CatchUpRequest{Config: a.m.ID, From: a.cfg.ID, To: v, Inc: a.cfg.Incarnation, Bucket: horizonBucket})
	}
}

func (a *Acceptor) maybeEndQuarantine() {
	if a.state != Quarantined || a.diskErr != nil {
		return
	}
	if !a.rules.quarantineOver(a, a.clock.Now()) {
		return
	}
	a.startCatchUp()
}

// quarantineOver reports whether the acceptor's quarantine has run its
// length at now, on its own clock (design.md R35).
func (a *Acceptor) quarantineOver(now time.Duration) bool {
	return now >= a.startedAt+a.cfg.Quarantine
}

// horizonOver reports whether the longest lease horizon the acceptor heard
// of has passed since its start at now (design.md R36).
func (a *Acceptor) horizonOver(now time.Duration) bool { return now >= a.liveFrom }

// startCatchUp asks every other voter, of the configuration and, while a
// change is pending, of the one before, for its registers.
func (a *Acceptor) startCatchUp() {
	now := a.clock.Now()
	a.state = CatchingUp
	a.horizonAsk, a.horizonOut = nil, nil // every answer to the catch-up tells it
	a.catchUp = &catchUp{
		buckets: a.cfg.CatchUpBuckets,
		req: CatchUpRequest{Config: a.m.ID, From: a.cfg.ID, Buckets: a.cfg.CatchUpBuckets, Inc: a.cfg.Incarnation,
			Quiet: a.quietLives()},
	}
	for _, v := range a.rules.catchUpPeers(a) {
		p := &peerCatchUp{id: v}
		a.catchUp.peers = append(a.catchUp.peers, p)
		a.catchUp.ask(p, now)
	}
	a.maybeGoLive()
}

// catchUpPeers are the voters a catch-up asks: every other voter and,
// while a change is pending, every other voter before it (design.md R38,
// R39).
func (a *Acceptor) catchUpPeers() []NodeID {
	var peers []NodeID
	for _, v := range a.m.Voters {
		if v != a.cfg.ID {
			peers = append(peers, v)
		}
	}
	for _, v := range a.m.Prev {
		if v != a.cfg.ID && !a.m.IsVoter(v) {
			peers = append(peers, v)
		}
	}
	return peers
}

func (c *catchUp) ask(p *peerCatchUp, now time.Duration) {
	r := c.req
	r.To, r.Bucket = p.id, p.next
	c.outbox = append(c.outbox, r)
	p.asked, p.askedAt = true, now
}

// tick asks again every peer that has not answered within retry.
func (c *catchUp) tick(now, retry time.Duration) {
	for _, p := range c.peers {
		if !p.done && (!p.asked || now-p.askedAt >= retry) {
			c.ask(p, now)
		}
	}
}

func (c *catchUp) next(retry time.Duration) (time.Duration, bool) {
	var at time.Duration
	ok := false
	for _, p := range c.peers {
		if !p.done && p.asked && (!ok || p.askedAt+retry < at) {
			at, ok = p.askedAt+retry, true
		}
	}
	return at, ok
}

// HandleCatchUp answers another voter's catch-up request with one bucket of
// this acceptor's registers. Only a live acceptor answers with data.
func (a *Acceptor) HandleCatchUp(req *CatchUpRequest) *CatchUpResponse {
	resp := &CatchUpResponse{Config: a.m.ID, From: a.cfg.ID, To: req.From, Inc: a.cfg.Incarnation,
		Bucket: req.Bucket, List: req.List, Horizon: a.Horizon()}
	if a.state == Live && a.diskErr == nil {
		resp.PromiseFloor, resp.EpochFloor = a.promiseFloor, a.epochFloor
		if inc := a.restartedWith[req.From]; inc != 0 && req.Inc != 0 {
			resp.LostWith = a.rules.countedLife(req.Inc, inc) || a.rules.quietSince(req, inc)
		}
	}
	if req.Config != a.m.ID {
		a.stats.WrongConfig++
		resp.Status = StatusWrongConfig
		m := a.m.clone()
		resp.Members = &m
		return resp
	}
	a.maybeEndQuarantine()
	if a.state == CatchingUp {
		// A voter that asks is in a life of its own: one that started
		// since it answered this acceptor's catch-up?
		for _, p := range a.catchUp.peers {
			if p.id == req.From {
				a.rules.peerRestarted(a, p, req.Inc)
			}
		}
	}
	if a.disk != nil && a.diskErr == nil {
		resp.Fresh = !a.dur.Voted && !a.amnesiac
		resp.NewerConfig = a.newerConfigAccepted()
		resp.NewerBallot, resp.NewerMembers = a.newerConfigRegister()
	}
	if a.state != Live || a.diskErr != nil {
		resp.Status = StatusRecovering
		a.rules.tellsRecovery(a, resp)
		return resp
	}
	if req.Buckets == 0 || req.Bucket >= req.Buckets {
		resp.Status = StatusOK
		return resp
	}
	now := a.clock.Now()
	for key, r := range a.regs {
		if bucketOf(key, req.Buckets) != req.Bucket {
			continue
		}
		if req.List {
			if !r.accepted.IsZero() {
				resp.Entries = append(resp.Entries, Entry{Key: key})
			}
			continue
		}
		resp.Entries = append(resp.Entries, Entry{
			Key: key, Promise: r.promise, Accepted: r.accepted, Value: r.value, MaxEpoch: a.maxEpoch(r),
			Remaining: r.remaining(now),
		})
	}
	if req.List {
		// Listed in a reproducible order, for the simulator.
		slices.SortFunc(resp.Entries, func(x, y Entry) int { return strings.Compare(x.Key, y.Key) })
	}
	return resp
}

// countedLife reports whether the asker's life is the one this acceptor
// counted as restarted with it, which it tells so (LostWith). Its later
// lives may have come after that one voted, and values were chosen with
// it: said to a later life, the word let it take a single restart for a
// majority's and go live on the floor without them (design.md R46).
func countedLife(asker, counted uint64) bool { return asker == counted }

// quietSince reports whether the asker's disk shows that none of its lives
// since the one counted went live (CatchUpRequest.Quiet): its registers are
// then as gone as that life's, and nothing was chosen with it since, so a
// partner that restarts again before it votes may count this voter too
// (design.md R46).
func quietSince(req *CatchUpRequest, counted uint64) bool { return slices.Contains(req.Quiet, counted) }

// tellsRecovery says, in a recovering acceptor's answer, what it knows of
// its earlier lives: restarted from its disk, which holds every
// configuration it accepted, and its epoch mark (Durable); or without the
// disk of its earlier lives, whose votes are gone (Forgot; a new disk's
// probe may yet show there was nothing to lose). The answer of one that
// forgot must not stand for a disk's: counted as one that did not accept a
// newer configuration, or as one restarted from its disk (design.md R54,
// R57).
func (a *Acceptor) tellsRecovery(resp *CatchUpResponse) {
	switch {
	case a.restored && a.diskErr == nil:
		resp.Durable, resp.EpochFloor = true, a.dur.Reserved
	case !a.restored:
		resp.Forgot = true
	}
}

// HandleCatchUpResponse merges one bucket from another voter.
func (a *Acceptor) HandleCatchUpResponse(resp *CatchUpResponse) {
	if resp.Status == StatusWrongConfig && resp.Members != nil {
		// The other voter is of a newer configuration: it has adopted
		// one that was chosen, so this acceptor may too (and then asks
		// the new voters). An older one learns ours from its proposers.
		a.Adopt(*resp.Members)
		return
	}
	if resp.Bucket == horizonBucket {
		// An answer to askHorizons: its horizon is all it says (its other
		// news, recovering say, may be old by now: the catch-up asks
		// again).
		a.learnHorizon(resp.Horizon)
		a.horizonAsk = slices.DeleteFunc(a.horizonAsk, func(v NodeID) bool { return v == resp.From })
		return
	}
	if a.state != CatchingUp || resp.Config != a.m.ID {
		return
	}
	a.learnHorizon(resp.Horizon)
	var p *peerCatchUp
	for _, q := range a.catchUp.peers {
		if q.id == resp.From {
			p = q
		}
	}
	if p == nil {
		return
	}
	a.rules.peerRestarted(a, p, resp.Inc)
	if p.done {
		return
	}
	p.fresh, p.newer, p.newerBallot, p.newerMembers, p.inc = resp.Fresh, resp.NewerConfig, nil, nil, resp.Inc
	p.answered, p.forgot = true, resp.Forgot
	p.lost = p.lost || resp.LostWith
	p.lostWith = p.lostWith || resp.LostWith
	if resp.NewerConfig != 0 && resp.NewerBallot != nil && resp.NewerMembers != nil &&
		resp.NewerMembers.Version() == resp.NewerConfig && resp.NewerMembers.Validate() == nil {
		b, m := *resp.NewerBallot, resp.NewerMembers.clone()
		p.newerBallot, p.newerMembers = &b, &m
	}
	if a.probing && !resp.Fresh {
		// Some voter has voted, or may have: this is no new mesh, and a
		// new disk says nothing of what this node did before it (its old
		// disk may be lost). Recover as one that forgot.
		if a.cfg.NewMesh {
			a.newMeshRefused = resp.From
		}
		a.abandonProbe()
		return
	}
	switch resp.Status {
	case StatusNotVoter:
		// A voter of the configuration before a pending change, removed
		// by it, that has no acceptor: it restarted since, and kept no
		// registers. Like a voter recovering, it has nothing to give.
		if !a.m.IsVoter(p.id) {
			p.recovering = true
			a.maybeGoLive()
		}
		return
	case StatusRecovering:
		p.recovering = true
		p.durable = resp.Durable
		p.lost = p.lost || resp.Durable
		if resp.Durable {
			a.rules.takeEpochMark(a, resp.EpochFloor)
		}
		a.maybeGoLive()
		return
	case StatusOK:
	default:
		return
	}
	if resp.Bucket != p.next {
		return // an answer to an earlier, repeated question
	}
	p.recovering = false
	a.rules.peerCaughtUp(p, resp)
	a.mergeFloors(resp.PromiseFloor, resp.EpochFloor)
	for i := range resp.Entries {
		a.merge(&resp.Entries[i])
	}
	p.next++
	if p.next >= a.catchUp.buckets {
		p.done = true
		a.maybeGoLive()
		return
	}
	a.catchUp.ask(p, a.clock.Now())
}

// answeredLive takes note of a bucket p answered as a live voter: if not on
// this acceptor's word, it caught up from others (or never lost anything
// since this acceptor started), and holds what a majority held. It no
// longer counts as a voter that lost its registers with this one: counted
// so, it let a chain of restarts that never overlapped in a majority pass
// for one that did (design.md R47).
func (p *peerCatchUp) answeredLive(resp *CatchUpResponse) {
	if !resp.LostWith {
		p.lost, p.lostWith = false, false
	}
}

// peerRestarted starts the catch-up over if peer p, from which this
// acceptor has merged registers, is now in another life (incarnation inc):
// what it handed over came from a life that is gone, and the voters may
// since have concluded a full restart that counted this acceptor as one
// with nothing, building a new era whose ballots start below the ones it
// copied. Carried into that era, a stale copy at its old, higher ballot
// was the highest a read found: written back over a live grant, it let
// another node take the key (I1, aimed seed 7223 with 5 voters, memory
// only: n4 caught up from n2, n2 n0 n3 then crashed and concluded a full
// restart while n4 still counted n2 done). Every register it merged is
// dropped (its floors stay: they only go up) and every voter is asked
// again.
func (a *Acceptor) peerRestarted(p *peerCatchUp, inc uint64) {
	if p.inc == 0 || inc == 0 || inc == p.inc {
		return
	}
	if !p.done && p.next == 0 {
		p.inc = inc // nothing merged from its earlier life
		return
	}
	for key, r := range a.regs {
		if key == ConfigKey && a.restored {
			continue // its own vote, from its disk
		}
		a.promiseFloor = maxBallot(a.promiseFloor, maxBallot(r.promise, r.accepted))
		a.epochFloor = max(a.epochFloor, r.maxEpoch, r.value.Epoch)
		delete(a.regs, key)
		a.unlink(r)
	}
	now := a.clock.Now()
	for _, q := range a.catchUp.peers {
		q.next, q.done, q.recovering, q.answered = 0, false, false, false
		q.lost = q.lostWith // what it said of restarts with this acceptor stands
		a.catchUp.ask(q, now)
	}
	p.inc = inc
	a.stats.CatchUpRestarts++
}

// learnHorizon takes the lease horizon another voter reported: this
// acceptor may vote only once a lease of that length, accepted before its
// start (in its earlier life, perhaps under a longer MaxTTL than today's),
// has ended (review finding 2). A lease of TTL h accepted before the start
// has a holder deadline within h of it in real time (HolderTTL ≤ γ·h), and
// h on this clock lasts at least that.
func (a *Acceptor) learnHorizon(h time.Duration) {
	if h <= 0 {
		return
	}
	a.rules.waitOut(a, h)
	if h > a.horizon {
		a.horizon = h
	}
	// Others restarting meanwhile learn it from this acceptor too, while
	// a lease of that length begun before now could run (generously).
	a.horizonUntil = max(a.horizonUntil, a.clock.Now()+2*a.stretch(h))
}

// waitOut keeps the acceptor from voting until a lease of length h,
// accepted before its start, has ended (design.md R36).
func (a *Acceptor) waitOut(h time.Duration) { a.liveFrom = max(a.liveFrom, a.startedAt+h) }

func (a *Acceptor) merge(e *Entry) {
	if e.Key == "" {
		return
	}
	r := a.register(e.Key)
	if r.promise.Less(e.Promise) {
		r.promise, r.promisedBy = e.Promise, 0
	}
	if e.Key == ConfigKey && !a.rules.mergesConfig(a) {
		return
	}
	if r.accepted.Less(e.Accepted) {
		if !r.value.sameGrant(e.Value) {
			r.hasTimer = false
		}
		r.accepted, r.value, r.copied = e.Accepted, e.Value, true
	}
	a.rules.timeMerged(a, r, e)
	r.maxEpoch = max(r.maxEpoch, e.MaxEpoch, e.Value.Epoch)
}

// mergesConfig reports whether a catch-up merges a copy of the
// configuration register. One restored from its disk does not: its disk
// kept every vote it cast there, a copy would stand in for nothing, and
// would look like a vote to a read. One that lost its disk does need one:
// it may have been of the majority that chose the value, and must answer
// prepares as such (design.md R68).
func (a *Acceptor) mergesConfig() bool { return !a.restored }

// timeMerged times r, into which e was merged, if a voter times e's grant
// still: here too, for as long on this clock. Some voter that accepted the
// grant's latest lease period answers every catch-up (the voters asked
// meet every accept majority), so a live lease is timed here before this
// acceptor votes; learned without a timer, a majority with this acceptor
// could grant the key while the lease ran (design.md R36).
func (a *Acceptor) timeMerged(r *register, e *Entry) {
	if e.Remaining <= 0 || !e.Value.Held || !r.value.sameGrant(e.Value) {
		return
	}
	end := a.clock.Now() + a.stretch(e.Remaining)
	if !r.hasTimer || end > r.until {
		r.until = end
	}
	r.hasTimer = true
}

// isCopy reports whether r holds a value this acceptor copied in a catch-up
// rather than accepted (Result.Copy).
//
// Copied at the ballot it was accepted at, an unchosen value accepted by
// one voter looked chosen once two voters that caught up from it (each
// from voters meeting every majority, but not from the one voter holding
// a higher ballot, which was recovering) joined it: three of five reported
// one ballot, a read's peek took that for a chosen configuration, a change
// adopted it, and the next read that met the higher ballot wrote that one
// back: two configurations with one id (I5,
// TestAudit7ConfigCopiesLookChosen).
func (a *Acceptor) isCopy(r *register) bool { return a.rules.isCopy(r) }

// isCopy is the rule of Acceptor.isCopy: a copy is no vote (design.md
// R43).
func (r *register) isCopy() bool { return r.copied }

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
	answered := 1
	lost := []NodeID{a.cfg.ID} // this acceptor is recovering too
	for _, p := range a.catchUp.peers {
		switch {
		case a.rules.countsAsLost(p):
			lost = append(lost, p.id)
			answered++
		case p.done:
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
	case a.rules.lostMajority(a, lost) && a.rules.heardAll(a, answered) && !a.rules.newerStopsFullRestart(a):
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

// caughtUpFrom reports whether the others done meet every majority of
// voters that this acceptor may have been part of: n−q+1 of them
// (design.md R38).
func (a *Acceptor) caughtUpFrom(voters []NodeID) bool {
	if !slices.Contains(voters, a.cfg.ID) {
		return true // it was not a voter there
	}
	done := 0
	for _, p := range a.catchUp.peers {
		if p.done && slices.Contains(voters, p.id) {
			done++
		}
	}
	n := len(voters)
	return done >= n-(n/2+1)+1
}

// caughtUp reports whether the catch-up meets every majority this acceptor
// may have been part of: of the voters and, while a change is pending, of
// those before it (design.md R38, R39).
func (a *Acceptor) caughtUp() bool {
	return a.caughtUpFrom(a.m.Voters) && (!a.m.Pending || a.caughtUpFrom(a.m.Prev))
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

// lostMajority reports whether the voters in lost, which lost their
// registers, are a majority of the voters or, while a change is pending,
// of those before it, which alone hold the keys the change has not moved
// yet. Counting the new voters only, two of three voters before an
// addition that restarted, one on a new disk, waited for each other for
// good, and the pending change could not finish without them (design.md
// R42).
func (a *Acceptor) lostMajority(lost []NodeID) bool {
	return majorityOf(lost, a.m.Voters) || a.m.Pending && majorityOf(lost, a.m.Prev)
}

// majorityOf reports whether ids include a majority of voters.
func majorityOf(ids, voters []NodeID) bool {
	n := 0
	for _, v := range ids {
		if slices.Contains(voters, v) {
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
// forth with no write between (soak seed 708342). As copies, no two voters
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
// chosen a grant (I2, TestAudit2NewDiskVoterForgetsItVotedAfterARestart).
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
// replaced one that voted (TestAudit3FreshAnswerOfANewDiskVoterCounts-
// AsRestarted). So two voters of three restarted together, the third
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

// bucketOf spreads keys over n buckets (FNV-1a).
func bucketOf(key string, n uint32) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % n
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
// and the configuration's only majority never votes again (soak seed
// 782120 with 3 voters).
func (a *Acceptor) noteRestartedWith(recovering bool) {
	a.restartedWith = make(map[NodeID]uint64)
	for _, p := range a.catchUp.peers {
		if (p.lost || (recovering && p.recovering)) && p.inc != 0 {
			a.restartedWith[p.id] = p.inc
		}
	}
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
