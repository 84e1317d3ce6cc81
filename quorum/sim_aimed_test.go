package quorum

import (
	"slices"
	"time"
)

// Aimed faults (simConfig.Aimed): the windows where rules of voter changes
// and of restarts matter, which the other faults pass through too rarely
// for a run to break those rules. Episodes follow one another until the
// heal, each one of three, drawn at random (with voter changes 30%, 45%
// and 25% of the time; without, always the third), on random voters for
// random lengths:
//
//   - missedThenChange: a voter is cut off while keys are written at the
//     others (most often until soon after a node that does not vote takes
//     a lease), then drives one or two voter changes itself (it lists its
//     own keys first); meanwhile a node holding a lease, most often one
//     that does not vote and took it while the voter was away, goes quiet,
//     so that no renewal or release writes its key again.
//   - stalledChange: a minority of the voters is cut off while keys are
//     written; then a node (most often one that does not vote) starts a
//     change, and once the voters have heard of the joint configuration it
//     is cut off: the change stays pending. The voters before it that saw
//     the writes are cut off but one, which restarts without its
//     registers; perhaps another voter restarts once it votes again.
//   - majorityRestart: a majority of the voters crashes at once and
//     restarts within a quarter of a second (their quarantines overlap),
//     cut off from the other voters (or from every other node) until some
//     time after they leave quarantine.
//   - loweredTTLLoss, with simConfig.LoweredTTLLoss always once a roll to
//     a lower TTL has begun (simConfig.Retime): a voter restarts at the new
//     TTL, and some seconds later, once a node of the old TTL has just
//     taken a lease, the voters still at the old TTL, a majority, all crash
//     together and restart at the new one: only they accepted that lease
//     (the voter at the new TTL refuses it). Nothing is cut off.
//
// The first two need voter changes (simConfig.Reconfig); the third is left
// out with a voter without a disk (simConfig.DisklessVoter says why). No
// voter loses its state unless a majority of the voters, and of those
// before a pending change, keeps it, but in majorityRestart.
type aimed struct {
	s *sim
	// The episodes' cuts, kept apart from the partitions' (whose ends
	// would lift them): nodes cut off from every other, and links, each
	// counted as many times as it is cut.
	isolated map[int]int
	links    map[[2]int]int
}

// scheduleAimed runs aimed episodes one after another until the heal. Their
// cuts lose messages through simConfig.Delay: an hour late is after the end
// of any run.
func (s *sim) scheduleAimed() {
	a := &aimed{s: s, isolated: make(map[int]int), links: make(map[[2]int]int)}
	delay := s.cfg.Delay
	s.cfg.Delay = func(s *sim, from, to *simNode) (time.Duration, bool) {
		if a.blocks(from.idx, to.idx) {
			return time.Hour, true
		}
		if delay != nil {
			return delay(s, from, to)
		}
		return 0, false
	}
	var next func()
	next = func() {
		if s.healed || s.ended {
			return
		}
		var d time.Duration
		switch x := s.rand.Float64(); {
		case s.cfg.Reconfig && x < 0.3:
			d = a.missedThenChange()
		case s.cfg.Reconfig && x < 0.75:
			d = a.stalledChange()
		case s.cfg.LoweredTTLLoss && s.cfg.Retime && s.cfg.RetimeTTL < s.cfg.TTL && s.now >= s.retimeAt():
			d = a.loweredTTLLoss()
		case !s.cfg.DisklessVoter:
			d = a.majorityRestart()
		}
		s.after(d+s.jitter(500*time.Millisecond), next)
	}
	s.at(s.jitter(time.Second), next)
}

// blocks reports whether a message from node i to node j is lost.
func (a *aimed) blocks(i, j int) bool {
	return i != j && !a.s.healed && (a.isolated[i] > 0 || a.isolated[j] > 0 || a.links[[2]int{i, j}] > 0)
}

// isolate cuts n off from every other node for d.
func (a *aimed) isolate(n *simNode, d time.Duration) {
	a.isolated[n.idx]++
	a.s.after(d, func() { a.isolated[n.idx]-- })
}

// split cuts every link between x and y, both ways, for d.
func (a *aimed) split(x, y []*simNode, d time.Duration) {
	var links [][2]int
	for _, m := range x {
		for _, n := range y {
			links = append(links, [2]int{m.idx, n.idx}, [2]int{n.idx, m.idx})
		}
	}
	for _, l := range links {
		a.links[l]++
	}
	a.s.after(d, func() {
		for _, l := range links {
			a.links[l]--
		}
	})
}

// voters are the newest configuration's voters that are up and vote,
// shuffled.
func (a *aimed) voters() []*simNode {
	s := a.s
	var vs []*simNode
	for _, id := range s.m.Voters {
		if v := s.node(id); liveAcceptor(v) {
			vs = append(vs, v)
		}
	}
	s.rand.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
	return vs
}

