package quorum

import (
	"fmt"
	"slices"
	"time"
)

// Changing the voters
//
// The configuration is itself a register, ConfigKey, decided like any other
// key by a majority of the current configuration. A change adds or removes
// one voter, so that every majority of the old voters meets every majority
// of the new ones, and runs in three steps (as CASPaxos describes for its
// acceptor sets):
//
//  1. Write the new voters as a pending configuration (version+1, Prev = the
//     old voters), compare-and-set on the version read. Once it is chosen the
//     proposer adopts it and pushes it to every voter, old and new. From the
//     moment a majority of the new voters has adopted it, no majority of the
//     old configuration can form again, for any key: each would need one of
//     them.
//  2. List every key that a majority of the old voters holds (asking them
//     under the new configuration, so that each has stopped voting in the
//     old one), and write each key again under the new configuration: a
//     prepare that reads what a majority of the old voters chose, and an
//     accept of the same value with Op.Migrate, which makes every new voter
//     that accepts it time a live lease for what is left of it (design.md
//     R63). Now every value and every live lease lives on a majority of the
//     new voters.
//  3. Write the same voters again, no longer pending (version+2). Only then
//     may the next change start: its majorities need not meet the old
//     voters' at all.
//
// A proposer that dies between the steps leaves the configuration pending;
// the next change (from any node) first finishes steps 2 and 3, then makes
// its own. Two proposers changing at once cannot both win a step: each
// compares and sets the version it read.
//
// A voter joins empty. That is safe only for a process that never voted
// before: the configuration records the incarnation of each voter it adds
// (Membership.Joined), and any other incarnation of that node waits out a
// quarantine and catches up like a restarted voter.

// changeStage is where a change stands.
type changeStage uint8

const (
	stRead    changeStage = iota + 1 // reading the configuration register
	stWrite                          // writing the pending configuration
	stList                           // listing the keys of the old voters
	stMigrate                        // writing every key under the new voters
	stSettle                         // writing the configuration, settled
)

// maxMigrating bounds how many keys a change moves at once.
const maxMigrating = 256

// changeOp is a voter change in progress.
type changeOp struct {
	id       OpID
	add      NodeID
	addInc   uint64
	remove   NodeID
	deadline time.Duration
	started  time.Duration
	gen      uint64 // bumps invalidate the change's timer

	stage     changeStage
	finishing bool       // settling an earlier, unfinished change first
	target    Membership // the pending configuration being settled
	reads     int        // how many times the register was read

	peers    []*listPeer
	keys     map[string]bool
	order    []string // keys to move, sorted
	next     int      // index in order of the next key to move
	inflight int
	moved    int
	unknown  bool // a configuration write of this change may have landed
	// epochFloor is the highest epoch floor the old voters listed: the
	// epochs of keys they dropped, which are not moved (settled into the
	// configuration instead).
	epochFloor uint64
}

// listPeer is one old voter's listing of its keys.
type listPeer struct {
	id         NodeID
	bucket     uint32
	done       bool
	recovering bool
	askedAt    time.Duration
}

// listBuckets is how many pieces a key listing is cut into.
const listBuckets = 16

// ChangeVoters starts adding one voter (add, running as incarnation addInc,
// or 0 when unknown) or removing one (remove); exactly one of the two. It
// waits for nothing: the outcome comes through Ready as Reconfigured (the
// change took effect, or had already; Members is the configuration),
// Refused (the change is not allowed; Err says why) or NoQuorum (no majority
// in time; Unknown if the change may have been partly made, which the next
// change, from any node, completes).
func (p *Proposer) ChangeVoters(add NodeID, addInc uint64, remove NodeID, deadline time.Duration) (OpID, error) {
	if (add == "") == (remove == "") {
		return 0, fmt.Errorf("%w: a change adds one voter or removes one", ErrBadChange)
	}
	if p.chg != nil {
		return 0, fmt.Errorf("%w: a voter change is already in progress on this node", ErrBusy)
	}
	now := p.clock.Now()
	if deadline == 0 {
		deadline = now + 50*p.cfg.RoundTimeout
	}
	p.nextOp++
	c := &changeOp{id: p.nextOp, add: add, addInc: addInc, remove: remove, deadline: deadline, started: now}
	p.chg = c
	p.changeRead(c)
	return c.id, nil
}

