package quorum

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// simChecker checks DESIGN's invariants at every step of a simulated run:
//
//	I1 exclusion: the intervals [grant, deadline] of one key never overlap
//	   in real time (an interval ends early at a release or a crash);
//	I2 tokens strictly increase per key, across full restarts too;
//	I3 one grant per token; a renewal keeps the token;
//	I4 the fenced resource never applies a lower token after a higher one,
//	   and never refuses a write made inside its writer's interval;
//	I5 every decision rests on a majority of distinct acceptors of the
//	   configuration that did accept that ballot;
//	I6 no acceptor accepts below its promise; one ballot, one value;
//	I7 a release acts only on its own grant (and, through I8, only when the
//	   register holds exactly that grant);
//	I8 each key's history is linearizable (porcupine, per era between full
//	   restarts);
//	I9 once faults heal, every waiting client is served within a bound;
//
// and C3: a loss is reported before the deadline passes.
type simChecker struct {
	s        *sim
	era      int
	hist     []*qt.History
	grants   map[string][]*grantRec
	maxToken map[string]uint64
	tokens   map[string]map[uint64]bool

	// ballots is what was sent and accepted at each ballot of each key
	// (see keyBallots); what each node incarnation did on each key is kept
	// on the node (simNode.checked).
	ballots map[string]*keyBallots
	// The records, carved from slabs.
	incRecs    slab[incRec]
	ballotRecs slab[ballotRec]
	wroteRecs  slab[wroteRec]
	// chosen lists, per key, each ballot when it reached a majority.
	chosen map[string][]chosenAt
	// wrote is, for each write, the highest ballot at which its writer
	// proposed it, and when some acceptor first accepted it: no write
	// takes effect before that.
	wrote    map[writeKey]*wroteRec
	unknowns []ghost

	// The fenced resource: lease.Fence decides; applied records what it let
	// through, per key, for I4 to check independently.
	fence   *lease.Fence
	applied map[string]uint64

	healedAt time.Duration
	pending  map[*simClient]time.Duration // waiting acquires, by start
	maxWait  time.Duration
	// freedAt is when each key was last released while a client waited
	// for it (after the heal); the next grant must follow within a few
	// round trips (I9, hand-over). maxHandover is the longest seen.
	freedAt     map[string]time.Duration
	maxHandover time.Duration
	// longestCheck is the longest linearizability check of one key.
	longestCheck time.Duration

	// What observers reported and how many of their last states were
	// checked at rest (sim_observe_test.go), the semaphore's holders
	// (sim_semaphore_test.go), and every value each holder wrote, by
	// key|holder (sim_value_test.go).
	obs      map[obsLife]*obsLog
	obsFinal int
	sem      semCheck
	data     map[string]map[string]bool
	// losses are the times a majority of voters lost their state.
	losses []time.Duration
}

type grantRec struct {
	key    string
	token  uint64
	node   *simNode
	client *simClient
	start  time.Duration // real
	end    time.Duration // real: the deadline, or the release or crash
	lost   bool
	closed bool // released or crashed: end is final
	// ballot is the ballot the grant was chosen at; notLiveAt is when an
	// observer or a read first reported its lease ended, at that ballot or
	// above, by notLiveBy (O4: a renewal must not outlast it).
	ballot    Ballot
	notLiveAt time.Duration
	notLiveBy string
}

type chosenAt struct {
	ballot Ballot
	at     time.Duration
}

type writeKey struct {
	key    string
	writer string // node/inc
	held   bool
	epoch  uint64
}

// ghost is a write of unknown outcome: an epoch an operation proposed in a
// round whose end it never heard. It may take effect until a higher ballot
// is chosen for the key (after that it can never be the highest value a
// majority holds), so that is when its operation ends in the history.
type ghost struct {
	era    int
	key    string
	client int
	in     qt.Input
	out    qt.Output
	call   time.Duration
	write  writeKey
}

// incRec is what one node incarnation did on one key: as a proposer, the
// highest ballot it sent (I6: a proposer never uses one ballot twice); as
// an acceptor, the highest ballot it promised.
type incRec struct {
	sent     Ballot
	sentAny  bool
	promised Ballot
}

