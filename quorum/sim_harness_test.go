package quorum

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// The deterministic simulator: every node of a mesh in one goroutine, on
// virtual time, with the network, the clocks and the crashes in the hands of
// one seeded random source. The same seed replays the same run.

// simConfig is one simulated run.
type simConfig struct {
	Seed      int64
	Voters    int
	Proposers int // nodes that do not vote
	Duration  time.Duration
	Keys      int
	Clients   int // per node
	// ReadShare is the share of the clients' operations that are reads
	// (zero: 0.15).
	ReadShare float64
	// Uniform picks keys uniformly; otherwise half of all operations go
	// to key k0 (one hot key, a few warm ones).
	Uniform bool

	Drift        float64
	TTL          time.Duration
	SafetyMargin time.Duration
	Notice       time.Duration
	RoundTimeout time.Duration
	// MaxIdleKeys, when set, is every proposer's ProposerConfig.MaxIdleKeys:
	// small caps make nodes forget idle keys all the time.
	MaxIdleKeys int
	// MaxRegisters and RegisterIdle, when set, are every acceptor's: small
	// caps make voters drop registers all the time.
	MaxRegisters int
	RegisterIdle time.Duration

	Drop, Dup float64
	// LongTail is the share of messages delayed 100-400ms (default 0.003).
	LongTail    float64
	Partitions  bool
	OneWay      bool
	Crashes     bool
	CrashEvery  time.Duration // mean time between crashes; zero: 1.5s
	FullRestart bool
	// MajorityCrash crashes a majority of the newest configuration's
	// voters at once, now and then, while every other node (holders of
	// leases among them) runs on: the one case where a restarted voter's
	// quarantine alone keeps exclusion, and its catch-up concludes from
	// a minority.
	MajorityCrash bool
	// MajorityCrashEvery is the mean time between majority crashes; zero
	// means 3s.
	MajorityCrashEvery time.Duration
	// Retime rolls the lease TTL across restarts, as an operator changing
	// the settings by a rolling restart would: nodes that start after
	// RetimeAt (a third of the way to the heal) run RetimeTTL, the others
	// cfg.TTL; at the heal every node still on the old setting restarts.
	// Acceptors' MaxTTL and quarantine follow each life's setting.
	Retime    bool
	RetimeTTL time.Duration
	// Clocks chooses the clock rates of each life: "" uniform in ±Drift;
	// "extreme" at +Drift or −Drift, at random; "adversarial": voters at
	// +Drift (their timers end soonest in real time), every other node at
	// −Drift (its deadlines end latest). Rates are drawn again at every
	// start, so they change between lives.
	Clocks string
	// Reconfig adds and removes voters, one at a time, while the faults
	// run; new nodes join as spares to be added. Voter changes need
	// durable state (Disks).
	Reconfig bool
	// Disks gives every node a disk that keeps its acceptor's Durable
	// state across crashes (see durable.go); without, every restart
	// forgets everything.
	Disks bool
	// DisklessVoter, with Disks, leaves one founding voter (the last)
	// without a disk, as an operator who forgot one machine's data
	// directory would: it refuses to vote on voter changes, which go on
	// without it, and each restart brings it back on the founding
	// voters, knowing nothing of the changes since.
	DisklessVoter bool
	// Aimed adds faults aimed at the windows of voter changes and of a
	// majority's restart (sim_aimed_test.go); with Reconfig, the voter
	// changes are its episodes' alone.
	Aimed bool
	// LoweredTTLLoss, with Aimed and a Retime that lowers the TTL, adds
	// the episode that crashes the voters still at the old TTL once the
	// roll began (loweredTTLLoss).
	LoweredTTLLoss bool
	// DiskLoss, with Reconfig and Disks, loses voters' disks around voter
	// changes left unsettled (sim_diskloss_test.go).
	DiskLoss bool
	// LostAdopters, with DiskLoss, has its storms give way to episodes
	// in which a voter that adopted a change loses its disk among voters
	// that did not (sim_diskloss_test.go, lostAdopter).
	LostAdopters bool
	// WallBack sets the wall clocks of the nodes a full restart starts
	// again an hour back: with disks, tokens must not care.
	WallBack bool
	// Wipes, with Disks, wipes voters' data directories under their names
	// while voters that never voted are about (sim_wipe_test.go).
	Wipes bool
	// NewMesh, with Disks, starts the founding voters' first lives with
	// the operator's word that the mesh is brand-new (NodeConfig.NewMesh):
	// they vote on a majority that never voted, as before the voters
	// needed every other's word; later lives start without it, as an
	// operator's restarts do.
	NewMesh      bool
	HealAt       time.Duration // faults stop here; zero: Duration*3/5
	LivenessSlop time.Duration

	// Observe, when set, makes every node observe every key of the run,
	// registering again at this interval (sim_observe_test.go); Quiet
	// stops the clients that long before the end, so that the observers'
	// last states can be checked against a mesh at rest.
	Observe time.Duration
	Quiet   time.Duration
	// WallIncarnations (set with Observe: sim_observe_test.go) takes each
	// life's incarnation from its node's wall clock at start, in
	// nanoseconds, as the mesh does (otherwise lives are numbered in
	// order), and sets the wall clock of a node with a disk back now and
	// then as it restarts, past its last life's start: a later life then
	// has a lower incarnation. (Without a disk, tokens after the loss of
	// a majority's state rest on the wall clocks: see the package
	// documentation.)
	WallIncarnations bool
	// Semaphore, when set, makes the clients take slots of a counting
	// semaphore of this many holders instead of keys (sim_semaphore_test.go).
	Semaphore int
	// Updates makes holders write new values now and then (sim_value_test.go).
	Updates bool

	Bug string // a rule broken on purpose (sim_bugs_test.go)
	// Script, when set, replaces the random clients: it schedules what
	// the clients do; Delay, when set, chooses each message's delay
	// (returning false leaves it to chance).
	Script func(s *sim)
	Delay  func(s *sim, from, to *simNode) (time.Duration, bool)
	// Trace keeps a readable log of every step (slow; used on replay).
	Trace bool
	// skipI5 sets the quorum check aside, to show what else a bug breaks.
	skipI5 bool
}