// between is a random duration in [lo, hi).
func (a *aimed) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(a.s.rand.Int63n(int64(hi-lo)))
}

// missedThenChange: v misses the writes of a while, then changes the
// voters, listing at itself first. Its cut ends early, most often, soon
// after a node that does not vote takes a lease: on a key v may never
// have heard of, held by a node that can go quiet without holding up the
// change.
func (a *aimed) missedThenChange() time.Duration {
	s := a.s
	vs := a.voters()
	if len(vs) == 0 || s.m.Pending {
		return 0
	}
	v, since := vs[0], s.now
	d := a.between(200*time.Millisecond, 700*time.Millisecond)
	early := s.rand.Intn(4) > 0
	s.tracef("aimed: %s is cut off while keys are written, then changes the voters", v.id)
	a.isolated[v.idx]++
	done := false
	end := func() {
		if done {
			return
		}
		done = true
		a.isolated[v.idx]--
		if s.healed || s.ended {
			return
		}
		if early || s.rand.Intn(2) == 0 {
			a.quietHolder(v, since)
		}
		s.changeFrom(v, v.id)
		second := s.rand.Intn(5) > 0
		a.whenChanged(v, func() {
			if second {
				s.changeFrom(v, v.id)
			}
		})
	}
	s.after(d, end)
	var watch func()
	watch = func() {
		if done || !early {
			return
		}
		if a.leaseSince(since + 20*time.Millisecond) {
			s.after(a.between(time.Millisecond, 30*time.Millisecond), end)
			return
		}
		s.after(5*time.Millisecond, watch)
	}
	s.after(50*time.Millisecond, watch)
	return d + time.Second
}

// leaseSince reports whether a node that does not vote holds a lease taken
// since since.
func (a *aimed) leaseSince(since time.Duration) bool {
	for _, n := range a.s.nodes {
		if !n.up || a.s.m.IsVoter(n.id) {
			continue
		}
		for _, c := range n.clients {
			if c.state == cHolding && c.grant != nil && c.grant.start >= since {
				return true
			}
		}
	}
	return false
}

// quietHolder cuts off, for about a lease, a node (not not) holding a
// lease, most often one that does not vote (cut off, a voter would hold up
// the change) and took its lease since since: no renewal or release
// writes its key while the voters change.
func (a *aimed) quietHolder(not *simNode, since time.Duration) {
	s := a.s
	var hs, best []*simNode
	for _, n := range s.nodes {
		if n == not || !n.up {
			continue
		}
		for _, c := range n.clients {
			if c.state == cHolding && c.grant != nil {
				hs = append(hs, n)
				if c.grant.start >= since && !s.m.IsVoter(n.id) {
					best = append(best, n)
				}
			}
		}
	}
	if len(best) > 0 {
		hs = best
	}
	if len(hs) == 0 {
		return
	}
	h := hs[s.rand.Intn(len(hs))]
	s.tracef("aimed: %s, holding a lease, goes quiet", h.id)
	a.isolate(h, a.between(500*time.Millisecond, 1200*time.Millisecond))
}

// whenChanged runs fn once n runs no voter change (within two seconds).
func (a *aimed) whenChanged(n *simNode, fn func()) {
	s := a.s
	inc, until := n.inc, s.now+2*time.Second
	var poll func()
	poll = func() {
		switch {
		case s.healed || s.ended || !n.up || n.inc != inc || s.now > until:
		case n.node.prop.chg == nil:
			fn()
		default:
			s.after(2*time.Millisecond, poll)
		}
	}
	s.after(2*time.Millisecond, poll)
}

// stalledChange: a minority misses writes; a change is left pending; the
// voters that saw the writes are cut off but one, which restarts.
func (a *aimed) stalledChange() time.Duration {
	s := a.s
	vs := a.voters()
	if len(vs) < s.m.Majority() || s.m.Pending {
		return 0
	}
	missed := vs[:1+s.rand.Intn(len(s.m.Voters)-s.m.Majority()+1)]
	if len(missed) >= s.m.Majority() {
		missed = missed[:len(missed)-1]
	}
	if len(missed) == 0 {
		return 0
	}
	d := a.between(100*time.Millisecond, 400*time.Millisecond)
	s.tracef("aimed: %s cut off while keys are written", nodeNames(missed))
	for _, v := range missed {
		a.isolate(v, d)
	}
	s.after(d, func() {
		if s.healed || s.ended {
			return
		}
		// Mostly a node that does not vote: a voter cut off is one
		// more voter the restarted one cannot hear from.
		var drivers []*simNode
		for _, n := range s.nodes {
			if n.up && !s.m.IsVoter(n.id) {
				drivers = append(drivers, n)
			}
		}
		if len(drivers) == 0 || s.rand.Intn(4) == 0 {
			drivers = append(drivers[:0], s.randomUp(nil))
		}
		driver := drivers[s.rand.Intn(len(drivers))]
		if driver == nil {
			return
		}
		s.changeFrom(driver, "")
		a.whenPending(driver, func() {
			// The voters hear of the joint configuration (the driver
			// may have read it, and pushed nothing); then the driver
			// goes quiet before it moves a key.
			m := driver.node.Membership()
			for _, id := range slices.Concat(m.Voters, m.Prev) {
				s.gossip(driver, s.node(id))
			}
			s.tracef("aimed: %s is cut off with configuration %d pending", driver.id, m.ID&0xffff)
			a.isolate(driver, a.between(time.Second, 2500*time.Millisecond))
			a.restartUnderPending(m, missed, driver)
		})
	})
	return d + 2200*time.Millisecond
}

