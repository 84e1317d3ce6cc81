package quorum

import (
	"fmt"
	"slices"
	"time"
)

// Observing a key: the proposer registers with every voter (a peek with
// Op.Observe), and the voters push what they hold whenever it changes
// (observe_voter.go). A push is one voter's word, and an accept at one
// voter is not a decision, so the proposer keeps the latest report of each
// voter and reports a state (a KeyChange) only when the voters settle it
// (design.md R80):
//
//   - a majority reports one accepted ballot, and the highest ballot any
//     voter reports shows the same holder, token, value and freedom: that
//     value was chosen, and nothing newer is known (a renewal in flight
//     changes none of it); or
//   - every voter that reported shows what was last reported, and they
//     are a majority.
//
// Reports that do not settle (an accept that reached a minority: a
// proposer crashed, messages were lost, a voter is down) are given a round
// timeout for the other pushes to arrive, then the proposer reads the key
// (a linearizable read: a majority's agreement, or a write-back that makes
// the highest value chosen) and reports what the read found.
//
// A held value is live until its lease is seen ended (design.md R83): a
// majority of voters report the grant accepted at one ballot B, as the
// write that began a lease period (B is the value's Lease: each of them
// accepted it itself, not as a copy or a write-back, and started its timer
// then), with that timer run out (each pushes when it does). Each of them
// says so after the holder's deadline for the period B began, which its
// timer outlasts. A renewal after B that succeeded was accepted by a
// majority before the holder's deadline at the time, which is no later;
// that majority meets this one in a voter that had accepted the renewal's
// higher ballot before it reported, and would have reported that, not B. So
// no renewal after B succeeded, every period before it ended by its
// deadline, and the holder's lease had ended before any of these reports
// was made: however old they are, they settle it. Reports at different
// ballots never add up: a voter's word that its timer ran out may predate
// its accepting a later renewal, whose push (renewals are not pushed; a
// timer started again is) was lost or cut off, while the holder renews
// through others. Nor do copies and write-backs: their voters may never
// have timed the grant. When a majority reports its timer run out but not
// at one ballot (a holder that crashed in the middle of renewals leaves its
// voters at different ones), the proposer reads the key, again each time
// they say more; a read concludes as above, or from a write-back that no
// renewal it missed lets through (readSettlesLive).
//
// States are reported in order (design.md R81): a later state of another
// content has a higher ballot, and a state of the same content only goes
// from live to not live (or back to live by a later ballot: a renewal that
// landed late). States in between may be skipped; the last one is never
// stale for long: every change is pushed by the voters that accept it, and
// lost pushes are made good by registering again, every refresh interval
// and a round timeout after a held lease should have run out (design.md
// R86).
//
// An expiry ends one lease period: the one its value's Lease began
// (design.md R81). A renewal, or a re-take of the holder's own grant
// (design.md R32), begins another under the same content, which the
// observer takes in without reporting it (nothing shown changes), keeping
// the latest value and ballot it knows. An expiry of an earlier period
// than that one is stale, and is not reported: a read begun before the
// re-take may conclude "not live" for the period it saw (the holder's
// first try, which it wrote back without a timer) after the observer has
// seen the re-take settled; reported at the re-take's ballot, as the
// reports of one period are, it would say the holder's new lease ended
// the moment it began. Only a read begun after the observer learned of
// the latest period, linearizable, shows an earlier one ended truly
// later: the voters lost their state since, and their registers went back
// to it. Nor does a period reported ended run again: the grant written
// back at a later ballot, where no voter times it, is not live again;
// only a later period is.
//
// A key the voters forgot (acceptor_registers.go; design.md R82) answers as
// an empty register, at ballot 0: below every state at a real ballot,
// though it is newer than all of them. A voter drops a register only once
// every voter was seen holding it free at one ballot, above every value it
// held before, with no timer running; so a voter whose answer to a
// registration holds nothing where it had reported a value forgot the key
// since (or lost its state), and reports that settle on an empty register
// (after a new configuration, whose voters' reports begin again) show a key
// forgotten or never written. The proposer then reads the key; a read of an
// observer that last reported the key held does not conclude from a
// majority holding nothing: it prepares, and reports the empty register at
// the ballot the majority promised. Every value chosen before the promises
// is below that ballot (a voter of its majority is among them), every value
// chosen after is above it, so the key is reported free after the held
// state and before any later grant; and free it is, as an acquire on those
// answers would find it. Taking the empty answers for older instead left an
// observer that missed the release push reporting the key held, and live,
// for good.
//
// Registrations expire at the voters (three refresh intervals after the
// last), so a node that forgets to unobserve costs them little.

