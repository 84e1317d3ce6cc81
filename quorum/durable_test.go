package quorum

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Tests of what an acceptor keeps on disk (durable.go), one acceptor at a
// time on a fake clock and a disk in memory.

// memDisk is a Disk in memory; fail makes every save fail.
type memDisk struct {
	saved *Durable
	saves int
	fail  error
}

func (d *memDisk) Save(st *Durable) error {
	if d.fail != nil {
		return d.fail
	}
	c := st.clone()
	d.saved = &c
	d.saves++
	return nil
}

// newDiskFixture returns acceptor "a" of {a, b, c} on disk d, started from
// what d holds.
func newDiskFixture(t testing.TB, d *memDisk, edit ...func(*AcceptorConfig)) *accFixture {
	t.Helper()
	m := NewMembership(ClusterID([]NodeID{"a", "b", "c"}), "a", "b", "c")
	clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
	cfg := newAccConfig("a", m, clock)
	cfg.Disk = d
	if d.saved != nil {
		st := d.saved.clone()
		cfg.Durable = &st
	}
	for _, e := range edit {
		e(&cfg)
	}
	a, err := NewAcceptor(cfg)
	if err != nil {
		t.Fatalf("NewAcceptor: %v", err)
	}
	return &accFixture{t: t, id: "a", a: a, clock: clock, m: m}
}

// answerProbe answers the acceptor's catch-up request to peer (the first
// bucket's, which every start asks for) as a voter with a disk that never
// voted (fresh) or one that did.
func answerProbe(f *accFixture, peer NodeID, fresh bool) {
	f.a.Ready() // the requests, taken as sent
	f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: peer, To: "a", Inc: 1,
		Status: StatusRecovering, Fresh: fresh})
}

// newMesh answers the probe of a voter on a new disk as both other voters
// would in a brand-new mesh: none of them ever voted.
func newMesh(f *accFixture) {
	answerProbe(f, "b", true)
	answerProbe(f, "c", true)
}

// A voter on a new disk votes as soon as both other voters say they never
// voted either: a new mesh needs no quarantine. One other's word with its
// own is not enough, for its own empty disk is no evidence: a disk wiped
// under a voter's name is empty too.
func TestDurableNewDiskVotesWhenTheOthersNeverVoted(t *testing.T) {
	d := &memDisk{}
	f := newDiskFixture(t, d)
	if f.a.State() == Live {
		t.Fatalf("live before hearing from anyone")
	}
	answerProbe(f, "b", true)
	if f.a.State() == Live {
		t.Fatalf("live on b's word alone: a's own empty disk counted as a voter that never voted")
	}
	if rec := f.a.Recovery(); !rec.NeverVoted || !slices.Equal(rec.Waiting, []NodeID{"c"}) {
		t.Fatalf("recovery %+v; want waiting for c to say it never voted", rec)
	}
	answerProbe(f, "c", true)
	if f.a.State() != Live {
		t.Fatalf("%v after both others said they never voted; want live", f.a.State())
	}
	if d.saved == nil || d.saved.Voted || d.saved.Membership.ID != f.m.ID {
		t.Fatalf("saved %+v; want the configuration, not voted", d.saved)
	}
	mustOK(t, "prepare", f.prepare(bal(1, "p")))
	mustOK(t, "accept", f.accept(bal(1, "p"), grantTo("p", 100, bal(1, "p"))))
	if !d.saved.Voted || d.saved.Reserved < 100 || d.saved.Ballots <= 1 || d.saved.Horizon != accMaxTTL {
		t.Fatalf("after the first accept the disk holds %+v", d.saved)
	}
}

// With the operator's word that the mesh is brand-new (NewMesh), a voter
// on a new disk votes on a majority that never voted, itself included: a
// new mesh starts with a voter missing.
func TestDurableNewMeshVotesOnAMajorityWithTheOperatorsWord(t *testing.T) {
	f := newDiskFixture(t, &memDisk{}, func(c *AcceptorConfig) { c.NewMesh = true })
	answerProbe(f, "b", true)
	if f.a.State() != Live {
		t.Fatalf("%v after b said it never voted, with NewMesh; want live", f.a.State())
	}
}

// The operator's word is refused once a voter says it voted: the voter
// recovers as one that forgot, and says whose answer refused the word.
func TestDurableNewMeshRefusedOnceAVoterVoted(t *testing.T) {
	f := newDiskFixture(t, &memDisk{}, func(c *AcceptorConfig) { c.NewMesh = true })
	answerProbe(f, "c", false)
	answerProbe(f, "b", true)
	if st := f.a.State(); st != Quarantined {
		t.Fatalf("%v after c said it voted, with NewMesh; want quarantined", st)
	}
	if got := f.a.Recovery().NewMeshRefused; got != "c" {
		t.Fatalf("NewMeshRefused %q, want c", got)
	}
}

