package quorum

import (
	"slices"
	"strings"
	"time"
)

// Catch-up: after its quarantine (acceptor_quarantine.go) a recovering
// acceptor learns the registers of the other voters, bucket by bucket
// (design.md R38-R40); HandleCatchUp answers such requests, and listings
// of keys for a voter change (R62).

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
	peers := make([]NodeID, 0, len(a.m.Voters)+len(a.m.Prev))
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
			resp.LostWith = a.rules.countedLife(req.Inc, inc) || a.rules.quietSince(req.Quiet, inc)
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
	a.heard(req.From, req.Inc)
	if a.disk != nil && a.diskErr == nil {
		resp.Fresh = a.rules.answersFresh(a, req.From, req.Inc)
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
// since the one counted went live (quiet, CatchUpRequest.Quiet): its registers are
// then as gone as that life's, and nothing was chosen with it since, so a
// partner that restarts again before it votes may count this voter too
// (design.md R46).
func quietSince(quiet []uint64, counted uint64) bool { return slices.Contains(quiet, counted) }

// neverPromised reports whether this acceptor's disk shows that it never
// promised or accepted anything: every promise saves a ballot mark first,
// every accept Voted (design.md R52).
func (a *Acceptor) neverPromised() bool {
	return a.disk != nil && a.diskErr == nil && !a.amnesiac && !a.dur.Voted && a.dur.Ballots == 0
}

// heard notes a catch-up message from voter's life inc: while this acceptor
// never promised anything, that life began before its first promise.
func (a *Acceptor) heard(voter NodeID, inc uint64) {
	if inc == 0 || !a.neverPromised() || !a.m.IsVoter(voter) && !slices.Contains(a.m.Prev, voter) {
		return
	}
	if a.heardFresh == nil {
		a.heardFresh = make(map[NodeID]heardLife)
	}
	if h, ok := a.heardFresh[voter]; !ok || h.inc != inc {
		a.heardFresh[voter] = heardLife{inc: inc, at: a.clock.Now()}
	}
}

// heardLife is a life of another voter this acceptor heard from before it
// first promised anything, and when it first did.
type heardLife struct {
	inc uint64
	at  time.Duration
}

// answersFresh reports whether this acceptor tells voter's life inc, a
// voter on a new disk that asks, that it never voted: it promised and
// accepted nothing before it first heard from that life (design.md R55).
//
// Votes alone are not enough. A ballot is accepted only once a majority
// promised it (by its prepare, or as Next with an accept at a majority:
// R23). A lease the asker's earlier life accepted, before it lost its
// disk, rests on promises given before this life began, by a majority,
// and so by one of the voters that answer it (they meet every majority);
// that voter promised before it heard from this life, and does not answer
// Fresh. A voter that promised then but whose accept is still on the way
// has voted for nothing yet: answering Fresh by its votes let the asker
// go live empty while its earlier life's accept and the late one made a
// majority (I1).
//
// Counting promises from the voter's first word of this life, not from
// its start, keeps a brand-new mesh whose voters start together quick:
// each heard the others before any promised, and a voter whose answer
// comes after the others began voting is still told Fresh.
//
// Never from a voter that recovers as one that forgot (amnesiac): its
// earlier lives may have promised what it no longer knows.
func (a *Acceptor) answersFresh(voter NodeID, inc uint64) bool {
	if a.disk == nil || a.diskErr != nil || a.amnesiac {
		return false
	}
	return a.neverPromised() || inc != 0 && a.heardFresh[voter].inc == inc
}

// livesTold are the lives this acceptor heard from before it first
// promised anything (heardFresh), said with a promise given at now: any of
// them may be a voter gone live on a new disk on its word, without the
// promises of its earlier lives, and a prepare must not count those
// (design.md R55).
//
// Only for a quarantine after it heard each: a promise of an earlier life
// was given before the later life began, so before this acceptor heard
// it, to a prepare whose round ends within a round timeout of it (a
// retry prepares again, and an earlier life no longer answers). A round
// timeout is below the TTL, which is below this voter's quarantine (R35,
// R93). Past that, the list would only keep a later life's promises out.
func (a *Acceptor) livesTold(now time.Duration) []Life {
	var lives []Life
	for id, h := range a.heardFresh {
		if now-h.at < a.cfg.Quarantine {
			lives = append(lives, Life{Node: id, Inc: h.inc})
		}
	}
	if len(lives) > 1 {
		slices.SortFunc(lives, func(x, y Life) int { return strings.Compare(string(x.Node), string(y.Node)) })
	}
	return lives
}

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

// bucketOf spreads keys over n buckets (FNV-1a).
func bucketOf(key string, n uint32) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % n
}

// HandleCatchUpResponse merges one bucket from another voter.
func (a *Acceptor) HandleCatchUpResponse(resp *CatchUpResponse) {
	a.heard(resp.From, resp.Inc)
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
	a.rules.peerCaughtUp(p, resp.LostWith)
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
// this acceptor's word (lostWith), it caught up from others (or never lost anything
// since this acceptor started), and holds what a majority held. It no
// longer counts as a voter that lost its registers with this one: counted
// so, it let a chain of restarts that never overlapped in a majority pass
// for one that did (design.md R47).
func (p *peerCatchUp) answeredLive(lostWith bool) {
	if !lostWith {
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
// another node take the key (I1: a voter caught up from a second; the
// second and two others then crashed and concluded a full restart while
// the first still counted the second done). Every register it merged is
// dropped (its floors stay: they only go up) and every voter is asked
// again (design.md R40).
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
// back: two configurations with one id (I5, design.md R43).
func (a *Acceptor) isCopy(r *register) bool { return a.rules.isCopy(r) }

// isCopy is the rule of Acceptor.isCopy: a copy is no vote (design.md
// R43).
func (r *register) isCopy() bool { return r.copied }

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