func defaultSimConfig(seed int64, voters int) simConfig {
	cfg := simConfig{
		Seed:         seed,
		Voters:       voters,
		Proposers:    2,
		Duration:     12 * time.Second,
		Keys:         3,
		Clients:      2,
		Drift:        0.01,
		TTL:          time.Second,
		SafetyMargin: 2 * time.Millisecond,
		Notice:       100 * time.Millisecond,
		RoundTimeout: 40 * time.Millisecond,
		Drop:         0.03,
		Dup:          0.03,
		Partitions:   true,
		OneWay:       true,
		Crashes:      true,
		FullRestart:  seed%5 == 0,
		Reconfig:     seed%2 == 0,
		Disks:        seed%2 == 0 || seed%4 == 1,
		NewMesh:      true,
	}
	cfg.WallBack = cfg.Disks && seed%3 == 0
	// The states where bugs live, spread over the seeds: clock rates at
	// the drift bound, a majority of voters crashing under running
	// holders, lease settings rolled across restarts (lowered and raised).
	// Voters keep their state on disk in the seeds that change voters
	// (and in a quarter of the others): a restart after voter changes
	// knows of them (DESIGN §3.2, item 4).
	cfg.Clocks = []string{"", "extreme", "adversarial"}[seed%3]
	switch seed % 6 {
	case 2:
		smallRegisters(&cfg)
	case 4:
		smallIdle(&cfg)
	}
	switch seed % 8 {
	case 1, 5:
		cfg.MajorityCrash = true
	case 3:
		cfg.Retime, cfg.RetimeTTL = true, cfg.TTL/4
	case 7:
		cfg.Retime, cfg.TTL, cfg.RetimeTTL = true, cfg.TTL/4, cfg.TTL
	case 2, 6:
		// Voter changes under majority crashes, on disks.
		cfg.MajorityCrash = seed%16 < 8
	case 4:
		cfg.Retime, cfg.RetimeTTL = seed%16 < 8, cfg.TTL/4
	}
	// A fifth of the seeds that change voters have one voter without a
	// disk among them (a voter restarted so comes back on the founding
	// voters, and must not vote there once the mesh moved on). The mesh
	// refuses voter changes while a voter it sees lacks a disk; this is a
	// voter restarted without its data directory after them. No crash of
	// a majority in those, nor the restart of every node at once that
	// ends a change of lease settings: with the voter without a disk
	// among them, the voters before a pending change wait for each other
	// for good (each restarted, and only those with disks count as having
	// lost their state together); that takes an operator.
	if seed%10 == 4 {
		cfg.DisklessVoter, cfg.MajorityCrash, cfg.Retime = true, false, false
	}
	// One seed in eleven (a class apart from all the above) adds faults
	// aimed at the windows of voter changes and of a majority's restart
	// (sim_aimed_test.go); its voter changes come from those alone.
	cfg.Aimed = seed%11 == 7
	// The aimed seeds that lower the TTL by a roll crash the voters of
	// the old TTL during it.
	cfg.LoweredTTLLoss = cfg.Aimed && cfg.Retime && cfg.RetimeTTL < cfg.TTL
	// A seventh of the seeds that change voters (seed%14 == 10, less those
	// with a voter without a disk from the start, and the aimed ones)
	// lose voters' disks around changes left unsettled
	// (sim_diskloss_test.go).
	if seed%14 == 10 && !cfg.DisklessVoter && !cfg.Aimed {
		loseDisks(&cfg)
		cfg.LostAdopters = seed%28 == 24 // half of them, by episodes
	}
	// Another seventh (seed%14 == 12, but the aimed ones and those with a
	// voter without a disk) wipe voters' directories under their names
	// (sim_wipe_test.go).
	if seed%14 == 12 && !cfg.DisklessVoter && !cfg.Aimed {
		wipeDisks(&cfg)
	}
	return cfg
}

// smallRegisters makes voters drop idle registers all the time: more keys
// than a voter keeps, and short idle ages.
func smallRegisters(c *simConfig) {
	c.Keys, c.MaxRegisters, c.RegisterIdle = 6, 3, 300*time.Millisecond
}

// smallIdle makes proposers forget idle keys all the time.
func smallIdle(c *simConfig) { c.Keys, c.MaxIdleKeys = 6, 1 }

// timing is the run's lease arithmetic, from package lease as the mesh uses
// it.
func (c simConfig) timing() lease.Timing {
	return lease.Timing{TTL: c.TTL, Drift: c.Drift, SafetyMargin: c.SafetyMargin, NoticeMargin: c.Notice}
}

func (c simConfig) holderTTL() time.Duration { return c.timing().HolderTTL() }

func (c simConfig) quarantine() time.Duration { return c.timing().Quarantine() }

// timingOf is the lease arithmetic of a life running TTL ttl.
func (c simConfig) timingOf(ttl time.Duration) lease.Timing {
	t := c.timing()
	t.TTL = ttl
	return t
}

// holderTTLOf is D_P for a lease of TTL ttl, as the proposer's caller
// computes it (package lease), or as a broken rule does (sim_bugs_test.go).
func (c simConfig) holderTTLOf(ttl time.Duration) time.Duration {
	switch c.Bug {
	case "holder-no-drift":
		return ttl - c.SafetyMargin
	case "holder-one-sided-drift":
		return time.Duration(float64(ttl)*(1-c.Drift)) - c.SafetyMargin
	}
	return c.timingOf(ttl).HolderTTL()
}

// leaseMemo keeps the lease arithmetic of the few timings a run uses: it
// works in big integers, and the checker asks for it at every release.
type leaseMemo struct {
	quarantine map[lease.Timing]time.Duration
	holderTTL  map[holderTTLKey]time.Duration
}

type holderTTLKey struct {
	t   lease.Timing
	bug string
}

// quarantineOf is t.Quarantine().
func (s *sim) quarantineOf(t lease.Timing) time.Duration {
	q, ok := s.memo.quarantine[t]
	if !ok {
		q = t.Quarantine()
		s.memo.quarantine[t] = q
	}
	return q
}

// holderTTLOf is s.cfg.holderTTLOf(ttl).
func (s *sim) holderTTLOf(ttl time.Duration) time.Duration {
	k := holderTTLKey{s.cfg.timingOf(ttl), s.cfg.Bug}
	d, ok := s.memo.holderTTL[k]
	if !ok {
		d = s.cfg.holderTTLOf(ttl)
		s.memo.holderTTL[k] = d
	}
	return d
}

// longestTTL is the longest TTL any life of the run uses.
func (c simConfig) longestTTL() time.Duration {
	if c.Retime {
		return max(c.TTL, c.RetimeTTL)
	}
	return c.TTL
}

func (c simConfig) healAt() time.Duration {
	if c.HealAt > 0 {
		return c.HealAt
	}
	return c.Duration * 3 / 5
}

// simClock is one node's clock: it runs at its own rate and starts from its
// own origin after every restart; its wall clock is skewed.
type simClock struct {
	s        *sim
	rate     float64
	offset   time.Duration // local = offset + rate*real
	wallSkew int64         // µs

	// realAt's last answer, to local (rate and offset never change once
	// the node starts): a node asks for the same next tick after most
	// steps, and the division took a percent of a run.
	lastLocal, lastReal time.Duration
	lastSet             bool
}

