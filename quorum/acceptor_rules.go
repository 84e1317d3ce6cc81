package quorum

import "time"

// acceptorRules are the acceptor's decisions that a test may break on
// purpose, to show that a checker catches the break: one entry per
// decision, named for what it decides, with the rule of docs/design.md
// that it keeps. The protocol calls each through the acceptor's table
// (Acceptor.rules); the defaults, below, are the protocol itself, written
// where the decision is made. Only tests install other entries
// (AcceptorConfig.breakRules, NodeConfig.rules).
type acceptorRules struct {
	// Ballots.

	// repeatsPrepare: a prepare equal to the promise is the round that
	// made it, answered again (design.md R5).
	repeatsPrepare func(r *register, op *Op) bool

	// Quarantine and horizons.

	// quarantineOver: the quarantine has run its length (design.md R35).
	quarantineOver func(a *Acceptor, now time.Duration) bool
	// horizonOver: the longest lease horizon heard has passed since the
	// start (design.md R36).
	horizonOver func(a *Acceptor, now time.Duration) bool
	// horizonPeers: the voters a quarantined acceptor asks for their
	// horizons (design.md R36).
	horizonPeers func(a *Acceptor) []NodeID
	// waitOut: the acceptor votes no sooner than its start plus a horizon
	// heard (design.md R36).
	waitOut func(a *Acceptor, h time.Duration)
	// hearLease: an accept of a lease longer than MaxTTL is a horizon
	// (design.md R37).
	hearLease func(a *Acceptor, op *Op)
	// tooLong: an accept of a lease longer than MaxTTL is refused where it
	// would start a timer; a write-back is taken (design.md R35, R37).
	tooLong func(a *Acceptor, op *Op) bool
	// hearPeerTTL: the longest lease a running node says it holds is a
	// horizon (design.md R37).
	hearPeerTTL func(a *Acceptor, h time.Duration)
	// timeMerged: a grant merged with time left at the responder is timed
	// here for that time, stretched (design.md R36).
	timeMerged func(a *Acceptor, r *register, e *Entry)

	// Catch-up.

	// catchUpPeers: the voters a catch-up asks, with those before a
	// pending change (design.md R38, R39).
	catchUpPeers func(a *Acceptor) []NodeID
	// caughtUp: the voters done meet every majority this acceptor was of,
	// now and before a pending change (design.md R38, R39).
	caughtUp func(a *Acceptor) bool
	// peerRestarted: a catch-up from a voter that restarted since starts
	// over (design.md R40).
	peerRestarted func(a *Acceptor, p *peerCatchUp, inc uint64)
	// peerCaughtUp: a peer that answers as a live voter, not on this
	// acceptor's word, no longer counts as lost (design.md R47).
	peerCaughtUp func(p *peerCatchUp, lostWith bool)
	// mergesConfig: a catch-up merges a copy of the configuration register
	// (design.md R68).
	mergesConfig func(a *Acceptor) bool
	// isCopy: a register holds a value copied in a catch-up, not accepted
	// (design.md R43).
	isCopy func(r *register) bool
	// listsCopy: a listing's entry says it is a copy (design.md R87).
	listsCopy func(a *Acceptor, r *register) bool

	// Restarts of a majority.

	// countsAsLost: a peer counts among the voters that lost their
	// registers in a full restart (design.md R45).
	countsAsLost func(p *peerCatchUp) bool
	// heardAll: every voter answered, as a full restart needs (design.md
	// R41).
	heardAll func(a *Acceptor, answered int) bool
	// lostMajority: the voters that lost their registers are a majority of
	// the voters, or of those before a pending change (design.md R41,
	// R42).
	lostMajority func(a *Acceptor) bool
	// demoteCopies: going live without a full catch-up holds each copy at
	// a ballot of its own (design.md R44).
	demoteCopies func(a *Acceptor)
	// countedLife and quietSince: LostWith goes to the life counted, or to
	// a later one that names it among its quiet lives (design.md R46).
	countedLife func(asker, counted uint64) bool
	quietSince  func(quiet []uint64, counted uint64) bool
	// countsAsRestarted: a peer counts toward a majority restarted from
	// disks (design.md R45, R54).
	countsAsRestarted func(p *peerCatchUp) bool

	// Data directories.

	// takeEpochMark and takeBallotMark: a saved mark is a floor
	// (design.md R51, R52).
	takeEpochMark  func(a *Acceptor, mark uint64)
	takeBallotMark func(a *Acceptor, mark uint64)
	// restartConfig: the configuration a restart from disk starts on, and
	// the acceptor's own vote on the configuration register (design.md
	// R53).
	restartConfig func(m Membership, d *Durable) (Membership, DurableRegister)
	// neverVoted: the others that say they never voted show that nothing
	// was chosen (design.md R55).
	neverVoted func(a *Acceptor, others int) bool
	// answersFresh: a voter says it never voted to a life it heard from
	// before it promised anything (design.md R55).
	answersFresh func(a *Acceptor, voter NodeID, inc uint64) bool
	// livesTold: with each promise, the lives it may have told so, whose
	// earlier lives' promises count for nothing (design.md R55).
	livesTold func(a *Acceptor, now time.Duration) []Life
	// savesVoted: going live, a voter that forgot saves that it voted
	// (design.md R56).
	savesVoted func(a *Acceptor) bool
	// endsQuiet: going live empties the quiet lives (design.md R48).
	endsQuiet func(a *Acceptor) bool
	// tellsRecovery: what a recovering voter says of its earlier lives,
	// Durable or Forgot (design.md R54, R57).
	tellsRecovery func(a *Acceptor, resp *CatchUpResponse)

	// Newer configurations.

	// chosenNewer: a newer configuration majorities accepted at one ballot
	// (design.md R65).
	chosenNewer func(a *Acceptor) *Membership
	// newerMaybeChosen: the version of a newer configuration that may have
	// been chosen (design.md R65).
	newerMaybeChosen func(a *Acceptor) uint64
	// peerAcceptedNewer: a peer accepted a newer configuration, which a
	// majority restarted from disks must not overlook (design.md R65).
	peerAcceptedNewer func(p *peerCatchUp) bool
	// mayHaveAccepted: an acceptor without its earlier disk may have
	// accepted any newer configuration (design.md R66).
	mayHaveAccepted func(a *Acceptor) bool
	// newerStopsFullRestart: a full restart waits while a newer
	// configuration may have been chosen (design.md R67).
	newerStopsFullRestart func(a *Acceptor) bool
	// ownConfigVote: the acceptor's own vote on the configuration
	// register, never a copy (design.md R68).
	ownConfigVote func(a *Acceptor) DurableRegister

	// Forgetting and sweeps.

	// droppable: a register may be dropped, free and unused (design.md
	// R70).
	droppable func(a *Acceptor, key string, r *register, now time.Duration) bool
	// forgetsNothing: nothing is forgotten while a change is pending
	// (design.md R73).
	forgetsNothing func(a *Acceptor) bool
	// picksExpired: a sweep picks a grant this voter no longer times
	// (design.md R75, R76).
	picksExpired func(a *Acceptor, key string, r *register, now time.Duration) bool
	// pickedForOthers: a sweep picks a register of another voter's bucket
	// (design.md R77).
	pickedForOthers func(r *register) bool
}