// keyBallots is what was sent and accepted at each ballot of one key.
type keyBallots struct {
	recs map[Ballot]*ballotRec
	// last is the ballot looked up last, and its record: a round's
	// prepares and accepts go to every voter and their answers come back
	// one by one, so that most look-ups are of the ballot before, and
	// need no hashing of the ballot (whose node name made hashing a fifth
	// of the checker's time).
	last    Ballot
	lastRec *ballotRec
}

// find is the record of ballot b, or nil.
func (kb *keyBallots) find(b Ballot) *ballotRec {
	if kb.lastRec != nil && kb.last == b {
		return kb.lastRec
	}
	r := kb.recs[b]
	if r != nil {
		kb.last, kb.lastRec = b, r
	}
	return r
}

// ballotRec is what was sent and accepted at one ballot of one key.
type ballotRec struct {
	// round is the operation that prepared the ballot (when prepared),
	// sentValue the value its accepts carried (when sent).
	prepared  bool
	round     uint64
	sent      bool
	sentValue Value
	// value is the value acceptors accepted at the ballot (when
	// accepted), acceptedBy the acceptors that did.
	accepted   bool
	value      Value
	acceptedBy []NodeID
}

// wroteRec is a write some acceptor accepted (simChecker.wrote).
type wroteRec struct {
	ballot Ballot
	first  time.Duration
}

func newSimChecker(s *sim) *simChecker {
	return &simChecker{
		s:        s,
		hist:     []*qt.History{qt.NewHistory()},
		grants:   make(map[string][]*grantRec),
		maxToken: make(map[string]uint64),
		tokens:   make(map[string]map[uint64]bool),
		ballots:  make(map[string]*keyBallots),
		chosen:   make(map[string][]chosenAt),
		wrote:    make(map[writeKey]*wroteRec),
		fence:    lease.NewFence(),
		applied:  make(map[string]uint64),
		healedAt: -1,
		pending:  make(map[*simClient]time.Duration),
		freedAt:  make(map[string]time.Duration),
	}
}

// inc is the record of what n's current incarnation did on key. Each life
// starts with no records (its incarnation is new), and only a node's
// current life is looked up: the records are kept on the node, by key
// alone, and those of its earlier lives dropped (hashing the node's name
// and the key for every look-up was a tenth of the checker's time).
func (k *simChecker) inc(n *simNode, key string) *incRec {
	if n.checked == nil || n.checkedInc != n.inc {
		n.checked, n.checkedInc = make(map[string]*incRec), n.inc
	}
	r := n.checked[key]
	if r == nil {
		r = k.incRecs.new()
		n.checked[key] = r
	}
	return r
}

// ballot is the record of ballot b of key.
func (k *simChecker) ballot(key string, b Ballot) *ballotRec {
	kb := k.ballots[key]
	if kb == nil {
		kb = &keyBallots{recs: make(map[Ballot]*ballotRec)}
		k.ballots[key] = kb
	}
	r := kb.find(b)
	if r == nil {
		r = k.ballotRecs.new()
		kb.recs[b] = r
		kb.last, kb.lastRec = b, r
	}
	return r
}

// findBallot is the record of ballot b of key, or nil when nothing was
// sent or accepted at it.
func (k *simChecker) findBallot(key string, b Ballot) *ballotRec {
	if kb := k.ballots[key]; kb != nil {
		return kb.find(b)
	}
	return nil
}

func (k *simChecker) history() *qt.History {
	for len(k.hist) <= k.era {
		k.hist = append(k.hist, qt.NewHistory())
	}
	return k.hist[k.era]
}