func (c *simClock) at(real time.Duration) time.Duration {
	return c.offset + time.Duration(float64(real)*c.rate)
}

func (c *simClock) Now() time.Duration { return c.at(c.s.now) }

func (c *simClock) WallMicros() int64 {
	return simWallBase + c.wallSkew + int64(float64(c.s.now)*c.rate)/1000
}

// realAt is the first real time at which the clock reads local or more.
func (c *simClock) realAt(local time.Duration) time.Duration {
	if c.lastSet && local == c.lastLocal {
		return c.lastReal
	}
	r := time.Duration(math.Ceil(float64(local-c.offset) / c.rate))
	for c.at(r) < local {
		r++
	}
	for r > 0 && c.at(r-1) >= local {
		r--
	}
	c.lastLocal, c.lastReal, c.lastSet = local, r, true
	return r
}

// simWallBase is the simulated wall clock at real time zero (2026-11-29).
const simWallBase = int64(1795910400) * 1e6

type simNode struct {
	s     *sim
	idx   int
	id    NodeID
	voter bool
	up    bool
	inc   uint64
	clock *simClock
	node  *Node         // nil while down
	ttl   time.Duration // this life's lease TTL (see simConfig.Retime)

	tickGen uint64
	tickAt  time.Duration
	tickSet bool

	name    string // holderName, of life nameInc
	nameInc uint64

	// What simConfig.WallIncarnations needs: every incarnation the node
	// ran as, and how far its wall clock was set back (µs).
	incs     []uint64
	wallBack int64

	disk    *simDisk // nil without (simConfig.Disks); survives crashes
	noDisk  bool     // runs without a disk, which it lost (simConfig.DiskLoss)
	lives   int      // lives started
	clients []*simClient
	ops     map[OpID]*simClient
	holder  map[string]*simClient // key → client holding this node's lease on it
	changes map[OpID]*simChange   // voter changes this node started

	// checked is what life checkedInc did on each key, for the checker
	// (simChecker.inc).
	checked    map[string]*incRec
	checkedInc uint64
}

// simDisk is a node's disk: what its acceptor saved last.
type simDisk struct {
	saved *Durable
	saves int
}

func (d *simDisk) Save(st *Durable) error {
	c := st.clone()
	d.saved = &c
	d.saves++
	return nil
}

// load is the state a new life starts from (nil before any save).
func (d *simDisk) load() *Durable {
	if d == nil || d.saved == nil {
		return nil
	}
	c := d.saved.clone()
	return &c
}

// simChange is a voter change the driver asked of a node.
type simChange struct {
	add, remove NodeID
}

// holderName names n's current life as a holder: holderName(n.id, n.inc),
// formatted once per life.
func (n *simNode) holderName() string {
	if n.name == "" || n.nameInc != n.inc {
		n.name, n.nameInc = holderName(n.id, n.inc), n.inc
	}
	return n.name
}

// holderName is holderName(id, inc), that of a node's current life
// formatted once.
func (s *sim) holderName(id NodeID, inc uint64) string {
	if n := s.lookup(id); n != nil && n.inc == inc {
		return n.holderName()
	}
	return holderName(id, inc)
}

// sim is one run.
type sim struct {
	cfg    simConfig
	orig   simConfig // cfg as newSim was given it (failureReport)
	rand   *rand.Rand
	now    time.Duration
	seq    uint64
	events eventQueue
	nodes  []*simNode
	// boot is the configuration every node starts with (its Config.Voters,
	// the founding voters); m is the newest configuration any node adopted
	// in this era, and configs every one adopted, by id.
	boot    Membership
	m       Membership
	configs map[uint64]Membership

	cut      map[[2]int]bool
	cutOffs  map[[2]int]int // cutOff's cuts in force on each link
	wallBack int64          // µs the wall clocks of new lives are set back (simConfig.WallBack)
	nextInc  uint64
	nextRef  uint64 // numbers the requests delivered (Message.Ref)
	healed   bool
	ended    bool

	// spareOps and spareResults are the slices of messages delivered or
	// lost, to copy later messages into; requests and responses are where
	// the copies of the messages themselves are made.
	spareOps     [][]Op
	spareResults [][]Result
	requests     slab[Request]
	responses    slab[Response]

	memo  leaseMemo
	check *simChecker
	stats simStats
	loss  *diskLoss // simConfig.DiskLoss
	wipe  *wipes    // simConfig.Wipes
	// deaf nodes hear no ballot request; slow ones send and receive every
	// message with a fixed delay for a while (setDeaf, setSlow).
	deaf      map[*simNode]bool
	slow      map[*simNode]slowNode
	slowLinks map[[2]int]slowNode
	trace     []string
	fail      []string
	// onResult, when set (by a scripted test), sees every operation
	// result a node reports, before the checker routes it; onVoting and
	// onLease every voting state and lease event.
	onResult func(n *simNode, res OpResult)
	onVoting func(n *simNode, v VotingState)
	onLease  func(n *simNode, ev LeaseEvent)
}

// slowNode delays every message to or from a node by per, until until.
type slowNode struct {
	per, until time.Duration
}

// setDeaf makes n hear no ballot request (or hear them again): a voter
// that never votes, though it answers catch-ups.
func (s *sim) setDeaf(n *simNode, deaf bool) {
	if s.deaf == nil {
		s.deaf = make(map[*simNode]bool)
	}
	if deaf {
		s.deaf[n] = true
	} else {
		delete(s.deaf, n)
	}
}

// setSlow delays every message to or from n by per until until.
func (s *sim) setSlow(n *simNode, per, until time.Duration) {
	if s.slow == nil {
		s.slow = make(map[*simNode]slowNode)
	}
	s.slow[n] = slowNode{per: per, until: until}
}

// setSlowLink delays every message from one node to another by per until
// until.
func (s *sim) setSlowLink(from, to *simNode, per, until time.Duration) {
	if s.slowLinks == nil {
		s.slowLinks = make(map[[2]int]slowNode)
	}
	s.slowLinks[[2]int{from.idx, to.idx}] = slowNode{per: per, until: until}
}

// slowDelay is the delay of a message on a slow link, or to or from a slow
// node, if any.
func (s *sim) slowDelay(from, to *simNode) (time.Duration, bool) {
	if sl, ok := s.slowLinks[[2]int{from.idx, to.idx}]; ok && s.now < sl.until {
		return sl.per, true
	}
	for _, n := range [2]*simNode{from, to} {
		if sl, ok := s.slow[n]; ok && s.now < sl.until {
			return sl.per, true
		}
	}
	return 0, false
}