// observation is one observed key at this proposer.
type observation struct {
	key     string
	refresh time.Duration
	cfg     uint64 // the configuration of reports and registrations
	reports map[NodeID]obsReport

	round    uint64          // registration rounds sent
	roundAt  time.Duration   // when the last one was sent
	rids     [2]uint64       // wire ids of the last two rounds
	answered map[NodeID]bool // voters that answered the last round
	synced   uint64          // the last round a majority answered
	syncFor  uint64          // report the state once a round this late settles it (0: no one waits)

	emitted bool
	last    KeyChange // the state last reported, at the latest value and ballot settled for it since (see offer)
	emits   uint64    // states reported
	seen    uint64    // changes to last, reported or not

	read           *op           // a resolving read in flight
	lost           bool          // a voter lost its state since the last read began: read
	forgot         bool          // voters hold nothing of a key last reported held (forgotten): read, with a ballot
	readRound      uint64        // the round when it began
	readAt         time.Duration // when the last one began
	readEmits      uint64        // emits when it began
	readSeen       uint64        // seen when it began
	unsettledSince time.Duration // zero while the reports settle the state
	refreshAt      time.Duration // the next registration
	checkAt        time.Duration // a round timeout after the held lease should have run out (zero: none)
	gen            uint64        // timer generation
}

// obsReport is one voter's latest word on the key.
type obsReport struct {
	accepted  Ballot
	value     Value
	live      bool
	remaining time.Duration
	at        time.Duration // when it arrived, on this node's clock
	copy      bool          // a value the voter copied, not accepted (Result.Copy)
	inc       uint64        // the voter's incarnation that answered (zero: not known)
	incRound  uint64        // registration rounds sent before this observer first heard from inc
}

// Observe starts observing key (or, if it is observed already, registers
// again): states come through Ready as KeyChanges. It returns the round of
// the registration it sends: the first KeyChange of that round or later is
// at least as new as the key's state when Observe was called, and one is
// reported even if nothing changed. refresh is how often the registration
// is renewed (and the voters' word taken again); the voters drop it after
// three.
func (p *Proposer) Observe(key string, refresh time.Duration) (uint64, error) {
	if key == "" || key[0] == 0 {
		return 0, ErrBadKey
	}
	if refresh < p.cfg.RoundTimeout {
		return 0, fmt.Errorf("%w: refresh %v below the round timeout %v", ErrBadOptions, refresh, p.cfg.RoundTimeout)
	}
	if p.observations == nil {
		p.observations = make(map[string]*observation)
		p.obsRounds = make(map[uint64]*observation)
	}
	o := p.observations[key]
	if o == nil {
		o = &observation{key: key, refresh: refresh, reports: make(map[NodeID]obsReport)}
		p.observations[key] = o
	}
	o.refresh = min(o.refresh, refresh)
	p.observeRound(o)
	o.syncFor = o.round
	return o.round, nil
}

// Unobserve stops observing key and tells the voters so.
func (p *Proposer) Unobserve(key string) {
	o := p.observations[key]
	if o == nil {
		return
	}
	delete(p.observations, key)
	for _, rid := range o.rids {
		delete(p.obsRounds, rid)
	}
	o.gen++
	for i := range p.m.Voters {
		p.push(i, Op{Kind: OpPeek, Key: key, Observe: 1}) // a registration that has already ended
	}
}

// Observing is the number of keys this proposer observes.
func (p *Proposer) Observing() int { return len(p.observations) }