// requestSent checks I6 on what a proposer sends: a prepare is of a
// ballot above every ballot the proposer's incarnation used on the key
// before (or repeats its own round to another voter), and one ballot
// carries one value.
func (k *simChecker) requestSent(n *simNode, req *Request) {
	for i := range req.Ops {
		op := &req.Ops[i]
		if op.Kind != OpPrepare && op.Kind != OpAccept {
			continue
		}
		b := k.ballot(op.Key, op.Ballot)
		sent := k.inc(n, op.Key)
		switch op.Kind {
		case OpPrepare:
			if b.prepared {
				if b.round != op.ID {
					k.s.failf("I6: %s prepared %q twice at ballot %v (rounds %d and %d)", n.id, op.Key, op.Ballot, b.round, op.ID)
				}
				continue
			}
			if sent.sentAny && !sent.sent.Less(op.Ballot) {
				k.s.failf("I6: %s prepared %q at ballot %v, not above %v, which it used before", n.id, op.Key, op.Ballot, sent.sent)
				return
			}
			b.prepared, b.round = true, op.ID
		case OpAccept:
			if b.sent && !sameValue(b.sentValue, op.Value) {
				k.s.failf("I6: %s sent two values at ballot %v of %q: %v and %v", n.id, op.Ballot, op.Key, b.sentValue, op.Value)
				return
			}
			b.sent, b.sentValue = true, op.Value
		}
		sent.sent, sent.sentAny = maxBallot(sent.sent, op.Ballot), true
	}
}

// acceptorAnswered checks I6 on every answer of every acceptor and records
// which acceptor accepted what, for I5.
func (k *simChecker) acceptorAnswered(n *simNode, req *Request, resp *Response) {
	if resp.Status != StatusOK {
		return
	}
	m, ok := k.s.config(req.Config)
	if !ok {
		k.s.failf("I5: %s answered a request of configuration %d, which no node adopted", n.id, req.Config&0xffff)
		return
	}
	for i := range req.Ops {
		op := &req.Ops[i]
		if !resp.Results[i].OK || (op.Kind != OpPrepare && op.Kind != OpAccept) {
			continue
		}
		acc := k.inc(n, op.Key)
		if op.Kind == OpPrepare {
			acc.promised = maxBallot(acc.promised, op.Ballot)
			continue
		}
		if op.Ballot.Less(acc.promised) {
			k.s.failf("I6: %s accepted %q at %v below its promise %v", n.id, op.Key, op.Ballot, acc.promised)
			return
		}
		b := k.ballot(op.Key, op.Ballot)
		if b.accepted && !sameValue(b.value, op.Value) {
			k.s.failf("I6: ballot %v of %q carried two values: %v and %v", op.Ballot, op.Key, b.value, op.Value)
			return
		}
		b.accepted, b.value = true, op.Value
		if !slices.Contains(b.acceptedBy, n.id) {
			b.acceptedBy = append(b.acceptedBy, n.id)
			if len(b.acceptedBy) == m.Majority() {
				k.chosen[op.Key] = append(k.chosen[op.Key], chosenAt{op.Ballot, k.s.now})
			}
		}
		wk := writeKey{key: op.Key, writer: k.s.holderName(op.Ballot.Node, op.Ballot.Incarnation),
			held: op.Value.Held, epoch: op.Value.Epoch}
		if w := k.wrote[wk]; w != nil {
			w.ballot = maxBallot(w.ballot, op.Ballot)
		} else {
			w = k.wroteRecs.new()
			w.ballot, w.first = op.Ballot, k.s.now
			k.wrote[wk] = w
		}
		acc.promised = maxBallot(op.Ballot, op.Next)
	}
}

// sameValue compares two values, configurations by content.
func sameValue(a, b Value) bool {
	if (a.Config == nil) != (b.Config == nil) {
		return false
	}
	if a.Config != nil && !a.Config.Equal(*b.Config) {
		return false
	}
	a.Config, b.Config = nil, nil
	return a == b
}

// quorumOK checks I5 for a decision.
func (k *simChecker) quorumOK(n *simNode, res OpResult) {
	if k.s.cfg.skipI5 {
		return
	}
	m, ok := k.s.config(res.Config)
	if !ok {
		k.s.failf("I5: %s decided %q in configuration %d, which no node adopted", n.id, res.Key, res.Config&0xffff)
		return
	}
	for i, id := range res.Quorum {
		if slices.Contains(res.Quorum[:i], id) {
			k.s.failf("I5: %s counted acceptor %s twice for %q ballot %v", n.id, id, res.Key, res.Ballot)
			return
		}
		if !m.IsVoter(id) {
			k.s.failf("I5: %s counted non-voter %s for %q", n.id, id, res.Key)
			return
		}
		if b := k.findBallot(res.Key, res.Ballot); b == nil || !slices.Contains(b.acceptedBy, id) {
			k.s.failf("I5: %s counted %s for %q ballot %v, which it never accepted", n.id, id, res.Key, res.Ballot)
			return
		}
	}
	if len(res.Quorum) < m.Majority() {
		k.s.failf("I5: %s decided %q on %d acceptors %v; a majority is %d", n.id, res.Key, len(res.Quorum), res.Quorum, m.Majority())
	}
}

