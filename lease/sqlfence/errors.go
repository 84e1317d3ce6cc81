package sqlfence

import "errors"

// Sentinel errors. Functions in this package wrap them with %w and add the
// details (which key, which setting), so compare with errors.Is, not ==.
//
// A token below the fence's highest is reported as a *lease.StaleTokenError
// (errors.Is(err, lease.ErrStaleToken) holds), and token 0 as an error
// wrapping lease.ErrZeroToken: the same errors lease.Fence returns, so that
// callers branch the same way whatever the resource.
var (
	// ErrInvalidConfig means a Config field is out of its documented range:
	// no dialect, or a table name that is not a plain identifier.
	ErrInvalidConfig = errors.New("sqlfence: invalid config")

	// ErrInvalidKey means a key is empty, longer than MaxKeyLength bytes,
	// not UTF-8, or holds a NUL byte (which PostgreSQL text cannot store).
	ErrInvalidKey = errors.New("sqlfence: invalid key")

	// ErrTokenRange means a token does not fit the BIGINT column that holds
	// it (above 2⁶³−1). lockmesh issues tokens near 2⁵¹, so only a
	// corrupted value gets here.
	ErrTokenRange = errors.New("sqlfence: token above the largest BIGINT")

	// ErrNilDB means a nil database handle or transaction was passed.
	ErrNilDB = errors.New("sqlfence: nil database handle")

	// ErrNilFunc means Do was given a nil function.
	ErrNilFunc = errors.New("sqlfence: Do needs a non-nil function")
)
