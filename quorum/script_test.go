package quorum

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Protocol scenarios as scripts (testdata/scenarios/*.txt), run by a small
// interpreter over the simulator: the same nodes, clients and checkers as
// TestSimulation's runs, driven one command at a time on virtual time. A
// command's output is what happened while it ran (results, losses, voting
// states, voter changes, the first invariant broken), so that a scenario
// reads as a story and a new one is a text file. Run with -rewrite to
// record new outputs.
//
//	sim voters=3 proposers=2 [seed=1] [ttl=1s] [disks] [newmesh] [bug=NAME]
//	    [maxregs=3] [idle=300ms]    voters keep at most 3 registers; sweeps from 300ms idle
//	run 500ms                       advance virtual time, print what happened
//	run until=COND [max=10s]        advance until COND holds (1ms steps)
//	expect [not] COND               fail the script unless COND holds (or not)
//	acquire n3 k0 [wait=1s] [hold=1h]
//	release n3 k0
//	read n4 k0
//	change n0 add=n4 | remove=n1 [within=1s]   a voter change driven by n0
//	cut n2 n3 n4                    cut n2 off from n3 and n4, both ways
//	heal [n2 [n3]]                  heal those links, every link of n2, or every cut
//	isolate n2                      cut n2 off from every other node
//	deaf n2 / hear n2               n2 hears no ballot request / hears them
//	slow n1 per=30ms for=150ms [from=n3]  every message to or from n1 (from n3 to n1) takes per
//	crash n0 [n1 …] [disk=keep|wiped|none] / start n0 [n1 …]
//	wallback 1h                     wall clocks of lives started from now on run 1h back
//	state [n0 n1]                   voting state of each node
//	registers k0                    each voter's register of a key
//	check                           the history's linearizability, and every rule so far
//
// A condition COND is live:n0,n1 (the voters listed vote), held:n3:k0 (n3
// holds a lease of k0), voters:n0,n3,n4 (the newest configuration has
// those voters and no change pending) or pending (the newest configuration
// is a pending change). A crash prints the leases the node held, with the
// deadline each had; a voter change prints how it ended.
//
// Tokens print as E1, E2, … in the order the script first meets them, times
// as virtual time since the start.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		var sc *script
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "sim" {
				sc = newScript(t, d)
				return sc.flushOut()
			}
			if sc == nil {
				d.Fatalf(t, "%s before sim", d.Cmd)
			}
			return sc.do(t, d)
		})
	})
}

// script is one scenario's simulator and what it has printed.
type script struct {
	s      *sim
	out    []string
	tokens map[uint64]string
	failed int // failures already printed
}

func newScript(t *testing.T, d *datadriven.TestData) *script {
	voters, proposers := 3, 2
	d.MaybeScanArgs(t, "voters", &voters)
	d.MaybeScanArgs(t, "proposers", &proposers)
	seed := 1
	d.MaybeScanArgs(t, "seed", &seed)
	cfg := faultFree(int64(seed), voters, proposers, 1, 1)
	// Never healed, with no long tail: the network does only what the
	// script says, and liveness is the script's to judge.
	cfg.Duration, cfg.Keys = time.Hour, 1
	cfg.HealAt, cfg.LongTail = cfg.Duration, 1e-12
	cfg.Drift, cfg.Clocks = 0, ""
	cfg.Disks, cfg.NewMesh, cfg.WallBack, cfg.DisklessVoter = d.HasArg("disks"), d.HasArg("newmesh"), false, false
	cfg.MaxRegisters, cfg.RegisterIdle, cfg.MaxIdleKeys = 0, 0, 0
	cfg.Wipes, cfg.DiskLoss, cfg.LostAdopters = false, false, false
	if d.HasArg("ttl") {
		var ttl string
		d.ScanArgs(t, "ttl", &ttl)
		cfg.TTL = mustDuration(t, d, ttl)
	}
	if d.HasArg("bug") {
		d.ScanArgs(t, "bug", &cfg.Bug)
	}
	d.MaybeScanArgs(t, "maxregs", &cfg.MaxRegisters)
	if d.HasArg("idle") {
		var idle string
		d.ScanArgs(t, "idle", &idle)
		cfg.RegisterIdle = mustDuration(t, d, idle)
	}
	cfg.Script = func(*sim) {} // clients act only when told
	sc := &script{s: newSim(cfg), tokens: make(map[uint64]string)}
	s := sc.s
	s.onResult = func(n *simNode, res OpResult) { sc.result(n, res) }
	s.onLease = func(n *simNode, ev LeaseEvent) {
		if ev.Lost {
			sc.printf("%s: %s lost %s", n.id, ev.Key, sc.token(ev.Epoch))
		}
	}
	s.onVoting = func(n *simNode, v VotingState) {
		switch {
		case !v.Voter:
		case v.Acceptor == CatchingUp && n.node.Recovery().NeverVoted:
			sc.printf("%s: new disk, asking the voters whether they voted", n.id)
		default:
			sc.printf("%s: %s", n.id, v.Acceptor)
		}
	}
	s.startAll()
	for _, n := range s.nodes {
		for _, c := range n.clients {
			c.holdTime = time.Hour
		}
	}
	sc.printf("%d voters, %d proposers", voters, proposers)
	return sc
}

func (sc *script) printf(format string, args ...any) {
	sc.out = append(sc.out, fmt.Sprintf("%7.3fs ", sc.s.now.Seconds())+fmt.Sprintf(format, args...))
}

// flushOut is what was printed since the last command, and the first
// failure of the run once it happens.
func (sc *script) flushOut() string {
	for ; sc.failed < len(sc.s.fail); sc.failed++ {
		line, _, _ := strings.Cut(firstLine(sc.s.fail[sc.failed]), "; porcupine's visualisation")
		sc.out = append(sc.out, "FAIL "+line)
	}
	out := strings.Join(sc.out, "\n")
	sc.out = nil
	if out == "" {
		return "ok"
	}
	return out
}

// token names an epoch by the order the script met it.
func (sc *script) token(e uint64) string {
	if e == 0 {
		return "E0"
	}
	name, ok := sc.tokens[e]
	if !ok {
		name = "E" + strconv.Itoa(len(sc.tokens)+1)
		sc.tokens[e] = name
	}
	return name
}

func (sc *script) result(n *simNode, res OpResult) {
	if ch := n.changes[res.ID]; ch != nil {
		what := "add " + string(ch.add)
		if ch.remove != "" {
			what = "remove " + string(ch.remove)
		}
		switch {
		case res.Outcome == Reconfigured && res.Members != nil:
			sc.printf("%s: change %s done: voters %v", n.id, what, res.Members.Voters)
		default:
			sc.printf("%s: change %s: %v", n.id, what, res.Outcome)
		}
		return
	}
	switch res.Outcome {
	case Granted:
		sc.printf("%s: %s granted %s", n.id, res.Key, sc.token(res.Epoch))
	case Locked:
		sc.printf("%s: %s locked by %s %s", n.id, res.Key, res.Holder, sc.token(res.Epoch))
	case Released:
		sc.printf("%s: %s released %s", n.id, res.Key, sc.token(res.Epoch))
	case ReadDone:
		if res.Value.Held {
			sc.printf("%s: read %s held by %s %s", n.id, res.Key, res.Value.Holder, sc.token(res.Value.Epoch))
		} else {
			sc.printf("%s: read %s free at %s", n.id, res.Key, sc.token(res.Epoch))
		}
	default:
		sc.printf("%s: %s %v", n.id, res.Key, res.Outcome)
	}
}

func (sc *script) do(t *testing.T, d *datadriven.TestData) string {
	s := sc.s
	switch d.Cmd {
	case "run":
		sc.run(t, d)
	case "acquire":
		n, key := sc.node(t, d, 0), sc.arg(t, d, 1)
		c := sc.client(t, d, n)
		wait, hold := "", "1h"
		d.MaybeScanArgs(t, "wait", &wait)
		d.MaybeScanArgs(t, "hold", &hold)
		c.holdTime = mustDuration(t, d, hold)
		budget := time.Duration(0)
		if wait != "" {
			budget = mustDuration(t, d, wait)
		}
		c.acquire(key, wait != "", budget)
		s.flush(n)
	case "release":
		n, key := sc.node(t, d, 0), sc.arg(t, d, 1)
		i := slices.IndexFunc(n.clients, func(c *simClient) bool { return c.state == cHolding && c.grant.key == key })
		if i < 0 {
			d.Fatalf(t, "%s holds no lease of %s", n.id, key)
		}
		n.clients[i].release()
		s.flush(n)
	case "read":
		n := sc.node(t, d, 0)
		sc.client(t, d, n).read(sc.arg(t, d, 1))
		s.flush(n)
	case "cut", "heal":
		on := d.Cmd == "cut"
		if len(d.CmdArgs) == 0 && !on {
			clear(s.cut)
			break
		}
		a := sc.node(t, d, 0)
		if len(d.CmdArgs) == 1 && !on {
			isolate(s, a.idx, false)
			break
		}
		for i := 1; i < len(d.CmdArgs); i++ {
			cutBoth(s, a.idx, sc.node(t, d, i).idx, on)
		}
	case "isolate":
		isolate(s, sc.node(t, d, 0).idx, true)
	case "deaf", "hear":
		s.setDeaf(sc.node(t, d, 0), d.Cmd == "deaf")
	case "slow":
		var per, span, from string
		d.ScanArgs(t, "per", &per)
		d.ScanArgs(t, "for", &span)
		d.MaybeScanArgs(t, "from", &from)
		n, until := sc.node(t, d, 0), s.now+mustDuration(t, d, span)
		if from != "" {
			f := s.node(NodeID(from))
			if f == nil {
				d.Fatalf(t, "no node %s", from)
			}
			s.setSlowLink(f, n, mustDuration(t, d, per), until)
			break
		}
		s.setSlow(n, mustDuration(t, d, per), until)
	case "crash":
		disk := "keep"
		d.MaybeScanArgs(t, "disk", &disk)
		for _, n := range sc.nodes(t, d) {
			sc.crash(t, d, n, disk)
		}
	case "start":
		for _, n := range sc.nodes(t, d) {
			if n.up {
				d.Fatalf(t, "%s is up", n.id)
			}
			s.start(n)
		}
	case "wallback":
		wallClocksBack(s, mustDuration(t, d, sc.arg(t, d, 0)))
	case "change":
		sc.change(t, d)
	case "expect":
		sc.expect(t, d)
	case "state":
		return sc.state(t, d)
	case "registers":
		return sc.registers(sc.arg(t, d, 0))
	case "check":
		if len(s.fail) == 0 { // as a run checks: the first failure ends it
			s.check.final()
		}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return sc.flushOut()
}

// run advances virtual time: by the duration given, or until a condition
// holds (at most max, 10s unless given).
func (sc *script) run(t *testing.T, d *datadriven.TestData) {
	s := sc.s
	if len(d.CmdArgs) == 1 && d.CmdArgs[0].Vals == nil {
		end := s.now + mustDuration(t, d, d.CmdArgs[0].Key)
		s.runUntil(end)
		s.now = max(s.now, end)
		return
	}
	var until, limit string
	d.ScanArgs(t, "until", &until)
	limit = "10s"
	d.MaybeScanArgs(t, "max", &limit)
	holds := sc.condition(t, d, until)
	end := s.now + mustDuration(t, d, limit)
	for s.now < end && len(s.fail) == 0 {
		if holds() {
			return
		}
		next := s.now + time.Millisecond
		s.runUntil(next)
		s.now = max(s.now, next)
	}
	if len(s.fail) == 0 {
		sc.printf("timed out waiting for %s", until)
	}
}

// condition parses a condition of run until= and expect.
func (sc *script) condition(t *testing.T, d *datadriven.TestData, cond string) func() bool {
	s := sc.s
	what, arg, _ := strings.Cut(cond, ":")
	switch what {
	case "live":
		nodes := sc.list(t, d, arg)
		return func() bool { return !slices.ContainsFunc(nodes, func(n *simNode) bool { return !liveAcceptor(n) }) }
	case "held":
		id, key, ok := strings.Cut(arg, ":")
		if !ok {
			d.Fatalf(t, "%s: want held:n3:k0", cond)
		}
		n := sc.list(t, d, id)[0]
		return func() bool {
			return slices.ContainsFunc(n.clients, func(c *simClient) bool { return c.state == cHolding && c.grant.key == key })
		}
	case "voters":
		var want []NodeID
		for _, n := range sc.list(t, d, arg) {
			want = append(want, n.id)
		}
		return func() bool { return slices.Equal(s.m.Voters, want) && !s.m.Pending }
	case "pending":
		return func() bool { return s.m.Pending }
	}
	d.Fatalf(t, "%s: want live:n0,n1, held:n3:k0, voters:n0,n1,n2 or pending", cond)
	return nil
}

// expect fails the script unless its condition holds (or, after not, does
// not hold).
func (sc *script) expect(t *testing.T, d *datadriven.TestData) {
	not := len(d.CmdArgs) > 0 && d.CmdArgs[0].Key == "not"
	cond := sc.arg(t, d, 0)
	if not {
		cond = sc.arg(t, d, 1)
	}
	if holds := sc.condition(t, d, cond)(); holds == not {
		d.Fatalf(t, "at %.3fs %s: holds %v", sc.s.now.Seconds(), cond, holds)
	}
}

// change starts a voter change on a node: add=n4 or remove=n1, to finish
// within a second unless within= says otherwise.
func (sc *script) change(t *testing.T, d *datadriven.TestData) {
	s := sc.s
	n := sc.node(t, d, 0)
	var ch simChange
	var add, remove string
	d.MaybeScanArgs(t, "add", &add)
	d.MaybeScanArgs(t, "remove", &remove)
	ch.add, ch.remove = NodeID(add), NodeID(remove)
	if (add == "") == (remove == "") {
		d.Fatalf(t, "change: want add=NODE or remove=NODE")
	}
	within := "1s"
	d.MaybeScanArgs(t, "within", &within)
	var inc uint64
	if add != "" {
		inc = sc.list(t, d, add)[0].inc
	}
	id, err := n.node.ChangeVoters(ch.add, inc, ch.remove, n.clock.Now()+mustDuration(t, d, within))
	if err != nil {
		d.Fatalf(t, "%s: %v", n.id, err)
	}
	n.changes[id] = &ch
	s.flush(n)
}

// crash crashes n, printing the leases it held, and does to its disk what
// disk says.
func (sc *script) crash(t *testing.T, d *datadriven.TestData, n *simNode, disk string) {
	for _, c := range n.clients {
		if c.state == cHolding {
			sc.printf("%s: crashes holding %s %s until %.3fs", n.id, c.grant.key, sc.token(c.grant.token), c.grant.end.Seconds())
		}
	}
	sc.s.crash(n)
	switch disk {
	case "keep":
	case "wiped":
		n.disk = &simDisk{}
	case "none":
		n.disk, n.noDisk = nil, true
	default:
		d.Fatalf(t, "disk=%s: want keep, wiped or none", disk)
	}
}

func (sc *script) state(t *testing.T, d *datadriven.TestData) string {
	s := sc.s
	nodes := s.nodes
	if len(d.CmdArgs) > 0 {
		nodes = nil
		for i := range d.CmdArgs {
			nodes = append(nodes, sc.node(t, d, i))
		}
	}
	var b strings.Builder
	for _, n := range nodes {
		switch {
		case !n.up:
			fmt.Fprintf(&b, "%s: down\n", n.id)
		case n.node.acc == nil:
			fmt.Fprintf(&b, "%s: not a voter\n", n.id)
		default:
			rec := n.node.Recovery()
			fmt.Fprintf(&b, "%s: %v", n.id, n.node.acc.State())
			if rec.NeverVoted {
				fmt.Fprintf(&b, ", new disk waiting for %v", rec.Waiting)
			} else if len(rec.Waiting) > 0 {
				fmt.Fprintf(&b, ", waiting for %v", rec.Waiting)
			}
			if rec.NewMeshRefused != "" {
				fmt.Fprintf(&b, ", NewMesh refused by %s", rec.NewMeshRefused)
			}
			if n.disk != nil && n.disk.saved != nil && n.disk.saved.Voted {
				b.WriteString(", voted")
			}
			b.WriteString("\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (sc *script) registers(key string) string {
	var lines []string
	for _, n := range sc.s.nodes {
		if !n.up || n.node.acc == nil {
			continue
		}
		r := n.node.acc.regs[key]
		switch {
		case r == nil:
			lines = append(lines, fmt.Sprintf("%s: none", n.id))
		case !r.value.Held:
			lines = append(lines, fmt.Sprintf("%s: free at %s", n.id, sc.token(r.value.Epoch)))
		default:
			lines = append(lines, fmt.Sprintf("%s: held by %s %s, timer %v", n.id, r.value.Holder, sc.token(r.value.Epoch), r.remaining(n.clock.Now()) > 0))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// nodes are the nodes a command names (its arguments without a value).
func (sc *script) nodes(t *testing.T, d *datadriven.TestData) []*simNode {
	var ns []*simNode
	for i, a := range d.CmdArgs {
		if a.Vals == nil {
			ns = append(ns, sc.node(t, d, i))
		}
	}
	if len(ns) == 0 {
		d.Fatalf(t, "%s: no node named", d.Cmd)
	}
	return ns
}

// list is the nodes of a comma-separated list of names.
func (sc *script) list(t *testing.T, d *datadriven.TestData, names string) []*simNode {
	var ns []*simNode
	for _, id := range strings.Split(names, ",") {
		n := sc.s.node(NodeID(id))
		if n == nil {
			d.Fatalf(t, "no node %s", id)
		}
		ns = append(ns, n)
	}
	return ns
}

func (sc *script) node(t *testing.T, d *datadriven.TestData, i int) *simNode {
	id := sc.arg(t, d, i)
	n := sc.s.node(NodeID(id))
	if n == nil {
		d.Fatalf(t, "no node %s", id)
	}
	return n
}

func (sc *script) arg(t *testing.T, d *datadriven.TestData, i int) string {
	if i >= len(d.CmdArgs) {
		d.Fatalf(t, "%s: argument %d missing", d.Cmd, i+1)
	}
	return d.CmdArgs[i].Key
}

// client is an idle client of n.
func (sc *script) client(t *testing.T, d *datadriven.TestData, n *simNode) *simClient {
	if !n.up {
		d.Fatalf(t, "%s is down", n.id)
	}
	for _, c := range n.clients {
		if c.state == cIdle {
			return c
		}
	}
	c := &simClient{s: sc.s, n: n, id: n.idx*100 + len(n.clients), scripted: true, holdTime: time.Hour}
	n.clients = append(n.clients, c)
	c.boot()
	return c
}

func mustDuration(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return v
}