// result routes an operation's result and checks what it claims.
func (k *simChecker) result(n *simNode, res OpResult) {
	s := k.s
	if s.onResult != nil {
		s.onResult(n, res)
	}
	if res.Swept {
		// A sweep freed an expired grant of res.Holder: a write that may
		// take effect until a higher ballot is chosen. Recorded as a ghost
		// even when a majority accepted it, since the holder's release
		// may have been in flight (a release that wrote first says
		// Released on finding the key free at its epoch): one of the two
		// frees it, and the model picks which.
		in := qt.Input{Kind: qt.Cleanup, Holder: holderName(res.Holder, res.HolderInc)}
		out := qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: res.Epoch}
		k.addGhost(res.Key, -1, n.holderName(), in, out, n.clock.realAt(res.Started), false, res.Epoch)
		return
	}
	if res.Outcome == Granted || res.Outcome == Released || (res.Outcome == ReadDone && len(res.Quorum) > 0) {
		k.quorumOK(n, res)
	}
	if res.Internal {
		out := qt.Output{Outcome: outcomeName(res.Outcome), Epoch: res.Epoch}
		call := n.clock.realAt(res.Started)
		in := qt.Input{Kind: qt.Cleanup, Holder: n.holderName()}
		k.history().Add(res.Key, -1, in, out, int64(call), int64(s.now))
		for _, e := range res.Attempted {
			if res.Outcome != Released || e != res.Epoch {
				k.addGhost(res.Key, -1, n.holderName(), in, qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: e}, call, false, e)
			}
		}
		return
	}
	if ch := n.changes[res.ID]; ch != nil {
		delete(n.changes, res.ID)
		s.changeResult(n, ch, res)
		return
	}
	c := n.ops[res.ID]
	if c == nil {
		s.failf("%s reported op %d, which no client started", n.id, res.ID)
		return
	}
	delete(n.ops, res.ID)
	c.onResult(res)
}

// granted checks I1, I2 and I3 for a new grant.
func (k *simChecker) granted(c *simClient, res OpResult) *grantRec {
	s := k.s
	s.stats.Grants++
	g := &grantRec{
		key: res.Key, token: res.Epoch, node: c.n, client: c,
		start: s.now, end: c.n.clock.realAt(res.Deadline), ballot: res.Ballot,
	}
	s.tracef("%s grants %q token %d to c%d until %v", c.n.id, g.key, g.token, c.id, g.end)
	if g.token <= k.maxToken[g.key] {
		s.failf("I2: %q granted token %d after token %d", g.key, g.token, k.maxToken[g.key])
	}
	k.maxToken[g.key] = max(k.maxToken[g.key], g.token)
	if k.tokens[g.key] == nil {
		k.tokens[g.key] = make(map[uint64]bool)
	}
	if k.tokens[g.key][g.token] {
		s.failf("I3: %q token %d granted twice", g.key, g.token)
	}
	k.tokens[g.key][g.token] = true
	for _, h := range k.grants[g.key] {
		if h.end > g.start {
			s.failf("I1: %q granted to c%d (%s, token %d) at %v while c%d (%s, token %d) holds it until %v",
				g.key, c.id, c.n.id, g.token, g.start, h.client.id, h.node.id, h.token, h.end)
		}
	}
	// Forget grants that ended long ago.
	list := k.grants[g.key][:0]
	for _, h := range k.grants[g.key] {
		if h.end > s.now-10*time.Second {
			list = append(list, h)
		}
	}
	k.grants[g.key] = append(list, g)
	c.n.holder[g.key] = c
	k.handedOver(g.key)
	k.semGranted(g)
	return g
}

// handedOver checks that a key released while clients waited for it went to
// one of them within a few round trips (I9): waiters are told when the key
// frees, so without faults nobody waits out a lease that has ended.
func (k *simChecker) handedOver(key string) {
	at, ok := k.freedAt[key]
	if !ok {
		return
	}
	delete(k.freedAt, key)
	gap := k.s.now - at
	k.maxHandover = max(k.maxHandover, gap)
	if bound := k.handoverBound(); gap > bound {
		k.s.failf("I9: %q was released at %v with clients waiting, and granted again only %v later; the bound is %v", key, at, gap, bound)
	}
}