type simStats struct {
	Messages, Dropped, Duplicated, Cut, Delayed         int
	Partitions, OneWayCuts, Crashes, FullRestarts       int
	Grants, Releases, Renewals, Lost, Reads, Writes     int
	StaleWritesRefused, LateWrites, Cancels, Unknowns   int
	NoQuorum, Locked, FloorOnly                         int
	Changes, ChangesDone, ChangesFailed, ChangesRefused int
	Adds, Removes, KeysMoved, Joins, ConfigsAdopted     int
	Forgotten                                           int // registers voters dropped
	WrittenBack                                         int // keys sweeps wrote back to forget them
	FreedExpired                                        int // of those, grants whose lease had run out at every voter
	Updates                                             int // values written by holders
}

func (st simStats) String() string {
	return fmt.Sprintf("msgs=%d dropped=%d dup=%d cut=%d tail=%d | partitions=%d oneway=%d crashes=%d fullrestarts=%d | "+
		"grants=%d releases=%d renewals=%d lost=%d reads=%d writes=%d staleRefused=%d lateWrites=%d cancels=%d unknown=%d noquorum=%d locked=%d | "+
		"changes=%d done=%d failed=%d refused=%d adds=%d removes=%d moved=%d joins=%d adopted=%d | forgotten=%d writtenBack=%d freedExpired=%d",
		st.Messages, st.Dropped, st.Duplicated, st.Cut, st.Delayed, st.Partitions, st.OneWayCuts, st.Crashes, st.FullRestarts,
		st.Grants, st.Releases, st.Renewals, st.Lost, st.Reads, st.Writes, st.StaleWritesRefused, st.LateWrites, st.Cancels, st.Unknowns, st.NoQuorum, st.Locked,
		st.Changes, st.ChangesDone, st.ChangesFailed, st.ChangesRefused, st.Adds, st.Removes, st.KeysMoved, st.Joins, st.ConfigsAdopted,
		st.Forgotten, st.WrittenBack, st.FreedExpired)
}

func newSim(cfg simConfig) *sim {
	s := &sim{
		cfg:     cfg,
		orig:    cfg,
		rand:    rand.New(rand.NewSource(cfg.Seed)),
		cut:     make(map[[2]int]bool),
		cutOffs: make(map[[2]int]int),
		nextInc: 1,
		memo:    leaseMemo{make(map[lease.Timing]time.Duration), make(map[holderTTLKey]time.Duration)},
	}
	var voters []NodeID
	for i := 0; i < cfg.Voters+cfg.Proposers; i++ {
		n := &simNode{s: s, idx: i, id: NodeID(fmt.Sprintf("n%d", i)), voter: i < cfg.Voters}
		if n.voter {
			voters = append(voters, n.id)
		}
		s.nodes = append(s.nodes, n)
	}
	s.boot = NewMembership(ClusterID(voters), voters...)
	s.resetConfigs()
	s.check = newSimChecker(s)
	return s
}

func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	if e := s.events.push(t, s.seq); e != nil {
		e.fn = fn
	}
}

func (s *sim) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }

func (s *sim) tracef(format string, args ...any) {
	if s.cfg.Trace {
		s.trace = append(s.trace, fmt.Sprintf("%12v ", s.now)+fmt.Sprintf(format, args...))
	}
}

// failf records an invariant violation. The run stops at the first.
func (s *sim) failf(format string, args ...any) {
	msg := fmt.Sprintf("t=%v: ", s.now) + fmt.Sprintf(format, args...)
	s.fail = append(s.fail, msg)
	s.tracef("VIOLATION %s", msg)
	s.ended = true
}

func (s *sim) run() {
	s.run0()
	if len(s.fail) == 0 {
		s.check.final()
	}
}

func (s *sim) run0() {
	s.startAll()
	s.runUntil(s.cfg.Duration)
}

// startAll starts every node and schedules the run's faults, script, heal and
// end.
func (s *sim) startAll() {
	for _, n := range s.nodes {
		s.start(n)
	}
	s.scheduleFaults()
	if s.cfg.Script != nil {
		s.cfg.Script(s)
	}
	s.at(s.cfg.healAt(), s.heal)
	s.at(s.cfg.Duration, func() { s.ended = true })
	s.events.endAt(s.cfg.Duration)
}

// runUntil runs the events due up to t (all of them, to the end, when t
// is the run's Duration).
func (s *sim) runUntil(t time.Duration) {
	for s.events.len() > 0 && !s.ended && s.events.next() <= t {
		var slot int32
		s.now, slot = s.events.pop()
		// e is good until something runs that pushes an event: each case
		// takes what it needs of e before.
		e := s.events.event(slot)
		switch {
		case e.deliver.to != nil:
			if d := &e.deliver; d.to.up && !s.ended && d.to.inc == d.toInc && d.from.inc == d.fromInc {
				s.deliver(d.to, d.msg)
			} else {
				s.recycle(d.msg)
			}
		case e.tick != nil:
			s.tick(e.tick, e.gen)
		default:
			e.fn()
		}
		s.events.done(slot)
	}
}