// whenPending runs fn as soon as n adopts a pending configuration (within
// half a second).
func (a *aimed) whenPending(n *simNode, fn func()) {
	s := a.s
	inc, until := n.inc, s.now+500*time.Millisecond
	var poll func()
	poll = func() {
		switch {
		case s.healed || s.ended || !n.up || n.inc != inc || s.now > until:
		case n.node.Membership().Pending:
			fn()
		default:
			s.after(100*time.Microsecond, poll)
		}
	}
	poll()
}

// restartUnderPending restarts one voter of both m and the configuration
// before it that did not miss the writes, once it is on m, with every
// other such voter cut off (a voter that m removes stays reachable: the
// rule asks it too, and breaking the rule asks only m's voters), and
// perhaps another voter once it votes again.
func (a *aimed) restartUnderPending(m Membership, missed []*simNode, driver *simNode) {
	s := a.s
	var saw []*simNode
	for _, id := range m.Prev {
		if v := s.node(id); !slices.Contains(missed, v) && v != driver && v.up && m.IsVoter(id) {
			saw = append(saw, v)
		}
	}
	s.rand.Shuffle(len(saw), func(i, j int) { saw[i], saw[j] = saw[j], saw[i] })
	i := slices.IndexFunc(saw, s.mayLose)
	if i < 0 {
		return
	}
	r := saw[i]
	cut := slices.Delete(slices.Clone(saw), i, i+1)
	s.tracef("aimed: %s restarts once on configuration %d, while %s are cut off", r.id, m.ID&0xffff, nodeNames(cut))
	for _, v := range cut {
		a.isolate(v, a.between(1300*time.Millisecond, 2200*time.Millisecond))
	}
	inc, until := r.inc, s.now+100*time.Millisecond
	var adopted func()
	adopted = func() {
		switch {
		case s.healed || s.ended || !r.up || r.inc != inc || s.now > until:
		case r.node.Membership().ID == m.ID && s.mayLose(r):
			s.crash(r)
			s.start(r)
			a.restartNext(r, cut)
		default:
			s.after(100*time.Microsecond, adopted)
		}
	}
	adopted()
}

// restartNext restarts, perhaps, another voter (not r, nor those cut off)
// once r votes again.
func (a *aimed) restartNext(r *simNode, cut []*simNode) {
	s := a.s
	next := s.rand.Intn(2) == 0
	inc := r.inc
	var poll func()
	poll = func() {
		switch {
		case s.healed || s.ended || !r.up || r.inc != inc:
		case liveAcceptor(r):
			still := slices.ContainsFunc(cut, func(v *simNode) bool { return a.isolated[v.idx] > 0 })
			s.tracef("aimed: %s votes again (others still cut off: %v)", r.id, still)
			vs := slices.DeleteFunc(a.voters(), func(v *simNode) bool { return v == r || slices.Contains(cut, v) })
			if next && len(vs) > 0 && s.mayLose(vs[0]) {
				s.tracef("aimed: %s restarts next", vs[0].id)
				s.crash(vs[0])
				s.start(vs[0])
			}
		default:
			s.after(10*time.Millisecond, poll)
		}
	}
	s.after(10*time.Millisecond, poll)
}

// mayLose reports whether voter n may lose its state now: whether a
// majority of the newest configuration's voters, and of those before a
// pending change, keeps its state without n (as maybeMajorityLost counts).
func (s *sim) mayLose(n *simNode) bool {
	groups := [][]NodeID{s.m.Voters}
	if s.m.Pending {
		groups = append(groups, s.m.Prev)
	}
	for _, voters := range groups {
		if !slices.Contains(voters, n.id) {
			continue
		}
		lost := 1
		for _, id := range voters {
			if v := s.node(id); v != n && (!v.up || v.node.acc == nil || v.node.acc.State() != Live) {
				lost++
			}
		}
		if lost >= len(voters)/2+1 {
			return false
		}
	}
	return true
}

