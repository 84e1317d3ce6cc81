package quorum

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// A simClient is an application goroutine on a simulated node: it takes a
// few hot keys, writes to a fenced resource while it holds one, renews
// through its node, releases, reads, cancels, and sometimes stalls as if
// paused by a collector or SIGSTOP and writes late with its old token.

type clientState uint8

const (
	cIdle clientState = iota
	cAcquiring
	cHolding
	cReleasing
	cReading
)

type simClient struct {
	s     *sim
	n     *simNode
	id    int
	state clientState
	gen   uint64 // bumps cancel this client's scheduled actions

	key    string
	op     OpID
	hist   int
	wait   bool
	called time.Duration // real time the operation began

	grant   *grantRec
	stalled bool
	// lost are the grants the client was told it lost whose deadlines may
	// still run: its node's crash ends them, as it ends the one it holds.
	lost []*grantRec

	// A scripted client acts only when a test tells it to, and holds each
	// grant for hold.
	scripted bool
	holdTime time.Duration

	// The value the client's next grant carries, its update in flight
	// (sim_value_test.go), and its semaphore acquire in progress
	// (sim_semaphore_test.go).
	data      string
	updateOp  OpID
	updateInc uint64 // the node life the update runs in
	sem       *semTry
}

func (c *simClient) holder() string { return c.n.holderName() }

// later runs fn after d unless the client was reset in between.
func (c *simClient) later(d time.Duration, fn func()) {
	gen := c.gen
	c.s.after(d, func() {
		if c.gen == gen && c.n.up && !c.s.ended {
			fn()
			c.s.flush(c.n)
		}
	})
}

func (c *simClient) boot() {
	c.gen++
	c.state = cIdle
	c.grant, c.stalled = nil, false
	if !c.scripted {
		c.later(c.think(), c.act)
	}
}

func (c *simClient) think() time.Duration {
	return time.Duration(c.s.rand.ExpFloat64() * float64(30*time.Millisecond))
}

func (c *simClient) idle() {
	if c.s.cfg.Trace {
		_, _, line, _ := runtime.Caller(1)
		c.s.tracef("c%d on %s goes idle (from line %d, state %d)", c.id, c.n.id, line, c.state)
	}
	c.state = cIdle
	c.grant, c.stalled = nil, false
	if !c.scripted {
		c.later(c.think(), c.act)
	}
}

func (c *simClient) pickKey() string {
	// Skewed towards key 0: one hot key, a few warm ones.
	k := c.s.rand.Intn(c.s.cfg.Keys)
	if !c.s.cfg.Uniform && c.s.rand.Intn(2) == 0 {
		k = 0
	}
	return fmt.Sprintf("k%d", k)
}

func (c *simClient) act() {
	s := c.s
	if s.cfg.Quiet > 0 && s.now >= s.cfg.Duration-s.cfg.Quiet {
		return // the mesh comes to rest before the end (sim_observe_test.go)
	}
	if s.deaf[c.n] || s.wipe.holds(s, c) {
		// Its own requests reach its acceptor without the network: a
		// voter that must not vote asks for nothing while it is deaf.
		c.later(c.think(), c.act)
		return
	}
	if s.cfg.Semaphore > 0 {
		c.actSemaphore()
		return
	}
	key := c.pickKey()
	reads := 0.15
	if s.cfg.ReadShare > 0 {
		reads = s.cfg.ReadShare
	}
	if s.rand.Float64() < reads {
		c.read(key)
		return
	}
	wait := s.rand.Float64() < 0.6
	var budget time.Duration
	if wait {
		budget = time.Second + time.Duration(s.rand.Int63n(int64(3*time.Second)))
		if s.healed {
			budget = time.Hour
		}
	}
	id := c.acquire(key, wait, budget)
	if wait && id != 0 && !s.healed && s.rand.Float64() < 0.08 {
		c.later(time.Duration(s.rand.Int63n(int64(500*time.Millisecond))), func() {
			if c.state == cAcquiring && c.op == id {
				s.stats.Cancels++
				c.n.node.Cancel(id)
			}
		})
	}
}

// read starts a linearizable read of key.
func (c *simClient) read(key string) {
	s := c.s
	c.key, c.called = key, s.now
	id, err := c.n.node.Read(key, 0)
	if err != nil {
		s.failf("read %q: %v", key, err)
		return
	}
	c.state, c.op = cReading, id
	c.n.ops[id] = c
	c.hist = s.check.history().Call(key, c.id, qt.Input{Kind: qt.Read, Holder: c.holder()}, int64(s.now))
	s.stats.Reads++
}