// start boots a node with empty state, as after a crash.
func (s *sim) start(n *simNode) {
	n.up = true
	n.lives++
	n.clock = &simClock{
		s:        s,
		rate:     s.clockRate(n),
		wallSkew: int64(s.rand.Intn(20000)) - 10000 - s.wallBack, // ±10ms
	}
	if s.cfg.WallIncarnations {
		n.clock.wallSkew -= n.wallBack
		s.maybeStepWall(n)
		n.inc = wallIncarnation(n)
	} else {
		n.inc = s.nextInc
		s.nextInc++
	}
	n.ttl = s.cfg.TTL
	if s.cfg.Retime && s.now >= s.retimeAt() {
		n.ttl = s.cfg.RetimeTTL
	}
	// A fresh monotonic origin per life, as a new process gets.
	n.clock.offset = time.Duration(s.rand.Int63n(int64(time.Hour))) - time.Duration(float64(s.now)*n.clock.rate)
	n.ops = make(map[OpID]*simClient)
	n.holder = make(map[string]*simClient)
	n.changes = make(map[OpID]*simChange)
	// Every node starts from its Config.Voters, the founding voters, or
	// the configuration its disk kept, and learns a newer one from the
	// others.
	if s.cfg.Disks && n.disk == nil && !n.noDisk && !(s.cfg.DisklessVoter && n.idx == s.cfg.Voters-1) {
		n.disk = &simDisk{}
	}
	var disk Disk
	if n.disk != nil {
		disk = n.disk
	}
	var err error
	n.node, err = NewNode(NodeConfig{
		Disk: disk, Durable: n.disk.load(), NewMesh: s.cfg.NewMesh && n.lives == 1 && s.boot.IsVoter(n.id),
		ID: n.id, Incarnation: n.inc, Membership: s.boot, Clock: n.clock,
		Rand: rand.New(rand.NewSource(s.rand.Int63())), RoundTimeout: s.cfg.RoundTimeout, Drift: s.cfg.Drift,
		MaxIdleKeys: s.cfg.MaxIdleKeys,
		MaxTTL:      n.ttl, Quarantine: s.quarantineOf(s.cfg.timingOf(n.ttl)), CatchUpBuckets: 4,
		RetryInterval: 2 * s.cfg.RoundTimeout, HandoffGrace: 2 * s.cfg.RoundTimeout,
		MaxRegisters: s.cfg.MaxRegisters, RegisterIdle: s.cfg.RegisterIdle,
		rules: s.nodeRules(n),
	})
	if err != nil {
		panic(err)
	}
	n.node.answered = func(req *Request, resp *Response) { s.answered(n, req, resp) }
	s.startObserving(n)
	n.voter = n.node.Membership().IsVoter(n.id)
	s.tracef("%s starts, incarnation %d, clock rate %.4f, TTL %v", n.id, n.inc, n.clock.rate, n.ttl)
	if len(n.clients) == 0 {
		for i := 0; i < s.cfg.Clients; i++ {
			n.clients = append(n.clients, &simClient{s: s, n: n, id: n.idx*s.cfg.Clients + i, scripted: s.cfg.Script != nil})
		}
	}
	for _, c := range n.clients {
		c.boot()
	}
	if s.cfg.Reconfig {
		// Joining gossip: trade configurations with a few members.
		for i := 0; i < 2; i++ {
			if peer := s.randomUp(n); peer != nil {
				s.gossip(peer, n)
				s.gossip(n, peer)
			}
		}
	}
	s.flush(n)
}

// maybeStepWall sets the wall clock of n, restarting on its disk, back
// below what it read when its last life began (by up to a second more),
// one time in two (simConfig.WallIncarnations).
func (s *sim) maybeStepWall(n *simNode) {
	if len(n.incs) == 0 || n.disk == nil || s.rand.Intn(2) == 0 {
		return
	}
	last := int64(n.incs[len(n.incs)-1] / 1000)
	back := n.clock.WallMicros() - last + 1 + s.rand.Int63n(int64(time.Second/time.Microsecond))
	n.wallBack += back
	n.clock.wallSkew -= back
	s.tracef("%s's wall clock is set back %v", n.id, time.Duration(back)*time.Microsecond)
}

// wallIncarnation is the incarnation of n's new life: its wall clock now,
// in nanoseconds, as the mesh takes it (and never one of its lives before).
func wallIncarnation(n *simNode) uint64 {
	inc := uint64(n.clock.WallMicros()) * 1000
	for slices.Contains(n.incs, inc) {
		inc++
	}
	n.incs = append(n.incs, inc)
	return inc
}

// clockRate draws the clock rate of n's new life (simConfig.Clocks).
func (s *sim) clockRate(n *simNode) float64 {
	rho := s.cfg.Drift
	switch s.cfg.Clocks {
	case "extreme":
		if s.rand.Intn(2) == 0 {
			return 1 - rho
		}
		return 1 + rho
	case "adversarial":
		if s.boot.IsVoter(n.id) || s.m.IsVoter(n.id) {
			return 1 + rho
		}
		return 1 - rho
	}
	return 1 + (2*s.rand.Float64()-1)*rho
}

// retimeAt is when the roll to RetimeTTL begins (simConfig.Retime).
func (s *sim) retimeAt() time.Duration { return s.cfg.healAt() / 3 }

// noteConfig records a configuration some node adopted, and checks that no
// two configurations of one era share an id (I5).
func (s *sim) noteConfig(m Membership) {
	if old, ok := s.configs[m.ID]; ok {
		if !old.Equal(m) {
			s.failf("I5: configuration id %d names both %v (pending %v) and %v (pending %v)", m.ID&0xffff, old.Voters, old.Pending, m.Voters, m.Pending)
		}
		return
	}
	s.configs[m.ID] = m.clone()
	if s.m.Newer(m) {
		s.m = m.clone()
	}
}

func (s *sim) resetConfigs() {
	s.m = s.boot.clone()
	s.configs = map[uint64]Membership{s.boot.ID: s.boot}
}

// config is the configuration of the given id in this era.
func (s *sim) config(id uint64) (Membership, bool) {
	m, ok := s.configs[id]
	return m, ok
}

// gossip carries from's configuration to to, as memberlist would carry
// it: a hint that to adopts if it is newer (every node's configuration was
// chosen), lost or late like any message.
func (s *sim) gossip(from, to *simNode) {
	if !from.up || from.node == nil {
		return
	}
	m := from.node.Membership()
	adopt := func() {
		if to.node != nil {
			to.node.Adopt(m)
			s.flush(to)
		}
	}
	s.send(from, to, func() func() { return adopt })
}

func (s *sim) randomUp(not *simNode) *simNode {
	for try := 0; try < 10; try++ {
		n := s.nodes[s.rand.Intn(len(s.nodes))]
		if n != not && n.up {
			return n
		}
	}
	return nil
}

// crash stops a node; it loses everything in memory.
func (s *sim) crash(n *simNode) {
	if !n.up {
		return
	}
	s.tracef("%s crashes", n.id)
	s.stats.Crashes++
	s.maybeMajorityLost(n)
	s.countForgotten(n)
	s.abandon(n)
	n.up = false
	n.node = nil
	n.tickGen++
	n.tickSet = false
}

// abandon records that the operations in flight on n will never report:
// their writes are of unknown outcome.
func (s *sim) abandon(n *simNode) {
	for _, c := range n.clients {
		c.crashed()
	}
	// The proposer's own background work ends too, perhaps half done:
	// its cleanups, and a sweep's free of an expired grant (reported as
	// OpResult.Swept when the sweep ends, which now it never will; soak
	// seed 959720 with 7 voters: n6 freed a grant, crashed, and a later
	// read of the key free at its epoch had nothing to explain it).
	var ids []OpID
	for id, x := range n.node.prop.ops {
		if x.kind == kindCleanup || (x.kind == kindForget && x.freed != nil && x.wrote) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		x := n.node.prop.ops[id]
		if x.kind == kindForget {
			g := x.freed
			s.check.addGhost(x.ks.key, -1, n.holderName(), qt.Input{Kind: qt.Cleanup, Holder: holderName(g.Holder, g.HolderInc)},
				qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: g.Epoch}, n.clock.realAt(x.started), false, g.Epoch)
			continue
		}
		for _, e := range x.attempted {
			s.check.addGhost(x.ks.key, -1, n.holderName(), qt.Input{Kind: qt.Cleanup, Holder: n.holderName()},
				qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: e}, n.clock.realAt(x.started), false, e)
		}
	}
}