// plan computes the configuration that makes c's change on cur, or reports
// that cur has it already.
func (c *changeOp) plan(cur Membership) (next Membership, done bool, err error) {
	voters := slices.Clone(cur.Voters)
	switch {
	case c.add != "":
		if cur.IsVoter(c.add) {
			return cur, true, nil
		}
		if slices.Contains(cur.Retired, c.add) {
			return Membership{}, false, fmt.Errorf("%w: %q was a voter once and was removed; a removed voter's name never votes again (start the node under a new name)", ErrBadChange, c.add)
		}
		voters = append(voters, c.add)
	default:
		if !cur.IsVoter(c.remove) {
			return cur, true, nil
		}
		if len(voters) == 1 {
			return Membership{}, false, fmt.Errorf("%w: %q is the only voter", ErrBadChange, c.remove)
		}
		voters = slices.DeleteFunc(voters, func(v NodeID) bool { return v == c.remove })
	}
	next = cur.Next(voters, true, c.addInc)
	if next.Version() == 0 {
		return Membership{}, false, fmt.Errorf("%w: the configuration's version counter is spent", ErrBadChange)
	}
	return next, false, next.Validate()
}

// changeRead starts (again) from a read of the configuration register.
func (p *Proposer) changeRead(c *changeOp) {
	c.reads++
	if c.reads > 20 {
		// Others keep changing the configuration under this change.
		p.endChange(c, OpResult{Outcome: NoQuorum, Unknown: c.unknown})
		return
	}
	c.stage = stRead
	c.peers, c.keys, c.order, c.next, c.inflight = nil, nil, nil, 0, 0
	p.changeSub(c, kindRead, nil)
}

// changeSub starts one register operation of c on ConfigKey.
func (p *Proposer) changeSub(c *changeOp, kind opKind, write *Membership) {
	x := p.newOp(p.key(ConfigKey), kind, c.deadline)
	x.parent, x.noFast = c, true
	if write != nil {
		x.cfgExpect = p.m.ID
		if c.stage == stSettle {
			x.cfgExpect = c.target.ID
		}
		w := write.clone()
		x.cfgWrite = &w
	}
	p.enqueue(x, false)
}

// changeStep takes the result of one of c's register or migration
// operations.
func (p *Proposer) changeStep(c *changeOp, x *op, r OpResult) {
	if p.chg != c {
		return // the change ended meanwhile
	}
	switch x.kind {
	case kindMigrate:
		c.inflight--
		if r.Outcome == NoQuorum {
			p.endChange(c, OpResult{Outcome: NoQuorum, Unknown: true})
			return
		}
		c.moved++
		p.changeMigrate(c)
		return
	case kindRead:
		if r.Outcome != ReadDone {
			p.endChange(c, OpResult{Outcome: NoQuorum, Unknown: c.unknown})
			return
		}
		cur := p.m
		if r.Value.Config != nil {
			// What a linearizable read returns is chosen: adopt it.
			cur = *r.Value.Config
			p.Adopt(cur)
		}
		if !cur.Equal(p.m) {
			// A newer configuration was adopted meanwhile: read again.
			p.changeRead(c)
			return
		}
		if cur.Pending {
			c.finishing, c.target = true, cur
			p.changeList(c)
			return
		}
		next, done, err := c.plan(cur)
		switch {
		case err != nil:
			p.endChange(c, OpResult{Outcome: Refused, Err: err})
		case done:
			p.endChange(c, OpResult{Outcome: Reconfigured})
		default:
			c.stage = stWrite
			p.changeSub(c, kindConfig, &next)
		}
	case kindConfig:
		switch r.Outcome {
		case Granted:
			w := *x.cfgWrite
			p.Adopt(w)
			p.pushAll(w)
			if c.stage == stWrite {
				c.target = w
				p.changeList(c)
				return
			}
			if c.finishing {
				// The earlier change is settled; now make this one.
				c.finishing = false
				p.changeRead(c)
				return
			}
			p.endChange(c, OpResult{Outcome: Reconfigured})
		case Locked:
			// Another node changed the configuration first.
			p.changeRead(c)
		case Refused:
			c.unknown = c.unknown || r.Unknown
			r.Unknown = c.unknown
			p.endChange(c, r)
		default:
			c.unknown = c.unknown || r.Unknown
			p.endChange(c, OpResult{Outcome: NoQuorum, Unknown: c.unknown})
		}
	}
}