// handoverBound is how long a released key may go ungranted while clients
// wait for it, once the faults healed and the mesh settled: a few round
// trips and backoffs, far less than a lease. Eight round timeouts: three
// acquires that each got a grant accepted at some voters, none at a
// majority, then duel for the right to finish theirs, and a parked waiter
// retries after two round timeouts; seed 173 with 5 voters takes 5.5 round
// timeouts so. A stall behind an unchosen grant (design.md R10) is 25 of
// them.
func (k *simChecker) handoverBound() time.Duration { return 8 * k.s.cfg.RoundTimeout }

// settled reports whether the faults healed long enough ago for the
// liveness bounds to apply: every voter has served its quarantine and
// every lease of the faulty period has ended.
func (k *simChecker) settled() bool {
	longest := k.s.cfg.timingOf(k.s.cfg.longestTTL())
	return k.healedAt >= 0 && k.s.now > k.healedAt+k.s.quarantineOf(longest)+2*longest.TTL
}

// freed records a release of key, for the hand-over check, when a client
// is waiting for the key.
func (k *simChecker) freed(key string) {
	if !k.settled() {
		return
	}
	for c := range k.pending {
		if c.key == key && c.wait {
			k.freedAt[key] = k.s.now
			return
		}
	}
}

// leaseEvent checks C3 and extends or closes intervals.
func (k *simChecker) leaseEvent(n *simNode, ev LeaseEvent) {
	s := k.s
	c := n.holder[ev.Key]
	s.tracef("%s lease event %q epoch %d lost=%v (%v) deadline %v", n.id, ev.Key, ev.Epoch, ev.Lost, ev.Reason, ev.Deadline)
	if c == nil || c.grant == nil || c.grant.token != ev.Epoch {
		if ev.Lost {
			return // lost after a release; nothing was held by a client
		}
		s.failf("%s renewed %q token %d, which no client holds", n.id, ev.Key, ev.Epoch)
		return
	}
	g := c.grant
	if ev.Lost {
		if now := n.clock.Now(); now >= ev.Deadline {
			s.failf("C3: %s reported %q token %d lost at %v, after its deadline %v", n.id, ev.Key, ev.Epoch, now, ev.Deadline)
		}
		g.lost = true
		s.tracef("%s: %q token %d lost (%v)", n.id, ev.Key, ev.Epoch, ev.Reason)
		c.onLease(ev)
		return
	}
	end := n.clock.realAt(ev.Deadline)
	if !g.closed && end > g.end {
		g.end = end
		k.renewedAfterEnd(g)
		for _, h := range k.grants[g.key] {
			if h != g && h.start > g.start && h.start < g.end {
				s.failf("I1: renewal of %q token %d to %v overlaps the grant of token %d at %v",
					g.key, g.token, g.end, h.token, h.start)
			}
		}
	}
	c.onLease(ev)
}

// released closes a grant's interval at its release.
func (k *simChecker) released(g *grantRec) {
	k.ended(g, k.s.now)
	k.freed(g.key)
}

func (k *simChecker) ended(g *grantRec, at time.Duration) {
	if at < g.end {
		g.end = at
	}
	g.closed = true
	if g.node.holder[g.key] == g.client {
		delete(g.node.holder, g.key)
	}
}

// write is a client's write to the fenced resource (I4). A write inside the
// writer's interval must be admitted; a late one may be refused.
func (k *simChecker) write(c *simClient, g *grantRec, late bool) {
	s := k.s
	s.stats.Writes++
	inInterval := !late && s.now >= g.start && s.now < g.end && !g.lost
	err := k.fence.Apply(g.key, g.token, func() error {
		if g.token < k.applied[g.key] {
			s.failf("I4: the fence applied token %d of %q after token %d", g.token, g.key, k.applied[g.key])
		}
		k.applied[g.key] = g.token
		return nil
	})
	if err != nil {
		s.stats.StaleWritesRefused++
		if inInterval {
			s.failf("I4: the fence refused c%d's write inside its interval: %v", c.id, err)
		}
	}
}