// flush sends what a node wants sent, hands results to its clients, and
// sets its next tick.
func (s *sim) flush(n *simNode) {
	for n.up && !s.ended && n.node.HasReady() {
		rd := n.node.Ready()
		if rd.Config != nil {
			s.noteConfig(*rd.Config)
			n.voter = rd.Config.IsVoter(n.id)
			if s.loss != nil {
				s.adoptedInStorm(n, *rd.Config) // before its pushes go out
			}
			s.stats.ConfigsAdopted++
			s.tracef("%s is on configuration %d %v pending=%v prev=%v epoch floor %d", n.id, rd.Config.ID&0xffff, rd.Config.Voters, rd.Config.Pending, rd.Config.Prev, rd.Config.EpochFloor)
		}
		if v := rd.Voting; v != nil {
			s.tracef("%s voting: voter %v, acceptor %v, floor only %v", n.id, v.Voter, v.Acceptor, v.FloorOnly)
			if s.onVoting != nil {
				s.onVoting(n, *v)
			}
			if v.Acceptor == Live && v.FloorOnly {
				s.stats.FloorOnly++
			}
		}
		for i := range rd.Messages {
			msg := rd.Messages[i]
			if msg.Kind == MsgRequest {
				s.check.requestSent(n, msg.Request)
			}
			if msg.Kind == MsgNotify && s.cfg.Trace {
				s.tracef("  %s notifies %s: %q free (promised %v)", n.id, msg.To, msg.Notify.Keys, msg.Notify.Promised)
			}
			s.sendMessage(n, s.node(msg.To), msg)
		}
		for _, ev := range rd.Leases {
			if s.onLease != nil {
				s.onLease(n, ev)
			}
			s.check.leaseEvent(n, ev)
		}
		for _, res := range rd.Results {
			s.check.result(n, res)
		}
		for _, ch := range rd.Changes {
			s.check.observed(n, ch)
		}
		// As the mesh does: the Ready back for the next one to fill (its
		// slices, and its requests' operations and responses' results),
		// so that every run checks that nothing sent, and nothing the node
		// keeps, still refers to them.
		n.node.Advance(rd)
	}
	s.scheduleTick(n)
}

// deliver steps a message at its addressee: a copy of its own (send makes
// one for each copy that goes out), since Step takes a message's slices and
// the same message may arrive twice. A request gets a Ref, as the mesh gives
// one, for its answer to carry.
func (s *sim) deliver(to *simNode, msg Message) {
	if to.node == nil {
		return
	}
	msg.Ref = 0
	if msg.Kind == MsgRequest || msg.Kind == MsgCatchUp {
		s.nextRef++
		msg.Ref = s.nextRef
	}
	to.node.Step(&msg)
	// As the mesh does: a request's operations and a response's results
	// are decoded into again once Step returns. Cleared here, and later
	// messages copied into them, so that every run checks that the node
	// kept no reference to them.
	s.recycle(msg)
	s.flush(to)
}

// recycle keeps a delivered or lost message's operations or results,
// cleared, for copyMessage to copy later messages into, as the mesh decodes
// into them again.
func (s *sim) recycle(msg Message) {
	if r := msg.Request; r != nil && r.Ops != nil {
		clear(r.Ops)
		s.spareOps = append(s.spareOps, r.Ops)
	}
	if r := msg.Response; r != nil && r.Results != nil {
		clear(r.Results)
		s.spareResults = append(s.spareResults, r.Results)
	}
}

// answered checks every answer of every node to a ballot request, its own
// included (I5, I6), as the node gives it.
func (s *sim) answered(n *simNode, req *Request, resp *Response) {
	s.noteConfig(n.node.Membership()) // adopted within the step that answers
	s.check.acceptorAnswered(n, req, resp)
	if !s.cfg.Trace {
		return
	}
	for i, op := range req.Ops {
		if len(resp.Results) > i {
			r := resp.Results[i]
			s.tracef("  %s <- %s %v %q b=%v inc=%d v=%v next=%v: ok=%v why=%d p=%v a=%v v=%v rem=%v me=%d", n.id, req.From, op.Kind, op.Key, op.Ballot, op.Inc, op.Value, op.Next, r.OK, r.Reason, r.Promised, r.Accepted, r.Value, r.Remaining, r.MaxEpoch)
		} else {
			s.tracef("  %s <- %s %v %q: status %v", n.id, req.From, op.Kind, op.Key, resp.Status)
		}
	}
}

// copyMessage copies a message, its payload and every slice in it: a
// request's operations and a response's results into slices that earlier
// messages left (recycle).
func (s *sim) copyMessage(m Message) Message {
	if r := m.Request; r != nil {
		c := s.requests.new()
		*c = *r
		c.Ops = copyInto(&s.spareOps, r.Ops)
		m.Request = c
	}
	if r := m.Response; r != nil {
		c := s.responses.new()
		*c = *r
		c.Results = copyInto(&s.spareResults, r.Results)
		c.Members = cloneMembers(r.Members)
		m.Response = c
	}
	if r := m.Notify; r != nil {
		c := *r
		c.Keys, c.Promised, c.Changes = slices.Clone(r.Keys), slices.Clone(r.Promised), slices.Clone(r.Changes)
		m.Notify = &c
	}
	if r := m.CatchUp; r != nil {
		c := *r
		m.CatchUp = &c
	}
	if r := m.CatchUpReply; r != nil {
		c := *r
		c.Entries = slices.Clone(r.Entries)
		c.Members = cloneMembers(r.Members)
		m.CatchUpReply = &c
	}
	if r := m.Push; r != nil {
		c := *r
		c.Members = r.Members.clone()
		m.Push = &c
	}
	return m
}

// slab hands out new zero values of T, carved from blocks: one allocation
// for many. Each is new, and never handed out again.
type slab[T any] []T

func (b *slab[T]) new() *T {
	if len(*b) == 0 {
		*b = make([]T, 64)
	}
	p := &(*b)[0]
	*b = (*b)[1:]
	return p
}

// copyInto copies src into the last of spare, or a new slice when spare is
// empty; nil stays nil.
func copyInto[T any](spare *[][]T, src []T) []T {
	if src == nil {
		return nil
	}
	var dst []T
	if n := len(*spare); n > 0 {
		dst = (*spare)[n-1]
		(*spare)[n-1] = nil
		*spare = (*spare)[:n-1]
	} else {
		dst = make([]T, 0, len(src))
	}
	return append(dst[:0], src...)
}

