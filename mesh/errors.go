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
	// ErrNotNewMesh: Config.NewMesh on a node whose data directory shows
	// that it voted: the mesh is not new. Also wraps ErrDataDir.
	ErrNotNewMesh = fmt.Errorf("%w: NewMesh refused", ErrDataDir)
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
	// Value is the holder's value (see WithValue), when the voters
	// reported it.
	Value []byte
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

var (
	// ErrValueTooLarge: a lease value over Config.MaxValueSize.
	ErrValueTooLarge = errors.New("mesh: lease value too large")
	// ErrUpgradeRequired: lease values, watches, elections, semaphores and
	// listings need protocol version 3, and a node of the mesh (named in
	// the error) speaks an earlier one: finish the rolling upgrade first.
	ErrUpgradeRequired = errors.New("mesh: a node speaks an earlier protocol version")
	// ErrNoLeader: the election has no leader (Leader).
	ErrNoLeader = errors.New("mesh: no leader")
	// ErrSemaphoreMismatch: a semaphore's slots are held under another
	// number of holders than the caller's; the error is a
	// *SemaphoreError.
	ErrSemaphoreMismatch = errors.New("mesh: semaphore size mismatch")
)

// CancelledError is what an Acquire (or TryAcquire, Campaign,
// AcquireSemaphore) returns when its ctx ends first: why it was still
// waiting, and whether a grant may have happened as it ended. Such a grant
// is never handed to the caller: it is given back. errors.Is(err,
// context.DeadlineExceeded) (or Canceled) holds, and errors.Is(err,
// ErrLocked) or ErrNoQuorum when that is what it waited for.
type CancelledError struct {
	Key string
	// Err is ctx's error.
	Err error
	// Waiting is what the acquire waited for when ctx ended: a
	// *LockedError naming the holder, ErrNoQuorum, or nil (it had not
	// tried yet).
	Waiting error
	// GaveBack: the key was granted to this node as ctx ended; the grant
	// was released at once, and no Lease stands for it.
	GaveBack bool
	// Unknown: a grant may have been written as ctx ended, its outcome not
	// learned; if it was, the node frees it in the background (it takes
	// no longer than the lease's TTL in any case). No Lease stands for it.
	Unknown bool
}

// MayHaveBeenGranted reports whether the key may have been granted to
// this node, for a moment, as the acquire ended (and given back since).
func (e *CancelledError) MayHaveBeenGranted() bool { return e.GaveBack || e.Unknown }

func (e *CancelledError) Error() string {
	msg := fmt.Sprintf("mesh: acquiring %s: %v", quoteKey(e.Key), e.Err)
	if e.Waiting != nil {
		msg += fmt.Sprintf(" (waiting: %v)", e.Waiting)
	}
	switch {
	case e.GaveBack:
		msg += "; it was granted as the wait ended, and given back"
	case e.Unknown:
		msg += "; a grant may have been written as the wait ended, and is being given back"
	}
	return msg
}

// Unwrap makes errors.Is and errors.As see ctx's error and what the
// acquire waited for.
func (e *CancelledError) Unwrap() []error {
	if e.Waiting == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Waiting}
}

// SemaphoreError says that a semaphore's slot is held under another size.
// errors.Is(err, ErrSemaphoreMismatch) is true.
type SemaphoreError struct {
	Name string
	// N is the caller's size, Theirs the size the slot's holder used (0:
	// the slot is held by a plain lock, not by a semaphore).
	N, Theirs int
	// Slot is the key of the slot, Holder the node holding it.
	Slot, Holder string
}

func (e *SemaphoreError) Error() string {
	if e.Theirs == 0 {
		return fmt.Sprintf("mesh: semaphore %s: slot %s is held by a plain lock of %s, not by a semaphore (its key is the slot's): use another name",
			quoteKey(e.Name), quoteKey(e.Slot), e.Holder)
	}
	return fmt.Sprintf("mesh: semaphore %s is used with %d holders here and %d by %s (slot %s): every node must give it the same size",
		quoteKey(e.Name), e.N, e.Theirs, e.Holder, quoteKey(e.Slot))
}

// Is makes errors.Is(err, ErrSemaphoreMismatch) true.
func (e *SemaphoreError) Is(target error) bool { return target == ErrSemaphoreMismatch }
