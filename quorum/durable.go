package quorum

import (
	"fmt"
	"slices"
	"time"
)

// Durable state (design.md R49–R57)
//
// An acceptor may keep a little state on disk: what is rare to change and
// expensive to lose. Lock registers stay in memory. What the disk holds, and
// what each part buys:
//
//   - Voted, set before the acceptor's first accept: an acceptor that has
//     never voted protects nothing, so it votes at once when it starts (a
//     brand-new mesh needs no quarantine), while one that has voted waits
//     out its quarantine as before;
//   - Horizon, the longest lease it may have accepted, saved before it
//     accepts under a longer MaxTTL: its quarantine after a crash covers its
//     earlier life whatever today's settings say;
//   - Reserved, an epoch mark: before accepting an epoch above it, the
//     acceptor saves a mark a block higher (one save per block of tokens, not
//     per grant). Every epoch it ever accepted is at most its mark, and it
//     starts again with the mark as its epoch floor, so tokens after any
//     restart exceed every earlier one without a word about wall clocks:
//     every majority meets the majority that accepted an earlier token;
//   - Ballots, a ballot-counter mark kept the same way: every ballot the
//     acceptor promised or accepted has a lower counter, and it starts again
//     promised to the mark. A write after a restart is then at a higher
//     ballot than every write before it, even where voters that restarted
//     together went live without the registers of one that did not: a
//     stale value left at that one can never again be the highest a
//     majority reports;
//   - the voter configuration it adopted, and its own promise and vote on
//     the configuration register (ConfigKey: promise and accepted value;
//     never a copy learned in a catch-up), saved before it acts on them.
//     It never returns to a configuration older than the newest it
//     adopted, nor forgets a configuration it accepted, so a configuration
//     that was replaced cannot come back by restarts (design.md R53), and
//     voters that restarted together can tell whether they are a majority
//     of the newest configuration: after a full restart a majority of
//     voters, not every one, brings the mesh back (R54);
//   - Quiet, the incarnations of its lives since the last one that voted,
//     each saved as that life starts: a voter that went live counting one
//     of them as restarted with it (LostWith) may count the later ones as
//     well, for none of them voted in between (CatchUpRequest.Quiet).
//
// An acceptor saves (Disk.Save, which returns once the state is durable)
// before it answers the message that needs it; if the save fails it stops
// voting for good, since it can no longer keep its word.

// Durable is what an acceptor keeps on disk.
type Durable struct {
	// Voted: the acceptor has accepted a value, or may have.
	Voted bool
	// Horizon is the longest lease the acceptor may have accepted.
	Horizon time.Duration
	// Reserved is at least every epoch the acceptor has accepted; Ballots
	// is above the counter of every ballot it promised or accepted.
	Reserved uint64
	Ballots  uint64
	// Membership is the newest configuration the acceptor adopted (zero ID
	// before any).
	Membership Membership
	// Config is the acceptor's own promise and vote on ConfigKey (never a
	// copy: the register in memory may hold one, see ownNewerConfig).
	Config DurableRegister
	// Quiet are the incarnations of the acceptor's lives since the last
	// one that went live, oldest first, each saved as it started from
	// this disk after a vote (at most MaxQuietLives of them, the newest):
	// none of them has voted. Going live empties it, before the first
	// vote. (Empty, it is left out of a saved file, which an older
	// release reads as before.)
	Quiet []uint64 `json:",omitempty"`
}

// MaxQuietLives bounds Durable.Quiet and CatchUpRequest.Quiet: a voter in a crash loop keeps its
// newest lives only. One dropped can no longer be matched by a peer that
// counted it (CatchUpRequest.Quiet), which costs that peer's word, never
// safety.
const MaxQuietLives = 8

// DurableRegister is the part of a register that a disk keeps.
type DurableRegister struct {
	Promise  Ballot
	Accepted Ballot
	Value    Value
}

// clone copies d, so that the acceptor's copy and the one being saved never
// share slices.
func (d Durable) clone() Durable {
	d.Membership = d.Membership.clone()
	d.Quiet = slices.Clone(d.Quiet)
	if c := d.Config.Value.Config; c != nil {
		cc := c.clone()
		d.Config.Value.Config = &cc
	}
	return d
}