// observeRound registers with every voter again; the answers are reports.
func (p *Proposer) observeRound(o *observation) {
	now := p.clock.Now()
	if o.cfg != p.m.ID {
		// Another configuration: its voters know nothing of this
		// observation, and the old ones' word no longer decides.
		o.cfg = p.m.ID
		clear(o.reports)
		o.synced = 0
	}
	p.nextRID++
	rid := p.nextRID
	delete(p.obsRounds, o.rids[1])
	o.rids[0], o.rids[1] = rid, o.rids[0]
	p.obsRounds[rid] = o
	o.round++
	o.roundAt = now
	o.answered = make(map[NodeID]bool, len(p.m.Voters))
	for i := range p.m.Voters {
		p.push(i, Op{ID: rid, Kind: OpPeek, Key: o.key, Observe: 3 * o.refresh})
	}
	o.refreshAt = now + o.refresh
	p.armObserve(o)
}

// observeAnswer takes a voter's answer to a registration.
func (p *Proposer) observeAnswer(o *observation, from NodeID, inc uint64, res *Result) {
	if !res.OK || o.cfg != p.m.ID || !p.m.IsVoter(from) {
		return
	}
	round := o.round // the round answered: the last, or the one before
	if res.ID != o.rids[0] {
		round--
	}
	if r, ok := o.reports[from]; ok && inc != 0 && inc != r.inc {
		if _, known := p.rules.laterLife(r, inc, round); !known {
			// Another life of the voter than the one it heard from
			// answers a round sent before it heard from that one: perhaps
			// a late answer of an earlier life. Its word is not taken; a
			// round sent from now on settles which is later (see report).
			if o.round <= r.incRound {
				p.observeRound(o)
			}
			return
		}
	}
	if r, ok := o.reports[from]; ok && res.ID == o.rids[0] && p.rules.forgotten(r.accepted, res.Accepted) {
		// The voter holds nothing of the key any more, having reported
		// a value: it forgot the register (or lost its state). That is
		// its word now; what the key's state is, a read decides.
		delete(o.reports, from)
		o.forgot = true
	}
	p.report(o, from, inc, round, res.Accepted, res.Value, res.Remaining, res.Copy)
	if res.ID == o.rids[0] && !o.answered[from] {
		o.answered[from] = true
		if len(o.answered) >= p.m.Majority() {
			o.synced = o.round
		}
	}
	p.evaluate(o)
}

// handleChanges takes a voter's pushes.
func (p *Proposer) handleChanges(n *Notify) {
	if !p.m.IsVoter(n.From) {
		return
	}
	for i := range n.Changes {
		c := &n.Changes[i]
		o := p.observations[c.Key]
		if o == nil || o.cfg != n.Config {
			continue // no longer observed here: the registration lapses
		}
		p.report(o, n.From, 0, 0, c.Accepted, c.Value, c.Remaining, c.Copy)
		p.evaluate(o)
	}
}

// report keeps a voter's word unless it is older than what it said before.
// inc is the incarnation of the voter that answered registration round
// round (zero for a push, which comes from the life that took the
// registration).
//
// Which of two lives of a voter is the later is not told by their
// incarnations: a node takes its incarnation from its wall clock at start,
// and a clock set back across a restart gives a later life a lower one
// (the observer then took a later life's word, after a majority lost its
// state, for a late message, and kept showing a released lease held). It
// is told by the rounds (laterLifeByRounds; design.md R85). A push names no
// life: it comes from the life that took the registration, taken for the
// one this observer heard from last (a report a push made names none, and
// the first answer names it).
func (p *Proposer) report(o *observation, from NodeID, inc, round uint64, accepted Ballot, v Value, remaining time.Duration, copied bool) {
	r, ok := o.reports[from]
	other := ok && inc != 0 && inc != r.inc // another life (observeAnswer took it for a later one)
	if ok && accepted.Less(r.accepted) {
		later := false
		if other {
			later, _ = p.rules.laterLife(r, inc, round)
		}
		if !p.rules.supersedes(r.accepted, accepted, later) {
			return // a late message of the life that said more
		}
		// A later life of the voter answers under a lower ballot than it
		// reported before: it lost its state (within a life, ballots never
		// go down), and so, perhaps, did a majority, after which the key's
		// states come under ballots lower than those reported (design.md
		// R81). Its word stands; a read says what the state is.
		o.lost = true
	}
	incRound := r.incRound
	if !ok || other {
		incRound = o.round // first heard from this life now
	}
	if inc == 0 && ok {
		inc = r.inc
	}
	o.reports[from] = obsReport{accepted: accepted, value: v, live: remaining > 0, remaining: remaining, at: p.clock.Now(),
		copy: copied, inc: inc, incRound: incRound}
}