// changeList asks every voter of the configuration before c.target for the
// keys it holds, under c.target.
func (p *Proposer) changeList(c *changeOp) {
	c.stage = stList
	c.keys = make(map[string]bool)
	c.peers = nil
	now := p.clock.Now()
	for _, v := range c.target.Prev {
		lp := &listPeer{id: v}
		c.peers = append(c.peers, lp)
		p.askList(c, lp, now)
	}
	p.armChange(c, now+p.cfg.RoundTimeout)
	p.maybeMigrate(c)
}

func (p *Proposer) askList(c *changeOp, lp *listPeer, now time.Duration) {
	lp.askedAt = now
	p.lists = append(p.lists, CatchUpRequest{
		Config: c.target.ID, From: p.cfg.ID, To: lp.id,
		Bucket: lp.bucket, Buckets: listBuckets, List: true,
	})
}

// HandleListResponse takes an answer to a key listing of a voter change.
func (p *Proposer) HandleListResponse(resp *CatchUpResponse) {
	c := p.chg
	if c == nil || c.stage != stList || !resp.List {
		return
	}
	var lp *listPeer
	for _, q := range c.peers {
		if q.id == resp.From {
			lp = q
		}
	}
	if lp == nil || lp.done {
		return
	}
	switch resp.Status {
	case StatusWrongConfig:
		if resp.Members == nil {
			return
		}
		if c.target.Newer(*resp.Members) {
			// The configuration moved past this change: start over.
			p.Adopt(*resp.Members)
			p.changeRead(c)
			return
		}
		// Behind: bring it up to date; the retry timer asks again.
		p.pushTo(resp.From)
		return
	case StatusRecovering:
		lp.recovering = true
		return
	case StatusOK:
	default:
		return
	}
	if resp.Config != c.target.ID || resp.Bucket != lp.bucket {
		return
	}
	lp.recovering = false
	c.epochFloor = max(c.epochFloor, resp.EpochFloor)
	for i := range resp.Entries {
		if k := resp.Entries[i].Key; k != "" && k != ConfigKey {
			c.keys[k] = true
		}
	}
	lp.bucket++
	if lp.bucket < listBuckets {
		p.askList(c, lp, p.clock.Now())
		return
	}
	lp.done = true
	p.maybeMigrate(c)
}

// maybeMigrate starts moving the keys listed once enough of the old voters
// have listed theirs (listingsNeeded).
func (p *Proposer) maybeMigrate(c *changeOp) {
	done := 0
	for _, q := range c.peers {
		if q.done {
			done++
		}
	}
	if done < p.rules.listingsNeeded(c) {
		return
	}
	c.order = make([]string, 0, len(c.keys))
	for k := range c.keys {
		c.order = append(c.order, k)
	}
	slices.Sort(c.order)
	c.keys = nil
	c.stage = stMigrate
	c.gen++ // no more listing retries
	p.changeMigrate(c)
}

// listingsNeeded is how many old voters must list their keys before c
// moves them: a majority of the old voters, each no longer voting in the
// old configuration, meets every majority that chose a value there
// (design.md R62), so every key chosen there moves (design.md R61).
func (c *changeOp) listingsNeeded() int { return len(c.target.Prev)/2 + 1 }

// changeMigrate keeps up to maxMigrating keys moving, and settles the
// configuration once every key has moved.
func (p *Proposer) changeMigrate(c *changeOp) {
	for c.inflight < maxMigrating && c.next < len(c.order) {
		k := c.order[c.next]
		c.next++
		x := p.newOp(p.key(k), kindMigrate, c.deadline)
		x.parent, x.noFast = c, true
		c.inflight++
		p.enqueue(x, false)
	}
	if c.inflight == 0 && c.next == len(c.order) && c.stage == stMigrate {
		c.stage = stSettle
		settled := c.target.Next(c.target.Voters, false, 0)
		// The keys the old voters dropped are not moved: their epochs
		// travel with the configuration instead.
		settled.EpochFloor = max(settled.EpochFloor, c.epochFloor)
		p.changeSub(c, kindConfig, &settled)
	}
}

