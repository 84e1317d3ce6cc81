package quorum

import (
	"slices"
	"time"
)

// An acceptor forgets everything when its process ends. Coming back, it must
// not vote as if it remembered (see the package documentation):
//
//  1. Quarantine: it answers nothing until every lease it may have accepted
//     before has ended, measured on its own clock: its own MaxTTL, or the
//     longest lease horizon it hears of (design.md R35-R37).
//  2. Catch-up: it asks every other voter for its registers, bucket by
//     bucket, and keeps for each key the highest promise, the value of the
//     highest accepted ballot and the highest epoch. It goes live once so
//     many others have answered in full that every accept majority of its
//     earlier life, less itself, meets them: of n voters with majority q,
//     n-q+1 others (a majority when n is odd). While a change is pending
//     this must hold for the voters before the change too, so the removed
//     voter, if it still answers, is asked as well (R38, R39;
//     acceptor_catchup.go).
//
// If so many voters are recovering at once that no such set exists, the state
// of a majority is gone for good; once every voter has answered, the
// acceptor then goes live on what it could learn, and epochs rest on the
// wall-clock floor (FloorOnly, R41; acceptor_restart.go).

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

// horizonBucket marks a catch-up request, and its answer, that asks for the
// lease horizon alone: no bucket of registers is ever numbered so.
const horizonBucket = ^uint32(0)

// horizonPeers are the voters a quarantined acceptor asks for their lease
// horizons (see horizonAsk): every other voter, and those before a pending
// change (design.md R36).
func (a *Acceptor) horizonPeers() []NodeID {
	ask := make([]NodeID, 0, len(a.m.Voters)+len(a.m.Prev))
	for _, v := range append(slices.Clone(a.m.Voters), a.m.Prev...) {
		if v != a.cfg.ID && !slices.Contains(ask, v) {
			ask = append(ask, v)
		}
	}
	return ask
}

// askHorizons asks every voter that has not answered yet for its lease
// horizon (see horizonAsk).
func (a *Acceptor) askHorizons(now time.Duration) {
	a.horizonAsked = now
	a.horizonOut = a.horizonOut[:0]
	for _, v := range a.horizonAsk {
		a.horizonOut = append(a.horizonOut, CatchUpRequest{Config: a.m.ID, From: a.cfg.ID, To: v, Inc: a.cfg.Incarnation, Bucket: horizonBucket})
	}
}

// learnHorizon takes the lease horizon another voter reported: this
// acceptor may vote only once a lease of that length, accepted before its
// start (in its earlier life, perhaps under a longer MaxTTL than today's),
// has ended (design.md R36). A lease of TTL h accepted before the start
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

// maxHeardTTL bounds the lease a refused accept can make an acceptor
// protect (hearLease): lease.MaxTTL, the longest any node may be set to
// grant.
const maxHeardTTL = 24 * time.Hour

// tooLong reports whether op, an accept of a grant, is of a lease longer
// than this acceptor's MaxTTL that it would time: a write that begins a
// lease period (a grant or a renewal) or a move; or longer than any node
// may grant. Such an accept is refused: a restart's quarantine covers no
// longer lease (design.md R35). A write-back of such a grant (a read's,
// its Lease kept) starts no timer and is taken (design.md R37): voters
// that a roll which lowered MaxTTL restarted hold an earlier grant of the
// old TTL only as copies, and refusing its write-back left every read of
// the key without a majority, and an observer of it showing the lease
// live, until the key was taken or swept.
func (a *Acceptor) tooLong(op *Op) bool {
	v := op.Value
	return v.TTL > a.cfg.MaxTTL && (op.Migrate || v.Lease == op.Ballot || v.TTL > maxHeardTTL)
}

// hearLease takes what an accept says of a lease longer than this
// acceptor's own MaxTTL, refused or (a write-back: tooLong) taken: some
// proposer holds, or is taking, a lease of that TTL, which other voters,
// or this node's earlier life, may have accepted under a longer MaxTTL.
// The acceptor keeps it as a horizon (learnHorizon): restarted voters
// that ask are told of it, and a quarantined acceptor itself votes only
// once a lease of that length accepted before its start has ended.
//
// Without it a rolling restart that lowers MaxTTL, on voters without data
// directories, let a lease outlive what protected it: two voters of three
// accept a 1 s lease, the third (already at 250 ms) refuses it, the two
// lose their state together and come back at 250 ms; every voter then
// reports a 250 ms horizon, they vote after about 250 ms and grant the
// key while the holder's deadline runs (design.md R37). What is left of
// that hole
// takes neither the refused accept nor a request from the holder to reach
// the restarted voters while they wait (see the package documentation).
//
// A member can make voters wait up to maxHeardTTL longer after a restart
// this way, as a voter can with the horizon it reports in a catch-up; it
// cannot make them vote sooner.
func (a *Acceptor) hearLease(op *Op) {
	if op.Kind != OpAccept || !op.Value.Held || op.Value.TTL <= a.cfg.MaxTTL || op.Value.TTL > maxHeardTTL ||
		op.Key == "" || op.Ballot.IsZero() || op.Value.Holder == "" {
		return
	}
	a.learnHorizon(op.Value.TTL)
}

// SetPeerTTL tells the acceptor the longest lease that a running node says
// it holds (Node.SetPeerTTL). Restarted voters are told of it as a horizon,
// and a quarantined acceptor waits it out itself: in a rolling restart that
// lowers MaxTTL, a node may hold a lease longer than this acceptor's
// MaxTTL that only voters of the old setting accepted, and those may all
// have lost their state (see hearLease). Lowered, the longer value is
// still reported while a lease of that length taken before could run.
func (a *Acceptor) SetPeerTTL(h time.Duration) { a.rules.hearPeerTTL(a, h) }

// hearPeerTTL is SetPeerTTL: a lease a running node says it holds is a
// horizon (design.md R37).
func (a *Acceptor) hearPeerTTL(h time.Duration) {
	h = min(max(h, 0), maxHeardTTL)
	if h < a.peerTTL {
		a.learnHorizon(a.peerTTL)
	}
	a.peerTTL = h
	if h > a.cfg.MaxTTL {
		a.rules.waitOut(a, h)
	}
}

// Horizon is the longest lease this acceptor may be protecting, or knows
// another voter may be: the most it accepts (MaxTTL), the longer horizon it
// learned when it caught up or from an accept it refused (for as long as a
// lease of that length accepted before could still run), or the longest
// lease a running node says it holds (SetPeerTTL).
func (a *Acceptor) Horizon() time.Duration {
	h := max(a.cfg.MaxTTL, a.peerTTL)
	if a.clock.Now() < a.horizonUntil {
		h = max(h, a.horizon)
	}
	return h
}

// stretch turns a time measured on another node's clock into one on this
// clock that ends no earlier in real time: clock rates may differ by a
// factor of (1+ρ)/(1−ρ).
func (a *Acceptor) stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 + a.cfg.Drift) / (1 - a.cfg.Drift))
}