// acquire starts taking key: waiting for it up to budget, or trying once.
func (c *simClient) acquire(key string, wait bool, budget time.Duration) OpID {
	s := c.s
	c.key, c.called, c.wait = key, s.now, wait
	ttl := c.n.ttl
	opts := AcquireOptions{
		TTL:        ttl,
		HolderTTL:  s.holderTTLOf(ttl),
		RenewEvery: ttl / 3,
		Notice:     min(s.cfg.Notice, ttl/5),
		Wait:       wait,
		Data:       c.nextData(key),
	}
	if wait {
		opts.Deadline = c.n.clock.Now() + budget
	}
	id, err := c.n.node.Acquire(key, opts)
	if err != nil {
		s.failf("acquire %q: %v", key, err)
		return 0
	}
	s.tracef("c%d on %s acquires %q (op %d, wait %v)", c.id, c.n.id, key, id, wait)
	c.state, c.op = cAcquiring, id
	c.n.ops[id] = c
	c.hist = s.check.history().Call(key, c.id, qt.Input{Kind: qt.Acquire, Holder: c.holder()}, int64(s.now))
	if s.healed {
		s.check.pending[c] = s.now
	}
	return id
}

// onResult takes the result of the client's operation.
func (c *simClient) onResult(res OpResult) {
	s := c.s
	if c.updating(res.ID) {
		c.onUpdate(res)
		return
	}
	s.tracef("c%d on %s: op %d on %q -> %v epoch %d holder %s/%d unknown %v q=%v b=%v", c.id, c.n.id, res.ID, res.Key, res.Outcome, res.Epoch, res.Holder, res.HolderInc, res.Unknown, res.Quorum, res.Ballot)
	out := qt.Output{Outcome: outcomeName(res.Outcome), Unknown: res.Unknown, Epoch: res.Epoch}
	switch c.state {
	case cReading:
		s.check.readDone(c, res)
		out.Held, out.Holder = res.Value.Held, holderName(res.Value.Holder, res.Value.HolderInc)
		out.AtLeast = !res.Value.Held && res.Value.Epoch != res.Epoch // the registers were dropped
		s.check.history().Retime(c.hist, int64(c.n.clock.realAt(res.RoundStarted)))
		s.check.history().Return(c.hist, out, int64(s.now))
		c.idle()
	case cAcquiring:
		if res.Outcome == Locked {
			out.Holder = holderName(res.Holder, res.HolderInc)
			s.stats.Locked++
		}
		if res.Outcome == NoQuorum {
			s.stats.NoQuorum++
		}
		if res.Unknown {
			s.stats.Unknowns++
		}
		// The operation's own outcome is definite; each epoch it proposed
		// in a round it never heard the end of is a write of unknown
		// outcome of its own.
		out.Unknown = false
		// What the acquire did, it did in its last round; earlier rounds
		// either did nothing or wrote the ghosts below.
		s.check.history().Retime(c.hist, int64(c.n.clock.realAt(res.RoundStarted)))
		s.check.history().Return(c.hist, out, int64(s.now))
		s.check.ghosts(c, res.Key, res.Attempted, res.Epoch, res.Outcome == Granted)
		s.check.acquireEnded(c, res)
		if res.Outcome != Granted {
			if c.semContinue(res) {
				return
			}
			c.idle()
			return
		}
		c.sem = nil
		c.grant = s.check.granted(c, res)
		c.state = cHolding
		c.hold()
	case cReleasing:
		out.Unknown = false
		s.check.history().Retime(c.hist, int64(c.n.clock.realAt(res.RoundStarted)))
		s.check.history().Return(c.hist, out, int64(s.now))
		s.check.releaseGhosts(c, res.Key, res, c.grant.token)
		if res.Outcome == Released && res.Epoch != c.grant.token {
			s.failf("I7: release of token %d reported releasing %d", c.grant.token, res.Epoch)
		}
		c.idle()
	}
}

