package quorum

import (
	"fmt"
	"time"
)

// AcceptorConfig configures an Acceptor.
type AcceptorConfig struct {
	// ID is this node's name. Required.
	ID NodeID
	// Incarnation identifies this start of the node; a new value on every
	// start (the mesh uses the wall clock in nanoseconds). Required, non-zero.
	Incarnation uint64
	// Membership is the voter configuration. ID must be one of its voters.
	Membership Membership
	// Clock is this node's clock. Required.
	Clock Clock
	// MaxTTL is the longest exclusion (Value.TTL) the acceptor agrees to
	// hold. Required, > 0.
	MaxTTL time.Duration
	// Quarantine is how long after its start the acceptor refuses to vote,
	// measured on its own clock. It must cover every lease it may have
	// accepted before it lost its memory: at least MaxTTL, which is at
	// least D_P/γ for the longest lease (see lease.Timing.Quarantine).
	Quarantine time.Duration
	// CatchUpBuckets is how many pieces a catch-up transfer is cut into, so
	// that no single message carries the whole key space. Zero means 16.
	CatchUpBuckets uint32
	// RetryInterval is how long the acceptor waits for a catch-up answer
	// before asking again. Zero means 100ms.
	RetryInterval time.Duration
	// HandoffGrace is how long a waiter told that a key is free has to take
	// it before the next waiter in line is told. Zero means 100ms.
	HandoffGrace time.Duration
	// Drift is ρ, the largest clock-rate error of any node (0.01 = 1%),
	// in [0, 0.5). A timer the acceptor learns from another voter's clock
	// (catch-up) is stretched by (1+ρ)/(1−ρ) to outlast it on this one.
	Drift float64
	// MaxRegisters is how many registers the acceptor keeps before it
	// drops those idle longest that nothing depends on (see
	// acceptor_registers.go). Zero means 65536.
	MaxRegisters int
	// RegisterIdle is how long a register that nothing depends on is kept
	// unused before it is dropped. Zero means 10×MaxTTL.
	RegisterIdle time.Duration
	// Fresh starts the acceptor live, without quarantine or catch-up: only
	// for a node that has just been added to the voters and never voted
	// before (a removed voter's name never returns). An empty acceptor is a
	// correct one; what is dangerous is one that forgot what it did.
	Fresh bool
	// Disk, when set, keeps the acceptor's Durable state (see durable.go),
	// and Durable is the state it saved in its earlier life: nil when it has
	// never saved any (a new disk). Without a disk the acceptor keeps
	// everything in memory, and refuses to vote on voter changes.
	Disk    Disk
	Durable *Durable
	// NewMesh is the operator's word that the mesh is brand-new: no voter
	// has ever voted. It matters only on a new disk (Disk set, Durable
	// nil), which by itself proves nothing, since a wiped disk looks the
	// same: the acceptor then votes at once if a majority of the voters,
	// itself included, say they never voted and none says it has.
	// Without it, it needs the word of so many others that they meet
	// every majority (see maybeGoLive). A voter that hears that some voter
	// voted ignores it (Recovery.NewMeshRefused).
	NewMesh bool

	// breakRules, set by tests only, breaks rules of the protocol on
	// purpose (acceptorRules).
	breakRules func(*acceptorRules)
}

func (c *AcceptorConfig) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: acceptor has no ID", ErrBadConfig)
	case c.Incarnation == 0:
		return fmt.Errorf("%w: acceptor %s has incarnation 0", ErrBadConfig, c.ID)
	case c.Clock == nil:
		return fmt.Errorf("%w: acceptor %s has no clock", ErrBadConfig, c.ID)
	case c.MaxTTL <= 0:
		return fmt.Errorf("%w: acceptor %s: MaxTTL %v must be positive", ErrBadConfig, c.ID, c.MaxTTL)
	case c.Drift < 0 || c.Drift >= 0.5 || c.Drift != c.Drift:
		return fmt.Errorf("%w: acceptor %s: drift %v outside [0, 0.5)", ErrBadConfig, c.ID, c.Drift)
	case c.Quarantine < c.MaxTTL:
		return fmt.Errorf("%w: acceptor %s: quarantine %v is shorter than the longest lease %v it may have accepted",
			ErrBadConfig, c.ID, c.Quarantine, c.MaxTTL)
	}
	if err := c.Membership.Validate(); err != nil {
		return err
	}
	if !c.Membership.IsVoter(c.ID) {
		return fmt.Errorf("%w: acceptor %s is not a voter of configuration %d", ErrBadConfig, c.ID, c.Membership.ID)
	}
	if d := c.Durable; d != nil {
		if c.Disk == nil {
			return fmt.Errorf("%w: acceptor %s has a saved state but no disk", ErrBadConfig, c.ID)
		}
		if err := d.Validate(); err != nil {
			return err
		}
		if d.Membership.ID != 0 && d.Membership.Cluster() != c.Membership.Cluster() {
			return fmt.Errorf("%w: acceptor %s saved a configuration of another mesh (%#x, not %#x)",
				ErrBadConfig, c.ID, d.Membership.Cluster(), c.Membership.Cluster())
		}
	}
	return nil
}