// A voter on a new disk that hears that another voter has voted is no new
// mesh's: it may have voted itself on a disk since lost, so it recovers as
// one that forgot, quarantine and all.
func TestDurableNewDiskInAMeshThatVotedQuarantines(t *testing.T) {
	f := newDiskFixture(t, &memDisk{})
	answerProbe(f, "b", false)
	if st := f.a.State(); st != Quarantined {
		t.Fatalf("%v after a peer said it voted; want quarantined", st)
	}
	f.clock.advance(accQuarantine)
	f.a.Tick()
	if st := f.a.State(); st != CatchingUp {
		t.Fatalf("%v after the quarantine; want catching up", st)
	}
}

// Restarted from a disk that says it never voted: it protects nothing, and
// votes at once. Restarted from one that says it voted: quarantined for
// the longest lease it may have accepted, its ballots and epochs above
// every one it saw.
func TestDurableRestart(t *testing.T) {
	d := &memDisk{}
	f := newDiskFixture(t, d)
	newMesh(f)
	g := newDiskFixture(t, d) // a restart before any vote
	if g.a.State() != Live {
		t.Fatalf("restart of a voter that never voted: %v, want live", g.a.State())
	}
	mustOK(t, "prepare", g.prepare(bal(5, "p")))
	mustOK(t, "accept", g.accept(bal(5, "p"), grantTo("p", 700, bal(5, "p"))))

	h := newDiskFixture(t, d) // a restart after it voted
	if h.a.State() != Quarantined || h.a.Recovery().LiveFrom-h.clock.now < accMaxTTL {
		t.Fatalf("restart after a vote: %v, live from %v; want quarantined a MaxTTL", h.a.State(), h.a.Recovery().LiveFrom-h.clock.now)
	}
	h.clock.advance(accQuarantine)
	h.a.Tick()
	doneFrom(h, "b")
	doneFrom(h, "c")
	if h.a.State() != Live {
		t.Fatalf("%v after quarantine and catch-up", h.a.State())
	}
	r := h.peek()
	if !bal(5, "p").Less(r.Promised) || r.MaxEpoch < 700 {
		t.Fatalf("after the restart: promise floor %v, epoch floor %d; want above ballot 5 and epoch 700", r.Promised, r.MaxEpoch)
	}
}

// Two voters that restarted from their disks vote again on each other's
// word, without the third: a majority of the configuration answered, and
// neither accepted a newer configuration. If one had, they wait.
func TestDurableFullRestartNeedsAMajority(t *testing.T) {
	for _, newer := range []uint64{0, 2} {
		d := &memDisk{saved: &Durable{Voted: true, Horizon: accMaxTTL, Reserved: 500, Ballots: 9,
			Membership: NewMembership(ClusterID([]NodeID{"a", "b", "c"}), "a", "b", "c")}}
		f := newDiskFixture(t, d)
		f.clock.advance(accQuarantine)
		f.a.Tick()
		for _, req := range f.a.Ready().CatchUps {
			if req.To == "b" {
				f.a.HandleCatchUpResponse(&CatchUpResponse{Config: f.m.ID, From: "b", To: "a", Inc: 1,
					Status: StatusRecovering, Durable: true, EpochFloor: 900, NewerConfig: newer})
			}
		}
		switch {
		case newer == 0 && f.a.State() != Live:
			t.Fatalf("a and b restarted from disk: a is %v, want live", f.a.State())
		case newer != 0 && f.a.State() == Live:
			t.Fatalf("b accepted configuration version %d, yet a went live on version 1", newer)
		case newer == 0 && (f.a.FloorOnly() || f.peek().MaxEpoch < 900):
			t.Fatalf("floor only %v, epoch floor %d: want b's mark 900, not the wall clock", f.a.FloorOnly(), f.peek().MaxEpoch)
		}
	}
}

// Without a disk an acceptor refuses to vote on a voter change: it would
// forget the configuration it accepted.
func TestDurableVoterChangeNeedsADisk(t *testing.T) {
	f := newLiveAcceptor(t)
	next := f.m.Next([]NodeID{"a", "b", "c", "d"}, true, 0)
	op := Op{Kind: OpAccept, Key: ConfigKey, Ballot: bal(1, "p"), Inc: accInc, Value: Value{Config: &next}}
	mustRefuse(t, "a configuration accepted without a disk", f.one("p", op), ReasonNoDisk)
}