func cloneMembers(m *Membership) *Membership {
	if m == nil {
		return nil
	}
	c := m.clone()
	return &c
}

func (s *sim) scheduleTick(n *simNode) {
	if !n.up {
		return
	}
	local, ok := n.node.NextTick()
	if !ok {
		return
	}
	at := max(n.clock.realAt(local), s.now)
	if n.tickSet && n.tickAt <= at {
		return
	}
	n.tickGen++
	n.tickAt, n.tickSet = at, true
	s.seq++
	if e := s.events.push(at, s.seq); e != nil {
		e.tick, e.gen = n, n.tickGen
	}
}

// tick ticks n, unless a later scheduleTick moved its tick (gen is no
// longer its tick generation) or it crashed.
func (s *sim) tick(n *simNode, gen uint64) {
	if n.tickGen != gen || !n.up {
		return
	}
	n.tickSet = false
	n.node.Tick()
	s.flush(n)
}

func (s *sim) node(id NodeID) *simNode {
	// (Not fmt.Sscanf: a tenth of the simulator's time went there.)
	i, _ := strconv.Atoi(strings.TrimPrefix(string(id), "n"))
	return s.nodes[i]
}

// lookup is the node named id, or nil when no node is.
func (s *sim) lookup(id NodeID) *simNode {
	i, err := strconv.Atoi(strings.TrimPrefix(string(id), "n"))
	if err != nil || i < 0 || i >= len(s.nodes) || s.nodes[i].id != id {
		return nil
	}
	return s.nodes[i]
}

// send delivers a message at the addressee after a delay, or loses it, or
// delivers it twice: copyOf makes what one copy does on arrival, called
// once per copy that goes out (none for a lost message). A message to a
// node reaches whatever incarnation of it is up on arrival.
//
// A message reaches only the incarnations it was sent between, as over a
// TCP connection: one of a node that restarted meanwhile is lost.
func (s *sim) send(from, to *simNode, copyOf func() func()) {
	fromInc, toInc := from.inc, to.inc
	s.route(from, to, func(d time.Duration) {
		fn := copyOf()
		s.after(d, func() {
			if to.up && !s.ended && to.inc == toInc && from.inc == fromInc {
				fn()
			}
		})
	})
}

// sendMessage sends msg as send does. The node's message is its own until
// Advance, and Step takes what it is given: every copy that goes out is a
// copy of its own.
func (s *sim) sendMessage(from, to *simNode, msg Message) {
	if msg.Kind == MsgRequest && s.deaf[to] {
		s.stats.Cut++
		return
	}
	s.route(from, to, func(d time.Duration) {
		s.seq++
		e := s.events.push(s.now+d, s.seq)
		if e == nil {
			return // lost: it would arrive after the end (no copy needed)
		}
		e.deliver = delivery{from: from, to: to, fromInc: from.inc, toInc: to.inc, msg: s.copyMessage(msg)}
	})
}

// route decides what becomes of a message from from to to: lost, or
// scheduled once or twice, each copy after its own delay.
func (s *sim) route(from, to *simNode, schedule func(delay time.Duration)) {
	s.stats.Messages++
	copies := 1
	if from != to {
		if s.cut[[2]int{from.idx, to.idx}] {
			s.stats.Cut++
			return
		}
		if !s.healed && s.rand.Float64() < s.cfg.Drop {
			s.stats.Dropped++
			return
		}
		if !s.healed && s.rand.Float64() < s.cfg.Dup {
			s.stats.Duplicated++
			copies = 2
		}
	}
	for i := 0; i < copies; i++ {
		d := s.delay(from == to)
		if s.slow != nil || s.slowLinks != nil {
			if slow, ok := s.slowDelay(from, to); ok {
				d = slow
			}
		}
		if s.cfg.Delay != nil {
			if fixed, ok := s.cfg.Delay(s, from, to); ok {
				d = fixed
			}
		}
		schedule(d)
	}
}

// delay is a network delay with a long tail: mostly a fraction of a
// millisecond, sometimes tens of milliseconds, rarely a few hundred.
func (s *sim) delay(local bool) time.Duration {
	if local {
		return time.Duration(s.rand.Intn(20)) * time.Microsecond
	}
	d := 100*time.Microsecond + time.Duration(s.rand.Intn(900))*time.Microsecond
	if s.healed {
		return d
	}
	tail := s.cfg.LongTail
	if tail == 0 {
		tail = 0.003
	}
	switch x := s.rand.Float64(); {
	case x < tail:
		s.stats.Delayed++
		d += 100*time.Millisecond + time.Duration(s.rand.Int63n(int64(300*time.Millisecond)))
	case x < tail+0.047:
		s.stats.Delayed++
		d += time.Duration(s.rand.ExpFloat64() * float64(10*time.Millisecond))
	}
	return d
}

// Faults.

func (s *sim) scheduleFaults() {
	heal := s.cfg.healAt()
	if s.cfg.Partitions {
		for t := s.jitter(time.Second); t < heal; t += s.jitter(2 * time.Second) {
			s.at(t, s.partition)
		}
	}
	if s.cfg.Crashes {
		every := s.cfg.CrashEvery
		if every == 0 {
			every = 1500 * time.Millisecond
		}
		for t := s.jitter(time.Second); t < heal; t += s.jitter(every) {
			s.at(t, s.crashOne)
		}
	}
	if s.cfg.FullRestart {
		t := heal/3 + s.jitter(heal/3)
		s.at(t, s.fullRestart)
	}
	if s.cfg.MajorityCrash {
		every := s.cfg.MajorityCrashEvery
		if every == 0 {
			every = 3 * time.Second
		}
		for t := s.jitter(2 * time.Second); t < heal; t += s.jitter(every) {
			s.at(t, s.crashMajority)
		}
	}
	if s.cfg.Reconfig && !s.cfg.Aimed && !s.cfg.DiskLoss { // both make changes of their own
		for t := s.jitter(800 * time.Millisecond); t < heal; t += s.jitter(1200 * time.Millisecond) {
			s.at(t, s.reconfigure)
		}
	}
	if s.cfg.Aimed {
		s.scheduleAimed()
	}
	if s.cfg.Reconfig && s.cfg.DiskLoss {
		s.scheduleDiskLoss(heal)
	}
	if s.cfg.Wipes {
		s.scheduleWipes(heal)
	}
	// Gossip runs all along, faults or not.
	if s.cfg.Reconfig {
		var tick func()
		tick = func() {
			if a := s.randomUp(nil); a != nil {
				if b := s.randomUp(a); b != nil {
					s.gossip(a, b)
				}
			}
			s.after(s.jitter(50*time.Millisecond), tick)
		}
		s.after(s.jitter(50*time.Millisecond), tick)
	}
}

