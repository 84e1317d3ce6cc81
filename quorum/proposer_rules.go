package quorum

import "time"

// proposerRules are the decisions of the proposer's protocol that a test
// can break on purpose, one field each, named for what it decides. The
// protocol calls through the table, so each call reads as the rule it is;
// each default is the rule as docs/design.md states it, written where the
// decision is made. A Proposer starts with defaultProposerRules, and only
// tests change them (ProposerConfig.rules), to show that the simulator's
// checkers catch each rule broken.
type proposerRules struct {
	// quorum is the configuration whose majority decides a round: the
	// voters, whatever gossip says is alive (design.md R1).
	quorum func(p *Proposer) Membership
	// countVote counts a voter's answer in a round's tally, once however
	// many of its messages arrive; false if it adds nothing (design.md R3).
	countVote func(t *tally, from NodeID, ok bool) bool
	// promiseLost says whether a promise of a voter's life inc counts for
	// nothing: a voter that promised with it heard from a later life of
	// that voter before it ever promised, and may have told it that it
	// never voted (design.md R55).
	promiseLost func(x *op, from NodeID, inc uint64) bool
	// ballotCounter is the counter of a new ballot on ks: above every
	// counter seen on ks and every one this incarnation used on any key
	// (design.md R4).
	ballotCounter func(p *Proposer, ks *keyState) uint64
	// lockingGrant says whether a voter's live timer of timed locks an
	// acquire that builds on base, and the grant that locks: only a timer
	// of base's grant does (design.md R10).
	lockingGrant func(timed, base Value) (Value, bool)
	// writtenBackEpoch is the epoch a read reports once its write-back is
	// chosen (design.md R16).
	writtenBackEpoch func(x *op) uint64
	// holderStart is when the holder's clock started for a grant, renewal
	// or update a majority accepted: before the round sent anything
	// (design.md R18).
	holderStart func(x *op, now time.Duration) time.Duration
	// acceptInc is the life of voter whose promise x's accept to it rests
	// on (0: none, send it nothing); on the fast path only the voters, and
	// lives, that promised its ballot (design.md R23).
	acceptInc func(p *Proposer, x *op, voter NodeID, promised voterIncs) uint64
	// fastPathOnAdopt is what adopting a configuration does to ks's fast
	// path: it is dropped (design.md R24).
	fastPathOnAdopt func(p *Proposer, ks *keyState)
	// parksBehind says whether an acquire that a prepare round's answers
	// find locked by base's grant parks behind it without a ballot: only a
	// grant that will end (design.md R29).
	parksBehind func(p *Proposer, x *op, base Value, hi Ballot, info []reply) bool
	// nextEpoch is a new grant's fencing token: above every epoch heard,
	// and at least the wall clock in microseconds (design.md R11, R34).
	nextEpoch func(p *Proposer, maxSeen uint64) uint64
	// listingsNeeded is how many of the old voters must list their keys
	// before a voter change moves them: a majority (design.md R61, R62).
	listingsNeeded func(c *changeOp) int
	// movedTTL is how long the new voters time a lease a voter change
	// moves (0: no timer): what is left of it (design.md R63).
	movedTTL func(p *Proposer, base Value, replies []reply) time.Duration
	// sameConfig says whether the configuration register holds write
	// already: the same configuration, whatever floor each round of the
	// write carried (design.md R64).
	sameConfig func(cur, write Membership) bool
	// raiseConfigFloor raises the epoch floor a configuration write
	// carries to what the voters of its round reported (design.md R64).
	raiseConfigFloor func(write *Membership, replies []reply)
	// forgets says whether a sweep's peeks, answered by every voter, let
	// the voters forget the key as it stands: one free value at one
	// ballot everywhere, no timer (design.md R70, R71).
	forgets func(x *op) bool
	// forgetsEvicted says whether the voters that acknowledged a key's
	// release (acked) let this node tell them to forget the key when it
	// evicts it: every voter (design.md R72).
	forgetsEvicted func(p *Proposer, acked *voterIncs) bool
	// writesBack says whether a sweep may write a key back on every
	// voter's answers, to forget it then (design.md R74).
	writesBack func(p *Proposer, replies []reply) bool
	// freesExpired says whether a sweep's write-back may free v, a grant
	// whose lease ran out at every voter (design.md R75).
	freesExpired func(p *Proposer, v Value) bool
	// sweepYields says whether a voter's answer makes a sweep's write-back
	// yield: it times a lease (design.md R76).
	sweepYields func(r *Result) bool
	// asksIfFree says whether x's prepare asks the voters to promise only
	// where no other holder's lease runs: an acquire's (design.md R27),
	// and a sweep's write-back (design.md R76).
	asksIfFree func(x *op) bool
	// settled is the value, and its ballot, that an observation's reports
	// settle, if they do: what a majority agrees on (design.md R80).
	settled func(p *Proposer, o *observation) (Value, Ballot, bool)
	// supersedes says whether an observed key's state at ballot now is
	// newer than one at was; later: it comes from a later life of a voter,
	// or a read begun after was was reported (design.md R81).
	supersedes func(was, now Ballot, later bool) bool
	// endsLatestPeriod says whether an observed expiry of v, the content
	// of known (the latest value the observer knows of), ends known's
	// lease period, not an earlier one: a stale state (design.md R81).
	endsLatestPeriod func(known, v Value) bool
	// forgotten says whether an observed register at ballot now, where one
	// at was was seen before, is the key forgotten since (design.md R82).
	forgotten func(was, now Ballot) bool
	// leaseEnded says whether an observation's reports show the lease of
	// v's grant ended: a majority's timers run out at one ballot that
	// began a lease period (design.md R83).
	leaseEnded func(p *Proposer, o *observation, v Value) bool
	// readSettlesLive says whether a read may report base, which a
	// majority accepted at hi, live or not as their timers say (live):
	// an ended lease only at a ballot that began a lease period
	// (design.md R84).
	readSettlesLive func(base Value, hi Ballot, live bool) bool
	// laterLife says whether inc, another life of the voter that made
	// the report had, answering registration round round, is a later one,
	// when that is known (design.md R85).
	laterLife func(had obsReport, inc, round uint64) (later, known bool)
}

// defaultProposerRules are the protocol's rules.
var defaultProposerRules = proposerRules{
	quorum:           (*Proposer).voters,
	countVote:        (*tally).add,
	promiseLost:      promiseLost,
	ballotCounter:    (*Proposer).nextCounter,
	lockingGrant:     lockingGrant,
	writtenBackEpoch: writtenBackEpoch,
	holderStart:      holderStart,
	acceptInc:        (*Proposer).acceptInc,
	fastPathOnAdopt:  (*Proposer).dropFast,
	parksBehind:      (*Proposer).parksBehind,
	nextEpoch:        (*Proposer).nextEpoch,
	listingsNeeded:   (*changeOp).listingsNeeded,
	movedTTL:         (*Proposer).movedTTL,
	sameConfig:       sameButFloor,
	raiseConfigFloor: raiseConfigFloor,
	forgets:          oneFreeValue,
	forgetsEvicted:   (*Proposer).everyVoterAcked,
	writesBack:       (*Proposer).mayWriteBack,
	freesExpired:     (*Proposer).mayFreeExpired,
	sweepYields:      timesALease,
	asksIfFree:       asksIfFree,
	settled:          (*Proposer).settledByMajority,
	supersedes:       supersedes,
	endsLatestPeriod: endsLatestPeriod,
	forgotten:        forgottenSince,
	leaseEnded:       (*Proposer).leaseEnded,
	readSettlesLive:  readSettlesLive,
	laterLife:        laterLifeByRounds,
}