// The configuration register and the adopted configuration are on disk
// before the acceptor answers; a restart comes back with them.
func TestDurableKeepsTheConfiguration(t *testing.T) {
	d := &memDisk{}
	f := newDiskFixture(t, d)
	newMesh(f)
	next := f.m.Next([]NodeID{"a", "b", "c", "d"}, true, 0)
	mustOK(t, "prepare", f.one("p", Op{Kind: OpPrepare, Key: ConfigKey, Ballot: bal(3, "p")}))
	if d.saved.Config.Promise != bal(3, "p") {
		t.Fatalf("promise on the configuration register not saved: %+v", d.saved.Config)
	}
	mustOK(t, "accept", f.one("p", Op{Kind: OpAccept, Key: ConfigKey, Ballot: bal(3, "p"), Inc: accInc, Value: Value{Config: &next}}))
	if c := d.saved.Config.Value.Config; c == nil || c.ID != next.ID {
		t.Fatalf("accepted configuration not saved: %+v", d.saved.Config)
	}
	g := newDiskFixture(t, d)
	if got := g.a.newerConfigAccepted(); got != next.Version() {
		t.Fatalf("after a restart the register holds version %d, want %d", got, next.Version())
	}
	if !g.a.Adopt(next) || d.saved.Membership.ID != next.ID {
		t.Fatalf("adopted configuration not saved: %+v", d.saved.Membership)
	}
	h := newDiskFixture(t, d)
	if h.a.Membership().ID != next.ID {
		t.Fatalf("restarted on configuration %d, want the adopted %d", h.a.Membership().ID, next.ID)
	}
}

// A save that fails stops the acceptor voting, for good: it cannot keep
// its word.
func TestDurableFailedSaveStopsVoting(t *testing.T) {
	d := &memDisk{}
	f := newDiskFixture(t, d)
	newMesh(f)
	mustOK(t, "prepare", f.prepare(bal(1, "p"))) // saves a ballot mark
	d.fail = errors.New("disk full")
	r := f.accept(bal(1, "p"), grantTo("p", 100, bal(1, "p"))) // must save that it voted
	mustRefuse(t, "accept whose save failed", r, ReasonNoVote)
	if f.a.DiskError() == nil {
		t.Fatalf("no disk error reported")
	}
	d.fail = nil
	if resp := f.do("p", Op{Kind: OpPrepare, Key: "k2", Ballot: bal(2, "p")}); resp.Status != StatusRecovering {
		t.Fatalf("after a failed save the acceptor answers %v, want it to vote no more", resp.Status)
	}
}

// Marks are saved once per block: the first grant saves the ballot mark
// (its prepare) and that the acceptor voted with an epoch mark (its
// accept); the next thousand grants, with rising epochs and ballots, save
// nothing.
func TestDurableSavesOncePerBlock(t *testing.T) {
	d := &memDisk{}
	f := newDiskFixture(t, d)
	newMesh(f)
	grant := func(i uint64) {
		b := bal(i, "p")
		mustOK(t, "prepare", f.prepare(b))
		mustOK(t, "accept", f.accept(b, grantTo("p", testWallBaseEpoch+i, b)))
	}
	before := d.saves
	grant(1)
	if n := d.saves - before; n != 2 {
		t.Fatalf("%d saves for the first grant, want 2", n)
	}
	before = d.saves
	for i := uint64(2); i <= 1000; i++ {
		grant(i)
	}
	if n := d.saves - before; n != 0 {
		t.Fatalf("%d saves for the next 999 grants, want none", n)
	}
}

// testWallBaseEpoch is an epoch as the wall-clock floor makes them.
const testWallBaseEpoch = uint64(testWallBase)