// laterLifeByRounds reports whether inc, another life of the voter that
// made the report had, is a later life than had's, when that is known
// (design.md R85). Lives of one name run one after the other, and had's
// life L answered this observer (incRound: the rounds sent before it first
// did), so L was up when it sent that answer; a life that answers a round
// sent after the answer arrived was up later still: L, or a life after L.
// Another incarnation is then a later life, and its word stands, at a
// lower ballot too. One that answers a round sent before may have
// answered before L started, its answer late: not known. A report that
// names no life (a push's) is had's life's word, and any named one later.
func laterLifeByRounds(had obsReport, inc, round uint64) (later, known bool) {
	if had.inc == 0 || round > had.incRound {
		return true, true
	}
	return false, false
}

// supersedes reports whether a state at ballot now is newer than one at
// was: a later ballot is; so is a later word at any ballot (a later life
// of a voter, a read begun after was was reported), after which the
// voters' ballots may have begun again lower, having lost their state
// (design.md R81).
func supersedes(was, now Ballot, later bool) bool { return later || was.Less(now) }

// forgottenSince reports whether a register at ballot now, where one at was
// was seen before, is the key forgotten since: it holds nothing (ballot 0)
// where a value at a real ballot was; newer, not older, than every state
// at a real ballot (design.md R82; see the top of the file).
func forgottenSince(was, now Ballot) bool { return now.IsZero() && !was.IsZero() }

// evaluate reports the key's state if the voters settle it, and otherwise
// arranges to find out.
func (p *Proposer) evaluate(o *observation) {
	if o.synced == 0 {
		return // no majority has answered a registration yet
	}
	now := p.clock.Now()
	st, ok := p.settle(o)
	if ok && !st.Value.Held && p.rules.forgotten(o.last.Ballot, st.Ballot) {
		// A majority holds nothing of the key, and no voter more (the
		// reports began again in a new configuration, say): forgotten,
		// if it was held.
		o.forgot = true
	}
	if o.forgot && (!o.emitted || !o.last.Value.Held) {
		o.forgot = false // nothing held to move on from: an empty register says no more than free
	}
	if (o.forgot || o.lost) && o.read == nil {
		p.observeRead(o)
	}
	if !ok {
		if o.unsettledSince == 0 {
			o.unsettledSince = now
		}
		if (!o.emitted || o.syncFor != 0) && o.read == nil {
			p.observeRead(o) // the first state, or one a subscriber waits for: at once
		}
		p.armObserve(o)
		return
	}
	o.unsettledSince = 0
	if o.read == nil && (p.expiryInDoubt(o, st) || p.staleExpiry(o, st)) {
		// A stale expiry from the reports (after a configuration
		// change or a loss) is not reported; a read says what is true.
		p.observeRead(o)
	}
	p.offer(o, st, o.synced, false, false)
	p.armObserve(o)
}

// settle is the state the voters' reports settle, if they do.
func (p *Proposer) settle(o *observation) (KeyChange, bool) {
	var st KeyChange
	var ok bool
	if st.Value, st.Ballot, ok = p.rules.settled(p, o); !ok {
		return KeyChange{}, false
	}
	if st.Value.Held {
		for _, id := range p.m.Voters {
			if r, ok := o.reports[id]; ok && r.live && r.value.sameGrant(st.Value) {
				st.Remaining = max(st.Remaining, r.remaining)
			}
		}
		st.Live = !p.rules.leaseEnded(p, o, st.Value)
		if !st.Live {
			st.Remaining = 0
		}
	}
	return st, true
}

