package mesh

import (
	"errors"
	"fmt"
)

var (
	// ErrLocked: the key is held by another lease (TryAcquire). The error
	// is a *LockedError naming the holder.
	ErrLocked = errors.New("mesh: lock held")
	// ErrNoQuorum: no majority of the voters answered in time. The lock
	// may or may not be free; nothing was granted to this caller.
	ErrNoQuorum = errors.New("mesh: no quorum")
	// ErrLeaseLost: the lease ended without a release: renewal failed, or
	// the grant was taken over after it expired.
	ErrLeaseLost = errors.New("mesh: lease lost")
	// ErrReleased: the lease was released (Lease.Err after Release).
	ErrReleased = errors.New("mesh: lease released")
	// ErrClosed: the mesh was shut down, or left.
	ErrClosed = errors.New("mesh: closed")
	// ErrInvalidKey: a key that is empty, too long or not UTF-8.
	ErrInvalidKey = errors.New("mesh: invalid key")
	// ErrInvalidConfig: a Config that Validate refuses.
	ErrInvalidConfig = errors.New("mesh: invalid config")
	// ErrInvalidOption: an acquire option out of range.
	ErrInvalidOption = errors.New("mesh: invalid option")
	// ErrNoVoters: the voter configuration has not formed yet
	// (BootstrapExpect still waiting for voters).
	ErrNoVoters = errors.New("mesh: no voter configuration yet")
	// ErrAlreadyHeld: an acquire of a key this node already holds through
	// another Lease (see Acquire). The error is a *LockedError naming this
	// node; errors.Is(err, ErrLocked) is true as well.
	ErrAlreadyHeld = errors.New("mesh: lock already held by this node")
	// ErrNotReady: WaitReady gave up (its ctx ended) before the node was
	// ready; the error says what the node was waiting for.
	ErrNotReady = errors.New("mesh: not ready")
	// ErrGossipNotEncrypted: a gossip key operation on a node started
	// without Config.GossipKey.
	ErrGossipNotEncrypted = errors.New("mesh: gossip is not encrypted")
)

// LockedError says who holds a key. errors.Is(err, ErrLocked) is true,
// and errors.Is(err, ErrAlreadyHeld) too when ThisNode is set.
type LockedError struct {
	Key string
	// Holder is the node holding the key, and Token its fencing token;
	// both empty when the key was being taken by another node that had not
	// finished when the try gave up.
	Holder string
	Token  uint64
	// ThisNode: the holder is this node, through another Lease (an
	// acquire of a key the node already holds; see Acquire).
	ThisNode bool
}

func (e *LockedError) Error() string {
	switch {
	case e.ThisNode:
		return fmt.Sprintf("mesh: lock %s already held by this node (%s, token %d) through another Lease; release that one first",
			quoteKey(e.Key), e.Holder, e.Token)
	case e.Holder == "":
		return fmt.Sprintf("mesh: lock %s held (being taken by another node)", quoteKey(e.Key))
	}
	return fmt.Sprintf("mesh: lock %s held by %s (token %d)", quoteKey(e.Key), e.Holder, e.Token)
}

// Is makes errors.Is(err, ErrLocked) true, and errors.Is(err,
// ErrAlreadyHeld) when ThisNode is set.
func (e *LockedError) Is(target error) bool {
	return target == ErrLocked || (e.ThisNode && target == ErrAlreadyHeld)
}