// releaseGhosts records a release's writes of unknown outcome: a release
// that ends NotHeld or NoQuorum may still have freed the key in a round it
// never heard the end of.
func (k *simChecker) releaseGhosts(c *simClient, key string, res OpResult, epoch uint64) {
	if res.Outcome == Released {
		return
	}
	for _, e := range res.Attempted {
		k.addGhost(key, c.id, c.holder(), qt.Input{Kind: qt.Release, Holder: c.holder(), Epoch: e},
			qt.Output{Outcome: qt.NoQuorum, Unknown: true}, c.called, false, e)
	}
}

// ghosts records each epoch an acquire proposed, other than the one it was
// granted, as a write of unknown outcome.
func (k *simChecker) ghosts(c *simClient, key string, attempted []uint64, granted uint64, wasGranted bool) {
	for _, e := range attempted {
		if wasGranted && e == granted {
			continue
		}
		k.addGhost(key, c.id, c.holder(), qt.Input{Kind: qt.Acquire, Holder: c.holder()},
			qt.Output{Outcome: qt.NoQuorum, Unknown: true, Attempted: []uint64{e}}, c.called, true, e)
	}
}

func (k *simChecker) addGhost(key string, client int, holder string, in qt.Input, out qt.Output, call time.Duration, held bool, epoch uint64) {
	k.unknowns = append(k.unknowns, ghost{
		era: k.era, key: key, client: client, in: in, out: out, call: call,
		write: writeKey{key: key, writer: holder, held: held, epoch: epoch},
	})
}

// recordGhosts adds the ghosts to the histories, each beginning when an
// acceptor first accepted its write (or at its operation's start, if that
// came later) and ending when a ballot above its own was first chosen for
// its key. A write takes effect no sooner than some acceptor holds it, and
// an acquire's ghosts are its attempts one after the other: starting each
// at its operation's start let a duel's dozen attempts overlap all of its
// operation's span (soak seed 747783 with 7 voters: 15 ghosts of two
// acquires on one key, 126 s of checking), where most began after
// everything that could observe them had ended (dropUnobservedGhosts).
func (k *simChecker) recordGhosts() {
	for _, g := range k.unknowns {
		w := k.wrote[g.write]
		if w == nil {
			continue // never reached any acceptor: it cannot have taken effect
		}
		b := w.ballot
		call := max(g.call, w.first)
		ret := qt.Infinity
		for _, c := range k.chosen[g.key] {
			if b.Less(c.ballot) && c.at >= g.call {
				ret = int64(c.at)
				break
			}
		}
		if int64(call) > ret {
			// First accepted once a higher ballot was chosen: it can never
			// be the highest value a majority holds.
			continue
		}
		for len(k.hist) <= g.era {
			k.hist = append(k.hist, qt.NewHistory())
		}
		k.hist[g.era].Add(g.key, g.client, g.in, g.out, int64(call), ret)
	}
	k.unknowns = nil
}

// acquireEnded tracks waiting acquires for I9.
func (k *simChecker) acquireEnded(c *simClient, res OpResult) {
	s := k.s
	start, ok := k.pending[c]
	delete(k.pending, c)
	if !ok {
		return
	}
	if !c.wait {
		if k.settled() && res.Outcome == NoQuorum {
			s.failf("I9: c%d's try-acquire of %q found no quorum long after the heal", c.id, c.key)
		}
		return
	}
	if res.Outcome != Granted && !res.Unknown && res.Outcome != Cancelled {
		s.failf("I9: c%d waited from %v (after the heal) and got %v instead of the key", c.id, start, res.Outcome)
		return
	}
	if w := s.now - start; w > k.maxWait {
		k.maxWait = w
	}
	if bound := k.livenessBound(); s.now-start > bound {
		s.failf("I9: c%d waited %v for %q after the heal; the bound is %v", c.id, s.now-start, c.key, bound)
	}
}

// livenessBound is how long a waiting client may wait once faults healed:
// quarantine and a lease's length for the mesh to settle, then every other
// client's hold and hand-over in turn.
func (k *simChecker) livenessBound() time.Duration {
	cfg := k.s.cfg
	clients := time.Duration(len(k.s.nodes) * cfg.Clients)
	perTurn := 50*time.Millisecond + 12*cfg.RoundTimeout
	longest := cfg.timingOf(cfg.longestTTL())
	return k.s.quarantineOf(longest) + 2*longest.TTL + clients*perTurn + cfg.LivenessSlop
}