// settledByMajority is the value, and its ballot, that the voters'
// reports settle (design.md R80): a majority reports it accepted at one
// ballot, none as a copy, and the highest report shows its content; or
// every voter that reported, a majority, shows the state reported last.
func (p *Proposer) settledByMajority(o *observation) (Value, Ballot, bool) {
	q := p.m.Majority()
	var (
		hi      obsReport
		present int
		ballots [16]struct {
			b Ballot
			n int
			v Value
		}
		nb int
	)
	for _, id := range p.m.Voters {
		r, ok := o.reports[id]
		if !ok {
			continue
		}
		if present == 0 || hi.accepted.Less(r.accepted) {
			hi = r
		}
		present++
		if r.copy {
			continue // no vote: it counts toward no ballot's majority
		}
		found := false
		for i := 0; i < nb; i++ {
			if ballots[i].b == r.accepted {
				ballots[i].n++
				found = true
			}
		}
		if !found && nb < len(ballots) {
			ballots[nb].b, ballots[nb].n, ballots[nb].v = r.accepted, 1, r.value
			nb++
		}
	}
	chosen := -1
	for i := 0; i < nb; i++ {
		if ballots[i].n >= q && (chosen < 0 || ballots[chosen].b.Less(ballots[i].b)) {
			chosen = i
		}
	}
	switch {
	case chosen >= 0 && sameContent(ballots[chosen].v, hi.value):
		return ballots[chosen].v, ballots[chosen].b, true
	case o.emitted && present >= q && p.allShow(o, o.last.Value):
		return o.last.Value, o.last.Ballot, true
	}
	return Value{}, Ballot{}, false
}

// leaseEnded reports whether the voters' reports show the lease of v's
// grant ended (design.md R83): a majority of them report the grant accepted at
// one ballot B, as the write that began a lease period (v.Lease is B:
// each accepted it itself and started its timer then; a copy, or a
// write-back at a later ballot, may have no timer of it), with that timer
// run out. Reports at different ballots never add up; see the top of the
// file.
func (p *Proposer) leaseEnded(o *observation, v Value) bool {
	q := p.m.Majority()
	for i, id := range p.m.Voters {
		r, ok := o.reports[id]
		if !ok || !endsLease(r, v) {
			continue
		}
		n := 1
		for _, other := range p.m.Voters[i+1:] {
			if s, ok := o.reports[other]; ok && endsLease(s, v) && s.accepted == r.accepted {
				n++
			}
		}
		if n >= q {
			return true
		}
	}
	return false
}

// endsLease reports whether r is a voter's word that its timer of v's
// grant ran out, at a ballot that began a lease period there.
func endsLease(r obsReport, v Value) bool {
	return !r.live && !r.copy && r.value.sameGrant(v) && r.accepted == r.value.Lease
}

// expiryInDoubt reports whether a majority of voters report st's lease
// run out, though not at one ballot (leaseEnded), and some of them said so
// after the last read began: a holder that crashed during a renewal, say,
// leaves its voters at different ballots. A read settles it (a majority
// at one ballot, or a write-back, orders it after every renewal that could
// still succeed). A state already reported not live needs none, and while
// no majority answers registrations no read would finish either.
func (p *Proposer) expiryInDoubt(o *observation, st KeyChange) bool {
	if !st.Live || (o.emitted && !o.last.Live && sameContent(o.last.Value, st.Value)) || len(o.answered) < p.m.Majority() {
		return false
	}
	n, news := 0, false
	for _, id := range p.m.Voters {
		if r, ok := o.reports[id]; ok && !r.live && r.value.sameGrant(st.Value) {
			n++
			news = news || r.at > o.readAt
		}
	}
	return n >= p.m.Majority() && news
}

// allShow reports whether every voter's report shows v's content.
func (p *Proposer) allShow(o *observation, v Value) bool {
	for _, id := range p.m.Voters {
		if r, ok := o.reports[id]; ok && !sameContent(r.value, v) {
			return false
		}
	}
	return true
}