func (s *sim) jitter(mean time.Duration) time.Duration {
	return mean/2 + time.Duration(s.rand.Int63n(int64(mean)))
}

// partition cuts the network for a while: symmetric groups, or one-way
// cuts from some nodes to others.
func (s *sim) partition() {
	if s.healed {
		return
	}
	n := len(s.nodes)
	perm := s.rand.Perm(n)
	split := 1 + s.rand.Intn(n-1)
	a, b := perm[:split], perm[split:]
	oneWay := s.cfg.OneWay && s.rand.Intn(3) == 0
	var cuts [][2]int
	for _, i := range a {
		for _, j := range b {
			cuts = append(cuts, [2]int{i, j})
			if !oneWay {
				cuts = append(cuts, [2]int{j, i})
			}
		}
	}
	if oneWay {
		s.stats.OneWayCuts++
	} else {
		s.stats.Partitions++
	}
	for _, c := range cuts {
		s.cut[c] = true
	}
	s.tracef("partition %v | %v (one-way %v)", s.names(a), s.names(b), oneWay)
	s.after(s.jitter(1500*time.Millisecond), func() {
		for _, c := range cuts {
			delete(s.cut, c)
		}
		s.tracef("partition %v | %v healed", s.names(a), s.names(b))
	})
}

func (s *sim) names(idx []int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, string(s.nodes[i].id))
	}
	return strings.Join(parts, ",")
}

// crashOne crashes a random node and restarts it later. A voter is crashed
// only while a majority of voters stays up and live: the state of a
// majority is what survives; losing it is the full restart, run apart.
func (s *sim) crashOne() {
	if s.healed {
		return
	}
	n := s.nodes[s.rand.Intn(len(s.nodes))]
	if !n.up {
		return
	}
	if !s.mayCrash(n) {
		return
	}
	s.crash(n)
	s.after(s.jitter(time.Second)/4+time.Duration(s.rand.Int63n(int64(time.Second))), func() {
		if !n.up && !s.ended {
			s.start(n)
		}
	})
}

// mayCrash reports whether crashing n leaves a majority of the newest
// configuration's voters, and while it is pending of those before it, up
// and live (the voters before it may still be the only majority holding some
// keys).
func (s *sim) mayCrash(n *simNode) bool {
	sets := []Membership{s.m}
	if s.m.Pending {
		sets = append(sets, Membership{ID: s.m.ID, Voters: s.m.Prev})
	}
	for _, m := range sets {
		if !m.IsVoter(n.id) {
			continue
		}
		notLive := 0
		for _, id := range m.Voters {
			if v := s.node(id); !liveAcceptor(v) || !v.node.acc.Membership().IsVoter(v.id) {
				notLive++
			}
		}
		if notLive+1 > len(m.Voters)-m.Majority() {
			return false
		}
	}
	return true
}

// countForgotten adds the registers n's acceptor dropped, and the keys its
// sweeps wrote back, to the run's statistics (at its crash, or the end of
// the run).
func (s *sim) countForgotten(n *simNode) {
	if n.node != nil && n.node.acc != nil {
		s.stats.Forgotten += int(n.node.acc.Stats().Dropped)
		s.stats.WrittenBack += int(n.node.prop.Stats().WriteBacks)
		s.stats.FreedExpired += int(n.node.prop.Stats().FreedExpired)
	}
}

// maybeMajorityLost records, when crashing voter n leaves a majority of the
// newest configuration's voters without their state (down, or not yet
// caught up), that registers may from now on hold older values than a
// majority had chosen (quorumtest.History.MajorityLoss). Once per loss:
// until a majority holds state again.
func (s *sim) maybeMajorityLost(n *simNode) {
	// The voters of the newest configuration, and while its change is
	// pending those before it too: a majority of either holds values the
	// others may not (a pending change has not moved them yet).
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
			v := s.node(id)
			if v != n && (!v.up || v.node.acc == nil || v.node.acc.State() != Live) {
				lost++
			}
		}
		if majority := len(voters)/2 + 1; lost >= majority && lost-1 < majority {
			s.tracef("a majority of voters %v has lost its state", voters)
			s.check.history().MajorityLoss(int64(s.now))
			s.check.losses = append(s.check.losses, s.now)
			return
		}
	}
}

// crashMajority crashes a majority of the newest configuration's voters at
// once (the state of a majority is lost) and starts them again soon after;
// every other node, lease holders among them, runs on.
func (s *sim) crashMajority() {
	if s.healed {
		return
	}
	voters := slices.Clone(s.m.Voters)
	s.rand.Shuffle(len(voters), func(i, j int) { voters[i], voters[j] = voters[j], voters[i] })
	s.tracef("a majority of voters crashes: %v", voters[:s.m.Majority()])
	for _, id := range voters[:s.m.Majority()] {
		n := s.node(id)
		s.crash(n)
		s.after(20*time.Millisecond+time.Duration(s.rand.Int63n(int64(300*time.Millisecond))), func() {
			if !n.up && !s.ended {
				s.start(n)
			}
		})
	}
}

// fullRestart crashes every node at once and starts them again: every
// register is lost.
func (s *sim) fullRestart() {
	if s.healed {
		return
	}
	s.stats.FullRestarts++
	s.tracef("full restart")
	for _, n := range s.nodes {
		s.crash(n)
	}
	s.check.era++
	if !s.cfg.Disks {
		// Every node starts again from the founding voters: what changed
		// since lived in memory only. (With disks, configurations
		// survive: no id may name two of them, across the restart too.)
		s.resetConfigs()
	}
	if s.cfg.WallBack {
		s.wallBack += int64(time.Hour / time.Microsecond)
	}
	s.after(50*time.Millisecond+time.Duration(s.rand.Int63n(int64(200*time.Millisecond))), func() {
		for _, n := range s.nodes {
			if !n.up {
				s.start(n)
			}
		}
	})
}

// heal ends every fault: the network is whole, nothing is lost or late, and
// every node is up. From here on every waiting client must be served.
func (s *sim) heal() {
	s.healed = true
	s.cut = make(map[[2]int]bool)
	s.tracef("faults healed")
	for _, n := range s.nodes {
		if !n.up {
			s.start(n)
		}
	}
	if s.cfg.Retime {
		// The rolling restart to the new setting completes.
		for _, n := range s.nodes {
			if n.up && n.ttl != s.cfg.RetimeTTL {
				s.crash(n)
				s.start(n)
			}
		}
	}
	s.check.healedAt = s.now
}