// changeTimer asks again the old voters that have not answered a listing.
func (p *Proposer) changeTimer(c *changeOp, now time.Duration) {
	if now >= c.deadline {
		p.endChange(c, OpResult{Outcome: NoQuorum, Unknown: true})
		return
	}
	if c.stage != stList {
		return
	}
	for _, lp := range c.peers {
		if !lp.done && now-lp.askedAt >= p.cfg.RoundTimeout {
			p.askList(c, lp, now)
		}
	}
	p.armChange(c, now+p.cfg.RoundTimeout)
}

func (p *Proposer) armChange(c *changeOp, at time.Duration) {
	c.gen++
	p.arm(timer{at: min(at, c.deadline), kind: timerChange, gen: c.gen})
}

// endChange reports c's outcome. Register and migration operations of c
// still in flight run to their end; their results go nowhere.
func (p *Proposer) endChange(c *changeOp, r OpResult) {
	if p.chg != c {
		return
	}
	p.chg = nil
	c.gen++
	r.ID, r.Key, r.Started = c.id, ConfigKey, c.started
	m := p.m.clone()
	r.Members = &m
	r.Moved = c.moved
	p.results = append(p.results, r)
}

// Adopt switches the proposer to m if it is a newer configuration of its
// cluster, and reports whether it did. Only a chosen configuration may be
// adopted (one whose write this node saw chosen, one another node adopted,
// or one a linearizable read returned). Rounds in flight start again under
// m, and every fast path is dropped: a promise made to it by a majority of
// the old voters need not be one of the new.
func (p *Proposer) Adopt(m Membership) bool {
	if !p.m.Newer(m) || m.Validate() != nil {
		return false
	}
	p.m = m.clone()
	p.out = make([]Request, len(p.m.Voters))
	p.stats.ConfigChanges++
	for _, ks := range p.keys {
		p.rules.fastPathOnAdopt(p, ks)
	}
	// The rounds in flight, in the order they began.
	type inFlight struct {
		seq uint64
		x   *op
	}
	var rounds []inFlight
	p.rounds.each(func(_, seq uint64, r roundRef) {
		if r.x != nil {
			rounds = append(rounds, inFlight{seq, r.x})
		}
	})
	slices.SortFunc(rounds, func(a, b inFlight) int { return cmp(a.seq, b.seq) })
	now := p.clock.Now()
	for _, r := range rounds {
		x := r.x
		p.endRound(x)
		x.repair = nil
		x.phase = phaseBackoff
		x.timerGen++
		p.arm(timer{at: now, kind: timerRetry, on: x, gen: x.timerGen})
	}
	p.observeAdopted(now)
	return true
}

// learn acts on the configuration another node reported: adopt a newer one;
// bring one that is behind up to date.
func (p *Proposer) learn(from NodeID, m Membership) {
	switch {
	case p.m.Newer(m):
		p.Adopt(m)
	case m.Newer(p.m):
		p.pushTo(from)
	}
}

func (p *Proposer) pushTo(to NodeID) {
	for i := range p.pushes {
		if p.pushes[i].To == to {
			p.pushes[i].Members = p.m.clone()
			return
		}
	}
	p.pushes = append(p.pushes, ConfigPush{From: p.cfg.ID, To: to, Members: p.m.clone()})
}

// pushAll sends m to every voter it names, new and old.
func (p *Proposer) pushAll(m Membership) {
	for _, v := range m.Voters {
		p.pushTo(v)
	}
	for _, v := range m.Prev {
		if !m.IsVoter(v) {
			p.pushTo(v)
		}
	}
}

// migrateChange is the change function that moves a key into a new
// configuration: the value as it is, a lease timed for what is left of it
// (design.md R61, R63).
func (p *Proposer) migrateChange(x *op, base Value, replies []reply) (Value, OpResult, bool) {
	if !base.Held && base.Epoch == 0 && base.Config == nil {
		return Value{}, OpResult{Outcome: ReadDone}, false // nothing was ever chosen
	}
	x.timeLeft = 0
	if base.Held {
		x.timeLeft = p.rules.movedTTL(p, base, replies)
	}
	if x.timeLeft > 0 {
		v := base
		v.TTL = x.timeLeft
		return v, OpResult{}, true
	}
	return base, OpResult{}, true
}