// hold works under the lease: writes, maybe a stall, then a release.
func (c *simClient) hold() {
	s := c.s
	var holdFor time.Duration
	switch x := s.rand.Float64(); {
	case x < 0.6:
		holdFor = time.Duration(5+s.rand.Intn(95)) * time.Millisecond
	case x < 0.9:
		holdFor = time.Duration(100+s.rand.Intn(700)) * time.Millisecond
	default:
		holdFor = time.Second + time.Duration(s.rand.Int63n(int64(2*time.Second)))
	}
	if s.healed {
		holdFor = min(holdFor, 50*time.Millisecond)
	}
	if c.scripted {
		holdFor = c.holdTime
	}
	g := c.grant
	var write func()
	write = func() {
		if c.state != cHolding || c.grant != g || c.stalled {
			return
		}
		s.check.write(c, g, false)
		c.later(time.Duration(10+s.rand.Intn(60))*time.Millisecond, write)
	}
	c.later(time.Millisecond, write)
	c.maybeUpdate(g, holdFor)
	if !s.healed && !c.scripted && s.rand.Float64() < 0.05 {
		stallAt := time.Duration(s.rand.Int63n(int64(holdFor) + 1))
		stall := 500*time.Millisecond + time.Duration(s.rand.Int63n(int64(2*time.Second)))
		c.later(stallAt, func() {
			if c.state != cHolding || c.grant != g {
				return
			}
			c.stalled = true
			c.later(stall, func() {
				// Back from the pause, the client writes once with the
				// token it had, before looking at anything.
				s.stats.LateWrites++
				s.check.write(c, g, true)
				c.stalled = false
				if g.lost {
					c.idle()
					return
				}
				c.release()
			})
		})
	}
	c.later(holdFor, func() {
		if c.state == cHolding && c.grant == g && !c.stalled {
			c.release()
		}
	})
}

func (c *simClient) release() {
	s := c.s
	g := c.grant
	id, err := c.n.node.Release(g.key, g.token, 0)
	if errors.Is(err, ErrNotHeld) {
		// Lost meanwhile (the notice came while the client was busy).
		c.idle()
		return
	}
	if err != nil {
		s.failf("release: %v", err)
		return
	}
	s.check.released(g)
	s.tracef("c%d on %s releases %q token %d (op %d)", c.id, c.n.id, g.key, g.token, id)
	c.state, c.op = cReleasing, id
	c.n.ops[id] = c
	c.called = s.now
	c.hist = s.check.history().Call(g.key, c.id, qt.Input{Kind: qt.Release, Holder: c.holder(), Epoch: g.token}, int64(s.now))
	s.stats.Releases++
}

// onLease takes a lease event of the client's grant.
func (c *simClient) onLease(ev LeaseEvent) {
	if ev.Lost {
		c.s.stats.Lost++
		if !c.stalled && c.state == cHolding {
			c.lost = slices.DeleteFunc(c.lost, func(g *grantRec) bool { return g.closed || g.end <= c.s.now })
			c.lost = append(c.lost, c.grant)
			c.idle()
		}
	} else {
		c.s.stats.Renewals++
	}
}

// crashed: the node died under the client.
func (c *simClient) crashed() {
	s := c.s
	switch c.state {
	case cAcquiring, cReleasing, cReading:
		// The operation never returns; its effects, if any, are its
		// writes of unknown outcome.
		s.check.history().Return(c.hist, qt.Output{Outcome: qt.NoQuorum}, qt.Infinity)
		if x := c.n.node.prop.ops[c.op]; x != nil {
			switch c.state {
			case cAcquiring:
				s.check.ghosts(c, c.key, x.attempted, 0, false)
			case cReleasing:
				s.check.releaseGhosts(c, c.key, OpResult{Attempted: x.attempted}, 0)
			}
		}
		delete(s.check.pending, c) // a crash is not a liveness failure
	}
	if c.grant != nil {
		s.check.ended(c.grant, s.now)
	}
	// A grant it was told it lost ends too: a holder that crashed acts no
	// more, whether or not it was told first. (Its interval otherwise runs
	// to its deadline: the notice comes before it, and no one may be
	// granted the key until then.)
	for _, g := range c.lost {
		if !g.closed && g.end > s.now {
			s.check.ended(g, s.now)
		}
	}
	c.lost = nil
	c.gen++
	c.state = cIdle
	c.grant, c.stalled = nil, false
}

func outcomeName(o Outcome) string {
	switch o {
	case Granted:
		return qt.Granted
	case Locked:
		return qt.Locked
	case NoQuorum:
		return qt.NoQuorum
	case Released:
		return qt.Released
	case NotHeld:
		return qt.NotHeld
	case ReadDone:
		return qt.ReadDone
	case Cancelled:
		return qt.Cancelled
	}
	return o.String()
}

func holderName(id NodeID, inc uint64) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d", id, inc)
}