// final runs the checks that need the whole run: pending waits (I9) and
// linearizability (I8).
func (k *simChecker) final() {
	s := k.s
	if k.healedAt >= 0 {
		bound := k.livenessBound()
		var waiting []*simClient
		for c := range k.pending {
			waiting = append(waiting, c)
		}
		slices.SortFunc(waiting, func(a, b *simClient) int { return a.id - b.id })
		for _, c := range waiting {
			if start := k.pending[c]; s.now-start > bound {
				s.failf("I9: c%d still waits for %q after %v; the bound is %v", c.id, c.key, s.now-start, bound)
			}
		}
	}
	k.finalObserved()
	// Operations still in flight at the end may have written too.
	for _, n := range s.nodes {
		if n.up {
			s.countForgotten(n)
			s.abandon(n)
		}
	}
	k.recordGhosts()
	for era, h := range k.hist {
		h.SetName(fmt.Sprintf("sim-seed%d-v%d-era%d", s.cfg.Seed, s.cfg.Voters, era))
		for _, v := range h.CheckKeys(checkTimeout()) {
			k.longestCheck = max(k.longestCheck, v.Took)
			if !v.Failed() {
				continue
			}
			s.failf("I8 (era %d): %v:\n%s", era, v, h.Explain(v.Key, 40))
		}
	}
}

func (k *simChecker) String() string {
	return fmt.Sprintf("era=%d maxWaitAfterHeal=%v maxHandover=%v", k.era, k.maxWait, k.maxHandover)
}

// TestGhostsBeginWhenFirstAccepted checks the span recordGhosts gives a
// write of unknown outcome: from the first time an acceptor accepted it
// (not its operation's start) to the first choice of a higher ballot; and
// none at all to a write first accepted after that choice.
func TestGhostsBeginWhenFirstAccepted(t *testing.T) {
	s := newSim(defaultSimConfig(1, 3))
	k := s.check
	ms := time.Millisecond
	write := func(epoch uint64) writeKey {
		return writeKey{key: "k", writer: "n1/1", held: true, epoch: epoch}
	}
	ghost := func(epoch uint64) {
		k.addGhost("k", 0, "n1/1", qt.Input{Kind: qt.Acquire, Holder: "n1/1"},
			qt.Output{Outcome: qt.NoQuorum, Unknown: true, Attempted: []uint64{epoch}}, 10*ms, true, epoch)
	}
	// Two attempts of one acquire that began at 10 ms: the first accepted
	// at 20 ms, the second at 50 ms; a rival's higher ballot chosen at 40
	// and at 90 ms.
	ghost(7)
	k.wrote[write(7)] = &wroteRec{Ballot{Counter: 3, Node: "n1"}, 20 * ms}
	ghost(8)
	k.wrote[write(8)] = &wroteRec{Ballot{Counter: 5, Node: "n1"}, 50 * ms}
	k.chosen["k"] = []chosenAt{{Ballot{Counter: 4, Node: "n2"}, 40 * ms}, {Ballot{Counter: 6, Node: "n2"}, 90 * ms}}
	// A third, accepted only at 95 ms, after a higher ballot was chosen.
	ghost(9)
	k.wrote[write(9)] = &wroteRec{Ballot{Counter: 5, Incarnation: 2, Node: "n1"}, 95 * ms}
	k.recordGhosts()

	got := k.hist[0].Ops("k")
	want := [][2]time.Duration{{20 * ms, 40 * ms}, {50 * ms, 90 * ms}}
	if len(got) != len(want) {
		t.Fatalf("%d ghosts recorded, want %d (the write first accepted after a higher ballot was chosen can never take effect): %v", len(got), len(want), got)
	}
	for i, op := range got {
		if op.Call != int64(want[i][0]) || op.Return != int64(want[i][1]) {
			t.Errorf("ghost of epoch %d spans [%v, %v], want [%v, %v]", 7+i,
				time.Duration(op.Call), time.Duration(op.Return), want[i][0], want[i][1])
		}
	}
}