// movedTTL is how long the new voters of a change time base's lease, which
// it moves: what is left of it (timeLeft), at most its TTL; 0 if no timer
// of it runs (design.md R63). A full TTL kept a crashed holder's key
// blocked up to a TTL longer per change.
func (p *Proposer) movedTTL(base Value, replies []reply) time.Duration {
	return min(p.timeLeft(base, replies), base.TTL)
}

// timeLeft is how long the lease of base may still run, on this node's
// clock: the longest remaining time a voter of the round reported for the
// grant, stretched for the worst clock-rate difference, or zero when no
// timer of it runs. A voter of any majority that accepted the lease's
// latest period is among the replies (one change apart, majorities of the
// old and the new voters meet), and its timer outlasts the holder's
// deadline; the longest stretched remaining time does too.
func (p *Proposer) timeLeft(base Value, replies []reply) time.Duration {
	var left time.Duration
	for i := range replies {
		if r := &replies[i].res; r.Remaining > 0 && r.Value.sameGrant(base) {
			left = max(left, r.Remaining)
		}
	}
	if left == 0 {
		return 0
	}
	return time.Duration(float64(left) * (1 + p.cfg.Drift) / (1 - p.cfg.Drift))
}

// configChange is the change function of a configuration write: compare
// and set on the configuration read, carrying the epoch floors its voters
// reported (design.md R58, R64).
func (p *Proposer) configChange(x *op, base Value, replies []reply) (Value, OpResult, bool) {
	cur := p.m
	if base.Config != nil {
		cur = *base.Config
	}
	switch {
	case p.rules.sameConfig(cur, *x.cfgWrite):
		// An earlier round of this very write got there: write it
		// back, so that it is chosen before it is reported (and
		// adopted as written, whatever floor that round gave it).
		*x.cfgWrite = cur.clone()
		return base, OpResult{}, true
	case cur.ID != x.cfgExpect:
		// Someone else changed the configuration first.
		return Value{}, OpResult{Outcome: Locked}, false
	}
	p.rules.raiseConfigFloor(x.cfgWrite, replies)
	w := x.cfgWrite.clone()
	return Value{Config: &w}, OpResult{}, true
}

// sameButFloor reports whether a and b are one configuration, perhaps with
// different epoch floors: two rounds of one write, each raising the floor
// to what its voters reported (raiseConfigFloor; design.md R64).
func sameButFloor(a, b Membership) bool {
	a.EpochFloor = b.EpochFloor
	return a.Equal(b)
}

// raiseConfigFloor raises the epoch floor of a configuration write to the
// highest epoch the voters that answered its round reported (each at least
// its acceptor's floor, which after a restart from disk is its epoch mark):
// a voter that lost its registers knows the epochs it accepted only by its
// mark, and the voters of a later configuration may not include it. A
// grant of epoch E that lived only at two voters that restarted together
// was granted again by the voter the next two changes left alone
// (design.md R64).
func raiseConfigFloor(write *Membership, replies []reply) {
	for i := range replies {
		write.EpochFloor = max(write.EpochFloor, replies[i].res.MaxEpoch)
	}
}

// reconfigWritten runs when a majority accepted a step of a voter change:
// a configuration written, or a key moved.
func (p *Proposer) reconfigWritten(x *op, res OpResult) {
	res.Outcome, res.Value = Granted, x.proposed
	if x.kind == kindMigrate {
		res.Outcome = ReadDone
	}
	p.finish(x, res)
}

// refusedForNoDisk ends a configuration write that voters refused for want
// of a disk: they refuse to vote on voter changes, and trying again is no
// use (design.md R60).
func (p *Proposer) refusedForNoDisk(x *op) bool {
	who := noDiskVoters(x.replies)
	if x.cfgWrite == nil || len(who) == 0 {
		return false
	}
	p.finish(x, OpResult{Outcome: Refused, Unknown: (x.phase == phaseAccept && x.votes.nyes > 0) || x.unknown,
		Err: fmt.Errorf("%w: voter changes need every voter to keep its state on disk, and %v keep none (set a data directory)", ErrBadChange, who)})
	return true
}

// noDiskVoters lists the voters that refused an operation for want of a
// disk (ReasonNoDisk).
func noDiskVoters(rs []reply) []NodeID {
	var who []NodeID
	for i := range rs {
		if rs[i].res.Reason == ReasonNoDisk {
			who = append(who, rs[i].from)
		}
	}
	return who
}