// Validate checks a loaded state for what no acceptor could have saved.
func (d *Durable) Validate() error {
	switch {
	case d.Horizon < 0:
		return fmt.Errorf("%w: durable state with a negative lease horizon %v", ErrBadConfig, d.Horizon)
	case len(d.Quiet) > MaxQuietLives:
		return fmt.Errorf("%w: durable state with %d quiet lives, at most %d", ErrBadConfig, len(d.Quiet), MaxQuietLives)
	case d.Membership.ID != 0:
		if err := d.Membership.Validate(); err != nil {
			return fmt.Errorf("durable state: %w", err)
		}
	}
	if c := d.Config.Value.Config; c != nil {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("durable state: configuration register: %w", err)
		}
	}
	return nil
}

// Disk keeps an acceptor's Durable state.
type Disk interface {
	// Save replaces the saved state with d and returns once it is durable
	// (written and synced). d is the caller's until Save returns.
	Save(d *Durable) error
}

// epochReserve is how far above an accepted epoch the epoch mark is set:
// epochs count wall-clock microseconds (Proposer.nextEpoch), so one save
// covers about 67 seconds of grants. A save is an fsync on the accept's
// path: a block of a second (1<<20) put one in every voter's path once a
// second under load. After a restart, tokens start at the mark: at most
// this far above the last one.
const epochReserve = 1 << 26

// ballotReserve is how far above a promised or accepted ballot counter the
// ballot mark is set: counters grow by one per round.
const ballotReserve = 1 << 20

// persist saves the durable state as edit changes it, and reports whether it
// is saved; the acceptor's copy changes only then. Without a disk there is
// nothing to save. A failed save silences the acceptor for good.
func (a *Acceptor) persist(edit func(d *Durable)) bool {
	if a.disk == nil {
		return true
	}
	if a.diskErr != nil {
		return false
	}
	d := a.dur.clone()
	edit(&d)
	if err := a.disk.Save(&d); err != nil {
		a.diskErr = err
		return false
	}
	a.dur = d
	a.stats.Saves++
	return true
}

// persistPromise saves, before the acceptor promises a ballot of this
// counter, a ballot mark above it, if the saved one is not.
func (a *Acceptor) persistPromise(counter uint64) bool {
	if a.disk == nil || counter < a.dur.Ballots {
		return a.diskErr == nil
	}
	return a.persist(func(d *Durable) { d.Ballots = counter + ballotReserve })
}

// persistAccept saves what an accept needs on disk: that this acceptor
// voted, under which horizon, a mark at or above the epoch, and one above
// the ballot's counter. Nothing is saved when all stand already: the common
// case.
func (a *Acceptor) persistAccept(epoch, counter uint64) bool {
	if a.disk == nil || (a.dur.Voted && a.dur.Horizon >= a.cfg.MaxTTL && epoch <= a.dur.Reserved && counter < a.dur.Ballots) {
		return a.diskErr == nil
	}
	return a.persist(func(d *Durable) {
		d.Voted = true
		d.Horizon = max(d.Horizon, a.cfg.MaxTTL)
		if epoch > d.Reserved {
			d.Reserved = epoch + epochReserve
		}
		if counter >= d.Ballots {
			d.Ballots = counter + ballotReserve
		}
	})
}

// persistConfigRegister saves the acceptor's own promise and vote on
// ConfigKey as they are about to be: a promise or an accept is kept before
// it is answered (a prepare keeps the disk's vote with its new promise, not
// the register's value, which may be a copy).
func (a *Acceptor) persistConfigRegister(promise, accepted Ballot, v Value) bool {
	return a.persist(func(d *Durable) {
		d.Config.Promise, d.Config.Accepted = promise, accepted
		d.Config.Value = v
		if v.Config != nil {
			c := v.Config.clone()
			d.Config.Value.Config = &c
		}
	})
}

// DiskError is the error that made the acceptor stop voting, if a save
// failed.
func (a *Acceptor) DiskError() error { return a.diskErr }

// Durable reports whether the acceptor keeps its state on a disk.
func (a *Acceptor) Durable() bool { return a.disk != nil }