// majorityRestart crashes a majority of the voters at once and restarts
// them a little apart, cut off from the others until after they leave
// quarantine.
func (a *aimed) majorityRestart() time.Duration {
	s := a.s
	voters := slices.Clone(s.m.Voters)
	s.rand.Shuffle(len(voters), func(i, j int) { voters[i], voters[j] = voters[j], voters[i] })
	var lost, kept []*simNode
	for i, id := range voters {
		if i < s.m.Majority() {
			lost = append(lost, s.node(id))
		} else {
			kept = append(kept, s.node(id))
		}
	}
	others := kept
	if s.rand.Intn(2) == 0 {
		others = slices.DeleteFunc(slices.Clone(s.nodes), func(n *simNode) bool { return slices.Contains(lost, n) })
	}
	last := time.Duration(0)
	for _, n := range lost {
		s.crash(n)
		d := a.between(10*time.Millisecond, 250*time.Millisecond)
		last = max(last, d)
		s.after(d, func() {
			if !n.up && !s.ended {
				s.start(n)
			}
		})
	}
	end := last + s.cfg.timingOf(s.cfg.longestTTL()).Quarantine() + a.between(50*time.Millisecond, 700*time.Millisecond)
	s.tracef("aimed: %s crash, and restart cut off from %s for %v", nodeNames(lost), nodeNames(others), end)
	a.split(lost, others, end)
	return end
}

// loweredTTLLoss: in a roll to a lower TTL, the voters still at the old TTL,
// a majority, lose their state together and come back at the new one,
// beside a voter at the new TTL, which refused every lease of the old one.
// Then no voter that kept its state knows how long those leases run
// (TestScenarioLoweredTTLAcrossAMajorityLoss stages it once). When no voter
// runs the new TTL yet, one restarts with it first, and the crash waits for
// a later episode: until its catch-up's horizon (the old TTL, heard from
// the others) has lapsed. The crash waits, too, for a node of the old TTL
// that does not vote to take a lease (the voters at the old TTL are the
// only ones to accept it), for up to two TTLs.
func (a *aimed) loweredTTLLoss() time.Duration {
	s := a.s
	var old, rolled []*simNode
	for _, v := range a.voters() {
		if v.ttl == s.cfg.RetimeTTL {
			rolled = append(rolled, v)
		} else {
			old = append(old, v)
		}
	}
	oldTiming := s.cfg.timingOf(s.cfg.TTL)
	if len(old) == 0 || len(old)+len(rolled) < len(s.m.Voters) {
		return 0 // the roll is over, or voters are down: another time
	}
	if len(rolled) == 0 {
		v := old[0]
		s.tracef("aimed: %s restarts at the new TTL", v.id)
		s.crash(v)
		s.start(v)
		return 2*oldTiming.TTL + s.quarantineOf(oldTiming)
	}
	if len(old) < s.m.Majority() {
		return 0
	}
	// Wait, for up to two TTLs, until a node of the old TTL has just taken
	// a lease.
	const look = 10 * time.Millisecond
	wait := 2 * oldTiming.TTL
	var watch func(left time.Duration)
	watch = func(left time.Duration) {
		if s.healed || s.ended {
			return
		}
		if !a.oldLeaseHeld() {
			if left > look {
				s.after(look, func() { watch(left - look) })
			}
			return
		}
		for _, n := range old {
			if !n.up || n.ttl == s.cfg.RetimeTTL {
				return // it restarted meanwhile: the roll moved on
			}
		}
		for _, n := range old {
			s.crash(n)
			s.after(a.between(10*time.Millisecond, 250*time.Millisecond), func() {
				if !n.up && !s.ended {
					s.start(n)
				}
			})
		}
		s.tracef("aimed: %s, at the old TTL, crash; %s runs the new one", nodeNames(old), nodeNames(rolled))
	}
	watch(wait)
	return wait + 250*time.Millisecond + s.quarantineOf(oldTiming) + oldTiming.TTL
}

// oldLeaseHeld reports whether a node that does not vote, at the old TTL of
// a roll (simConfig.Retime), holds a lease of that TTL that it took less
// than a fifth of it ago: such a lease has most of its time to run.
func (a *aimed) oldLeaseHeld() bool {
	s := a.s
	for _, n := range s.nodes {
		if !n.up || s.m.IsVoter(n.id) || n.ttl == s.cfg.RetimeTTL {
			continue
		}
		for _, c := range n.clients {
			if c.state == cHolding && c.grant != nil && s.now-c.grant.start < s.cfg.TTL/5 {
				return true
			}
		}
	}
	return false
}

// nodeNames lists the nodes' ids, as a trace shows them.
func nodeNames(ns []*simNode) string {
	if len(ns) == 0 {
		return "[]"
	}
	idx := make([]int, len(ns))
	for i, n := range ns {
		idx[i] = n.idx
	}
	return "[" + ns[0].s.names(idx) + "]"
}