// staleExpiry reports whether st shows the lease of the grant last
// reported ended for a lease period before the latest one this observer
// knows of (design.md R81; see the top of the file).
func (p *Proposer) staleExpiry(o *observation, st KeyChange) bool {
	return o.emitted && st.Value.Held && !st.Live && sameContent(st.Value, o.last.Value) &&
		!p.rules.endsLatestPeriod(o.last.Value, st.Value)
}

// endsLatestPeriod reports whether an expiry of v, the content of known,
// the latest value this observer knows of, ends known's lease period:
// v's Lease is no earlier (design.md R81).
func endsLatestPeriod(known, v Value) bool { return !v.Lease.Less(known.Lease) }

// offer reports st unless it is older than, or the same as, the state
// reported last (a subscriber waiting for a round st is of gets it anyway).
// newer: st is known to be later than the state reported last, whatever
// its ballot; current: st is at least as new as anything this observer
// learned of the key (a read begun since).
//
// A state of the same content and liveness is not reported again, but a
// later ballot's value is kept as the last state's: a renewal or a re-take
// begins a new lease period, and an expiry of an earlier one is stale
// (design.md R81).
func (p *Proposer) offer(o *observation, st KeyChange, round uint64, newer, current bool) {
	sync := o.syncFor != 0 && round >= o.syncFor
	if o.emitted {
		same := sameContent(st.Value, o.last.Value)
		switch {
		case !current && p.staleExpiry(o, st):
			if !sync {
				return
			}
			st = o.last // the latest state known, for the subscriber waiting
		case same && st.Live == o.last.Live:
			if o.last.Ballot.Less(st.Ballot) {
				o.last.Value, o.last.Ballot = st.Value, st.Ballot
				o.seen++
			}
			if !sync {
				return
			}
			st.Value, st.Ballot = o.last.Value, o.last.Ballot
		case same && st.Live && !o.last.Live && !o.last.Value.Lease.Less(st.Value.Lease):
			// Live again in the period reported ended: the grant written
			// back at a later ballot, where no voter times it. A period
			// that ended never runs again; only a later one is live
			// (design.md R81).
			if !sync {
				return
			}
			st = o.last
		case same && !st.Live:
			// The lease ran out at a majority.
			if st.Ballot.Less(o.last.Ballot) {
				st.Ballot = o.last.Ballot
			}
		default:
			// Another value, or the same grant live again in a later
			// lease period (a renewal that landed after the timers ran
			// out): only by a later ballot.
			if !p.rules.supersedes(o.last.Ballot, st.Ballot, newer) {
				return
			}
		}
	}
	st.Key, st.Round = o.key, round
	o.last, o.emitted = st, true
	o.emits++
	o.seen++
	if sync {
		o.syncFor = 0
	}
	p.changes = append(p.changes, st)
	p.armObserve(o)
}

// observeRead starts a linearizable read of the key, to settle what the
// voters' reports do not.
func (p *Proposer) observeRead(o *observation) {
	id, err := p.Read(o.key, p.clock.Now()+3*p.cfg.RoundTimeout)
	if err != nil {
		return
	}
	x := p.ops[id]
	if x == nil {
		return
	}
	x.obs = o
	// A key this observer saw held that a majority holds nothing of now
	// was forgotten since: the read reports it at a ballot it prepared,
	// which orders it after that state (see the top of the file).
	x.readOrder = o.emitted && o.last.Value.Held && p.rules.forgotten(o.last.Ballot, Ballot{})
	o.read, o.readRound, o.readEmits, o.readSeen, o.readAt = x, o.round, o.emits, o.seen, p.clock.Now()
	o.lost = false
}

