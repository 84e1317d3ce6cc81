package lease

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions in this package wrap them with %w and add the
// details (which field, which key), so compare with errors.Is, not ==.
var (
	// ErrInvalidTiming means a Timing field is out of its documented range:
	// a non-positive or over-long TTL, a drift that is negative, NaN or above
	// 0.1, or a negative margin or renew interval.
	ErrInvalidTiming = errors.New("lease: invalid timing")

	// ErrUnsafeTiming means every field is in range, but together they leave
	// the holder no usable time: the holder duration is not positive, the
	// notice would come before the grant, or renewal has no room to succeed
	// before the notice.
	ErrUnsafeTiming = errors.New("lease: unsafe timing")

	// ErrStaleToken is what a *StaleTokenError reports to errors.Is: the token
	// is lower than one the fence has already admitted for the key.
	ErrStaleToken = errors.New("lease: stale token")

	// ErrZeroToken means a fence was given token 0. Grants start at token 1,
	// so 0 can only come from an uninitialised variable; admitting it would
	// let a bug pass as a valid holder.
	ErrZeroToken = errors.New("lease: token 0 is never issued")

	// ErrNilFunc means Fence.Apply was given a nil function.
	ErrNilFunc = errors.New("lease: Apply needs a non-nil function")
)

// StaleTokenError is returned by Fence.Admit and Fence.Apply when a token is
// lower than the highest token already admitted for the key. It usually means
// the caller's lease ended (perhaps while the process was paused) and another
// holder has since written: the caller must stop acting on the resource.
type StaleTokenError struct {
	Key     string // the key whose fence refused the token
	Token   uint64 // the token that was refused
	Highest uint64 // the highest token admitted for Key when the check ran
}

// Error returns a message such as
// `lease: stale token 41 for "invoices/2026-11": highest seen is 42`.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("lease: stale token %d for %q: highest seen is %d", e.Token, e.Key, e.Highest)
}

// Is reports whether target is ErrStaleToken, so that
// errors.Is(err, ErrStaleToken) holds for every *StaleTokenError.
func (e *StaleTokenError) Is(target error) bool {
	return target == ErrStaleToken
}
