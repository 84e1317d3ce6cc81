package quorum

import (
	"fmt"
	"testing"
	"time"
)

// Setup shared by the scenarios that stage, in the simulator, the exact
// runs in which a rule of design.md matters: the fault-free run they start
// from, cuts, restarts, voter changes, operations stepped straight into a
// voter, and what the voters hold, for their logs.

// faultFree is a simulated run with no faults at all: contention only.
func faultFree(seed int64, voters, proposers, clients, keys int) simConfig {
	cfg := defaultSimConfig(seed, voters)
	cfg.Proposers, cfg.Clients, cfg.Keys = proposers, clients, keys
	cfg.Drop, cfg.Dup = 0, 0
	cfg.Partitions, cfg.OneWay, cfg.Crashes, cfg.FullRestart, cfg.Reconfig = false, false, false, false, false
	cfg.MajorityCrash, cfg.Retime, cfg.Aimed = false, false, false
	cfg.HealAt = time.Nanosecond // healed from the start: no long tails, waits without a budget
	cfg.Duration = 6 * time.Second
	return cfg
}

// restartAmnesiac crashes n and starts it again without a disk (no data
// dir): it comes back on the founding voters, knowing nothing.
func restartAmnesiac(s *sim, n *simNode) {
	s.crash(n)
	n.disk = nil
	disks := s.cfg.Disks
	s.cfg.Disks = false // s.start gives a node a disk when the run has disks
	s.start(n)
	s.cfg.Disks = disks
}

// cutBoth cuts (or heals) the link between nodes i and j, both ways.
func cutBoth(s *sim, i, j int, cut bool) {
	s.cut[[2]int{i, j}], s.cut[[2]int{j, i}] = cut, cut
}

// isolate cuts node i off from every other node, both ways, or heals it.
func isolate(s *sim, i int, cut bool) {
	for j := range s.nodes {
		if j != i {
			s.cut[[2]int{i, j}], s.cut[[2]int{j, i}] = cut, cut
		}
	}
}

// liveAcceptor reports whether n runs an acceptor that votes.
func liveAcceptor(n *simNode) bool {
	return n.up && n.node != nil && n.node.acc != nil && n.node.acc.State() == Live
}

// changeFrom starts a voter change on node n.
func changeFrom(t *testing.T, s *sim, n *simNode, ch simChange) {
	var inc uint64
	if ch.add != "" {
		inc = s.node(ch.add).inc
	}
	id, err := n.node.ChangeVoters(ch.add, inc, ch.remove, n.clock.Now()+time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n.changes[id] = &ch
	s.flush(n)
}

// acceptorOf returns n's acceptor, or nil when n is down.
func acceptorOf(n *simNode) *Acceptor {
	if !n.up || n.node == nil {
		return nil
	}
	return n.node.acc
}

// describeAcceptor describes n's acceptor for the log.
func describeAcceptor(n *simNode) string {
	a := acceptorOf(n)
	if a == nil {
		return string(n.id) + ": down"
	}
	return fmt.Sprintf("%s: %v v%d floorOnly %v restored %v amnesiac %v Recovery %+v",
		n.id, a.State(), a.Membership().Version(), a.FloorOnly(), a.restored, a.amnesiac, a.Recovery())
}

// describeRegister describes n's register of key for the log.
func describeRegister(n *simNode, key string) string {
	a := acceptorOf(n)
	if a == nil {
		return string(n.id) + ": down"
	}
	r := a.regs[key]
	if r == nil {
		return fmt.Sprintf("%s: no register", n.id)
	}
	return fmt.Sprintf("%s: accepted %v value %v", n.id, r.accepted, r.value)
}

// registersOf lists which of the voters hold a register of key, and how.
func registersOf(s *sim, key string, voters int) (held int, desc []string) {
	for _, v := range s.nodes[:voters] {
		a := acceptorOf(v)
		if a == nil {
			desc = append(desc, string(v.id)+": down")
			continue
		}
		r := a.regs[key]
		if r == nil {
			desc = append(desc, string(v.id)+": none")
			continue
		}
		held++
		desc = append(desc, fmt.Sprintf("%s: %v copied %v", v.id, r.accepted, r.copied))
	}
	return held, desc
}

// configStepper drives one operation on ConfigKey straight into v's acceptor,
// as a proposer of configuration c would, and checks whether it succeeded.
type configStepper struct {
	t    *testing.T
	c    Membership
	opID uint64
}

func (st *configStepper) step(v *simNode, op Op, ok bool) {
	st.t.Helper()
	st.opID++
	op.ID, op.Key = st.opID, ConfigKey
	if op.Kind == OpAccept {
		op.Inc = v.inc
	}
	resp := v.node.acc.HandleRequest(&Request{Config: st.c.ID, From: op.Ballot.Node, To: v.id, Ops: []Op{op}})
	if got := resp.Status == StatusOK && resp.Results[0].OK; got != ok {
		st.t.Fatalf("%s answered %v %v: status %v, %+v", v.id, op.Kind, op.Ballot, resp.Status, resp.Results)
	}
}

// onDisks is a fault-free run of seed 1 whose nodes keep data directories,
// with rule bug broken (none when empty), clocks at the rate of real time,
// wall clocks never set back but by the scenario itself, and the heal (of
// the scenario's cuts; liveness checked from then) at healAt.
func onDisks(bug string, voters, proposers, clients, keys int, duration, healAt time.Duration) simConfig {
	cfg := faultFree(1, voters, proposers, clients, keys)
	cfg.Bug, cfg.Disks, cfg.WallBack = bug, true, false
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Duration, cfg.HealAt = duration, healAt
	return cfg
}

// takeAndRelease has n's first client take key, hold it for hold and
// release it: with disks, a way to have every voter vote once.
func takeAndRelease(n *simNode, key string, hold time.Duration) {
	h := n.clients[0]
	h.holdTime = hold
	h.acquire(key, true, time.Second)
	n.s.flush(n)
}

// takeAndReleaseEach has each client i of n take key ki, hold it for hold
// and release it.
func takeAndReleaseEach(n *simNode, hold time.Duration) {
	for i, h := range n.clients {
		h.holdTime = hold
		h.acquire(fmt.Sprintf("k%d", i), true, time.Second)
	}
	n.s.flush(n)
}

// mustVote fails the test unless every node of nodes runs an acceptor that
// votes and, if it has a disk, says there that it voted.
func mustVote(t *testing.T, nodes ...*simNode) {
	t.Helper()
	for _, v := range nodes {
		if !liveAcceptor(v) || v.disk != nil && (v.disk.saved == nil || !v.disk.saved.Voted) {
			t.Fatalf("%s does not vote at %v", v.id, v.s.now)
		}
	}
}

// whenLive calls fn once n votes: at once if it does, else at the first
// millisecond from now at which it does.
func whenLive(n *simNode, fn func()) {
	if !liveAcceptor(n) {
		n.s.after(time.Millisecond, func() { whenLive(n, fn) })
		return
	}
	fn()
}

// whenAdopted calls fn with the configuration n adopts once it is newer
// than the founding one: at once, or at the first millisecond from now.
func whenAdopted(n *simNode, fn func(Membership)) {
	if m := n.node.Membership(); m.Version() > 1 {
		fn(m)
		return
	}
	n.s.after(time.Millisecond, func() { whenAdopted(n, fn) })
}

// wallClocksBack sets the wall clocks of the lives that start from now on
// d back.
func wallClocksBack(s *sim, d time.Duration) {
	s.wallBack = int64(d / time.Microsecond)
}
