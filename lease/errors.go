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
//
// Fences kept outside this process return it too (packages sqlfence and
// httpfence), so that errors.As finds the same type whatever the resource.
type StaleTokenError struct {
	Key   string // the key whose fence refused the token
	Token uint64 // the token that was refused
	// Highest is the highest token admitted for Key when the check ran, or
	// 0 when the fence could not tell: a single conditional UPDATE that
	// matched no row says only that the row's token was higher.
	Highest uint64
}

// Error returns a message such as
// `lease: stale token 41 for "invoices/2026-11": highest seen is 42`, or,
// when Highest is unknown,
// `lease: stale token 41 for "invoices/2026-11": a higher token was seen`.
func (e *StaleTokenError) Error() string {
	if e.Highest == 0 {
		return fmt.Sprintf("lease: stale token %d for %q: a higher token was seen", e.Token, e.Key)
	}
	return fmt.Sprintf("lease: stale token %d for %q: highest seen is %d", e.Token, e.Key, e.Highest)
}

// Is reports whether target is ErrStaleToken, so that
// errors.Is(err, ErrStaleToken) holds for every *StaleTokenError.
func (e *StaleTokenError) Is(target error) bool {
	return target == ErrStaleToken
}