// observeReadDone takes the result of a resolving read.
func (p *Proposer) observeReadDone(o *observation, res OpResult) {
	o.read = nil
	if p.observations[o.key] != o {
		return
	}
	now := p.clock.Now()
	if res.Outcome == ReadDone {
		st := KeyChange{Value: res.Value, Live: res.Live && res.Value.Held, Ballot: res.Accepted}
		if st.Ballot.IsZero() && !res.Value.Held {
			st.Ballot = res.Ballot // an empty register, ordered by the read's ballot (zero if it had none)
		}
		// Settled, unless the read began before the observer saw the key
		// held and found it empty with no ballot: the next one orders it.
		o.forgot = o.forgot && st.Ballot.IsZero()
		for _, r := range o.reports {
			if r.live && r.value.sameGrant(st.Value) {
				st.Remaining = max(st.Remaining, r.remaining)
			}
		}
		if !st.Live {
			st.Remaining = 0
		}
		// A read that began after the last state was reported finds a
		// state at least as new (it is linearizable). Of another content
		// under a ballot not above that state's, it is newer all the same:
		// the voters lost their state since (a majority at once) and their
		// ballots began again lower (design.md R81). Without this the
		// observer refused every later state, at lower ballots, and showed
		// a released lease held for good.
		newer := o.emitted && o.readEmits == o.emits && !sameContent(st.Value, o.last.Value) &&
			!o.last.Ballot.Less(st.Ballot) && p.rules.supersedes(o.last.Ballot, st.Ballot, true)
		if newer {
			// The voters' earlier word is of before the loss, at ballots
			// above what they say now: take it afresh.
			clear(o.reports)
			o.synced = 0
		}
		p.offer(o, st, o.readRound, newer, o.readSeen == o.seen)
		if newer {
			p.observeRound(o)
		}
	}
	if o.unsettledSince != 0 {
		o.unsettledSince = now // the pushes the read caused settle it, or the next read
	}
	p.armObserve(o)
}

// armObserve sets the observation's timer for the next thing it must do:
// register again, read to settle the reports, or look again after the
// held lease should have run out.
func (p *Proposer) armObserve(o *observation) {
	if p.observations[o.key] != o {
		return
	}
	rt := p.cfg.RoundTimeout
	// A registration is not sent again before the last has had time to
	// be answered.
	o.checkAt = 0
	if o.emitted && o.last.Live {
		var latest time.Duration
		for _, r := range o.reports {
			if r.live && r.value.sameGrant(o.last.Value) {
				latest = max(latest, r.at+time.Duration(float64(r.remaining)*(1+p.cfg.Drift)/(1-p.cfg.Drift)))
			}
		}
		if latest > 0 {
			o.checkAt = max(latest+rt, o.roundAt+2*rt)
		}
	}
	if len(o.answered) < p.m.Majority() {
		// The registration went unanswered (lost, or voters down): again
		// soon, not a refresh interval later.
		if o.checkAt == 0 || o.roundAt+2*rt < o.checkAt {
			o.checkAt = o.roundAt + 2*rt
		}
	}
	at := o.refreshAt
	if o.checkAt != 0 && o.checkAt < at {
		at = o.checkAt
	}
	if o.unsettledSince != 0 && o.read == nil && o.unsettledSince+rt < at {
		at = o.unsettledSince + rt
	}
	at = max(at, p.clock.Now()+time.Millisecond) // time moves on between two looks
	o.gen++
	p.arm(timer{at: at, kind: timerObserve, on: o, gen: o.gen})
}

// observeTimer runs the observation's timer.
func (p *Proposer) observeTimer(o *observation, now time.Duration) {
	switch {
	case o.cfg != p.m.ID || now >= o.refreshAt || (o.checkAt != 0 && now >= o.checkAt):
		p.observeRound(o)
	case o.unsettledSince != 0 && o.read == nil && now >= o.unsettledSince+p.cfg.RoundTimeout:
		p.observeRead(o)
		p.armObserve(o)
	default:
		p.armObserve(o)
	}
}

// observeAdopted registers every observation with the voters of a new
// configuration.
func (p *Proposer) observeAdopted(now time.Duration) {
	keys := make([]string, 0, len(p.observations))
	for k := range p.observations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		o := p.observations[k]
		o.refreshAt = now
		p.armObserve(o)
	}
}