// defaultAcceptorRules are the protocol's rules.
var defaultAcceptorRules = acceptorRules{
	repeatsPrepare: repeatsPrepare,

	quarantineOver: (*Acceptor).quarantineOver,
	horizonOver:    (*Acceptor).horizonOver,
	horizonPeers:   (*Acceptor).horizonPeers,
	waitOut:        (*Acceptor).waitOut,
	hearLease:      (*Acceptor).hearLease,
	tooLong:        (*Acceptor).tooLong,
	hearPeerTTL:    (*Acceptor).hearPeerTTL,
	timeMerged:     (*Acceptor).timeMerged,

	catchUpPeers:  (*Acceptor).catchUpPeers,
	caughtUp:      (*Acceptor).caughtUp,
	peerRestarted: (*Acceptor).peerRestarted,
	peerCaughtUp:  (*peerCatchUp).answeredLive,
	mergesConfig:  (*Acceptor).mergesConfig,
	isCopy:        (*register).isCopy,
	listsCopy:     (*Acceptor).isCopy,

	countsAsLost:      (*peerCatchUp).countsAsLost,
	heardAll:          (*Acceptor).heardAll,
	lostMajority:      (*Acceptor).lostMajority,
	demoteCopies:      (*Acceptor).demoteCopies,
	countedLife:       countedLife,
	quietSince:        quietSince,
	countsAsRestarted: (*peerCatchUp).countsAsRestarted,

	takeEpochMark:  (*Acceptor).takeEpochMark,
	takeBallotMark: (*Acceptor).takeBallotMark,
	restartConfig:  restartConfig,
	neverVoted:     (*Acceptor).neverVoted,
	answersFresh:   (*Acceptor).answersFresh,
	livesTold:      (*Acceptor).livesTold,
	savesVoted:     (*Acceptor).savesVoted,
	endsQuiet:      (*Acceptor).endsQuiet,
	tellsRecovery:  (*Acceptor).tellsRecovery,

	chosenNewer:           (*Acceptor).chosenNewer,
	newerMaybeChosen:      (*Acceptor).newerMaybeChosenVersion,
	peerAcceptedNewer:     (*peerCatchUp).acceptedNewer,
	mayHaveAccepted:       (*Acceptor).mayHaveAccepted,
	newerStopsFullRestart: (*Acceptor).newerStopsFullRestart,
	ownConfigVote:         (*Acceptor).ownConfigVote,

	droppable:       (*Acceptor).droppable,
	forgetsNothing:  (*Acceptor).forgetsNothing,
	picksExpired:    (*Acceptor).picksExpired,
	pickedForOthers: (*register).pickedForOthers,
}

// acceptorRulesWith are the protocol's rules as brk, when set, breaks them.
func acceptorRulesWith(brk func(*acceptorRules)) acceptorRules {
	r := defaultAcceptorRules
	if brk != nil {
		brk(&r)
	}
	return r
}