// A full restart of both voters of a change's configuration (a pending
// [a b] from [a]), after each accepted the change's last write (the same
// configuration, at two ballots of its proposer's retries) and before
// either adopted it. b hears a say it is recovering and concludes the full
// restart first; a never hears b say so, only b's registers once b votes.
// a must conclude the restart too, on b's word that it went live on a's
// (LostWith): nothing else lets a vote (the newer configuration may have
// been chosen, and the only voter before the change is a itself), and
// without a the configuration has no majority (soak seed 782120 with 3
// voters: the mesh never recovered). With the rule broken a waits for good.
//
// A full restart during a pending change now also counts the voters before
// it (TestFullRestartDuringAPendingChangeCountsThePreviousVoters), and a alone
// is a majority of [a]; so the broken run also counts the new voters only,
// as before. (With both counts, a voter that heard every voter always has
// a way to go live: either the voters done meet every majority, or a
// majority of one of the two sets lost its registers. LostWith still
// counts in restartedMajority, which needs no answer from every voter.)
func TestDurableFullRestartConcludedOnAPeersWord(t *testing.T) {
	for _, c := range []struct {
		name   string
		broken bool
	}{{"rule", false}, {"broken", true}} {
		broken := c.broken
		old := NewMembership(ClusterID([]NodeID{"a"}), "a")
		m := old.Next([]NodeID{"a", "b"}, true, 0)
		last := m.Next([]NodeID{"a", "b"}, false, 0)
		clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
		start := func(id NodeID, inc uint64, accepted Ballot) *Acceptor {
			l := last.clone()
			st := Durable{Voted: true, Horizon: accMaxTTL, Reserved: 500, Ballots: 90, Membership: m.clone(),
				Config: DurableRegister{Promise: accepted, Accepted: accepted, Value: Value{Config: &l}}}
			cfg := newAccConfig(id, m, clock)
			cfg.Incarnation, cfg.Disk, cfg.Durable = inc, &memDisk{saved: &st}, &st
			a, err := NewAcceptor(cfg)
			if err != nil {
				t.Fatalf("NewAcceptor(%s): %v", id, err)
			}
			if broken {
				a.breakWith(ignoreLostWith, newVotersOnly)
			}
			return a
		}
		a := start("a", 21, Ballot{Counter: 43, Incarnation: 6, Node: "p"})
		b := start("b", 22, Ballot{Counter: 41, Incarnation: 6, Node: "p"})
		clock.advance(accQuarantine)
		a.Tick()
		b.Tick()
		// b's questions reach a; a's are lost.
		for _, req := range b.Ready().CatchUps {
			b.HandleCatchUpResponse(a.HandleCatchUp(&req))
		}
		a.Ready()
		if b.State() != Live || !b.FloorOnly() {
			t.Fatalf("b, every voter recovering: %v (floor only %v), want live on the floor", b.State(), b.FloorOnly())
		}
		for i := 0; i < 10 && a.State() != Live; i++ {
			clock.advance(accRetry)
			a.Tick()
			for _, req := range a.Ready().CatchUps {
				a.HandleCatchUpResponse(b.HandleCatchUp(&req))
			}
		}
		switch {
		case !broken && a.State() != Live:
			t.Errorf("%s: a is %v after b concluded the restart on its word; want live (waiting %+v)", c.name, a.State(), a.Recovery())
		case broken && a.State() == Live:
			t.Errorf("%s: with LostWith ignored a went live all the same: the scenario no longer needs the rule", c.name)
		}
	}
}

// Each life that starts from a disk after a vote saves its incarnation
// among the quiet lives before it says anything, and names the earlier
// ones in its catch-up requests; going live empties the list before the
// first vote, and a crash loop keeps the newest MaxQuietLives only.
func TestDurableQuietLives(t *testing.T) {
	m := NewMembership(ClusterID([]NodeID{"a", "b", "c"}), "a", "b", "c")
	d := &memDisk{saved: &Durable{Voted: true, Horizon: accMaxTTL, Reserved: 500, Ballots: 9, Membership: m}}
	start := func(inc uint64) (*Acceptor, *fakeClock) {
		clock := &fakeClock{now: 3 * time.Hour, wall: testWallBase}
		cfg := newAccConfig("a", m, clock)
		cfg.Incarnation, cfg.Disk = inc, d
		st := d.saved.clone()
		cfg.Durable = &st
		a, err := NewAcceptor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a, clock
	}
	for inc := uint64(11); inc <= 13; inc++ {
		start(inc) // a crash loop: each life ends before its quarantine does
	}
	if got := d.saved.Quiet; !slices.Equal(got, []uint64{11, 12, 13}) {
		t.Fatalf("quiet lives on disk after three starts: %v, want [11 12 13]", got)
	}
	a, clock := start(14)
	clock.advance(accQuarantine)
	a.Tick()
	var quiet []uint64
	for _, req := range a.Ready().CatchUps {
		quiet = req.Quiet
	}
	if !slices.Equal(quiet, []uint64{11, 12, 13}) {
		t.Fatalf("catch-up request names quiet lives %v, want [11 12 13] (its own is Inc)", quiet)
	}
	f := &accFixture{t: t, id: "a", a: a, clock: clock, m: m}
	doneFrom(f, "b")
	doneFrom(f, "c")
	if a.State() != Live || len(d.saved.Quiet) != 0 {
		t.Fatalf("after its catch-up: %v with quiet lives %v on disk; want live with none", a.State(), d.saved.Quiet)
	}
	for inc := uint64(20); inc < 20+MaxQuietLives+3; inc++ {
		start(inc)
	}
	if got := d.saved.Quiet; len(got) != MaxQuietLives || got[0] != 23 || got[len(got)-1] != 20+MaxQuietLives+2 {
		t.Fatalf("quiet lives after a crash loop of %d lives: %v, want the newest %d", MaxQuietLives+3, got, MaxQuietLives)
	}
	if err := d.saved.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := d.saved.clone()
	bad.Quiet = append(bad.Quiet, 99)
	if err := bad.Validate(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a state with %d quiet lives: %v, want ErrBadConfig", len(bad.Quiet), err)
	}
}
