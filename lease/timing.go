package lease

import (
	"fmt"
	"math"
	"math/big"
	"time"
)

// MaxTTL is the longest TTL that Validate accepts. A crashed holder blocks its
// key for up to one TTL, and an acceptor that restarts without its state stays
// silent for about as long, so anything longer than a day is a mistake rather
// than a setting. The bound also keeps the arithmetic far from overflowing a
// time.Duration.
const MaxTTL = 24 * time.Hour

// MaxDrift is the largest clock-rate error that Validate accepts (10%).
// Quartz oscillators err by a few parts per million; even a badly disciplined
// virtual machine stays well under 1%. A larger figure usually means a
// percentage was given where a fraction belongs (1 for 1%).
const MaxDrift = 0.1

// Timing holds the durations that decide how long a grant lasts on each side
// and when the holder renews or gives up. The zero value is not valid; start
// from DefaultTiming or LocalTiming and check changes with Validate.
//
// All methods are pure arithmetic: none reads a clock. Times passed to and
// returned from them are offsets on the caller's monotonic clock, expressed as
// time.Duration (for example time.Since(base) for a base time.Time taken once
// at start-up, which Go measures on the monotonic clock).
//
// The methods give meaningful results only for settings that pass Validate.
// On other settings they still return without panicking, but the values are
// not safe to use.
type Timing struct {
	// TTL is D_A: how long each acceptor refuses other holders after it
	// accepts a grant or a renewal, measured on the acceptor's own clock. It is
	// also the longest a crashed holder can keep its key from others.
	// Range: (0, MaxTTL]. Zero is invalid.
	TTL time.Duration

	// Drift is ρ: the largest error in clock *rate* of any node, as a
	// fraction (0.01 means a clock may gain or lose up to 1% against real
	// time). Offsets between clocks do not matter; only rates do.
	// Range: [0, MaxDrift]. Zero means perfect clocks, which no real machine
	// has; NaN is invalid.
	Drift float64

	// SafetyMargin is taken off γ·TTL to get the holder's duration D_P. It
	// absorbs what the rate model leaves out: a clock whose rate briefly
	// exceeds ρ (NTP slewing, a virtual machine catching up after a pause)
	// and the coarseness of timers. Range: ≥ 0. Zero means no margin beyond
	// the drift bound itself.
	SafetyMargin time.Duration

	// NoticeMargin is how long before its deadline a holder is told that its
	// lease is lost when renewal has not succeeded, so that it can stop work
	// while it still holds the key. Range: [0, HolderTTL()). Zero means the
	// notice comes at the deadline itself, which leaves the holder no time to
	// stop.
	NoticeMargin time.Duration

	// RenewInterval is how long after a grant (or after the start of the last
	// successful renewal) the holder starts to renew. Range: > 0, and at most
	// half of HolderTTL() − NoticeMargin (see Validate). Zero means TTL/3, the
	// choice of etcd and client-go.
	RenewInterval time.Duration
}

// DefaultTiming returns settings for a cluster spread over a data-centre
// network: a 10 s TTL, 1% drift, a 50 ms safety margin, a 500 ms notice and
// renewal every TTL/3.
func DefaultTiming() Timing {
	return Timing{
		TTL:          10 * time.Second,
		Drift:        0.01,
		SafetyMargin: 50 * time.Millisecond,
		NoticeMargin: 500 * time.Millisecond,
	}
}

// LocalTiming returns settings for nodes on one host or one fast LAN, and
// for tests: a 1 s TTL, 1% drift, a 5 ms safety margin, a 100 ms notice and
// renewal every TTL/3.
func LocalTiming() Timing {
	return Timing{
		TTL:          time.Second,
		Drift:        0.01,
		SafetyMargin: 5 * time.Millisecond,
		NoticeMargin: 100 * time.Millisecond,
	}
}

// Gamma returns γ = (1−ρ)/(1+ρ), the share of an acceptor's TTL that a holder
// may safely count on. It is informational: HolderTTL and Quarantine use exact
// arithmetic rather than this rounded value.
func (t Timing) Gamma() float64 {
	return (1 - t.Drift) / (1 + t.Drift)
}

// HolderTTL returns D_P, the holder's duration: the largest whole number of
// nanoseconds strictly below γ·TTL, minus SafetyMargin. The holder reads its
// monotonic clock (t0) before it sends the first prepare of an acquire or a
// renewal, and its deadline is t0 + D_P.
//
// Why this is safe: every acceptor starts its TTL timer after t0 in real
// time. A holder clock running slow at rate 1−ρ reaches t0 + D_P after
// D_P/(1−ρ) of real time; an acceptor clock running fast at 1+ρ reaches TTL
// after TTL/(1+ρ). D_P < γ·TTL makes the first strictly shorter, even with a
// zero SafetyMargin and a zero drift.
//
// HolderTTL is never negative; it returns 0 when the settings leave the holder
// no time at all (Validate explains why).
func (t Timing) HolderTTL() time.Duration {
	d, ok := t.holderTTL()
	if !ok || d < 0 {
		return 0
	}
	return d
}

// RenewEvery returns how long after t0 the holder starts to renew:
// RenewInterval, or TTL/3 when RenewInterval is zero.
func (t Timing) RenewEvery() time.Duration {
	if t.RenewInterval != 0 {
		return t.RenewInterval
	}
	return t.TTL / 3
}

// NoticeAt returns when a holder whose deadline is deadline must be told that
// its lease is lost, if renewal has not succeeded by then: deadline minus
// NoticeMargin. Both are offsets on the holder's monotonic clock.
func (t Timing) NoticeAt(deadline time.Duration) time.Duration {
	return deadline - t.NoticeMargin
}

// Quarantine returns how long an acceptor that restarted without its state
// must refuse to vote, measured on its own clock from the restart.
//
// The acceptor may have forgotten a grant whose holder can act until
// D_P/(1−ρ) of real time after the grant. To outlast that on a clock that may
// run fast at 1+ρ, it must wait D_P·(1+ρ)/(1−ρ) = D_P/γ, rounded up here to a
// whole nanosecond. The result is never below TTL, so that the restarted
// acceptor also honours the full exclusion it promised before it crashed.
// For settings that pass Validate, D_P/γ < TTL, so the result is TTL itself.
func (t Timing) Quarantine() time.Duration {
	q := t.TTL
	if q < 0 {
		q = 0
	}
	num, den, ok := t.gammaParts()
	if !ok {
		return q
	}
	// ceil(D_P/γ) = ceil(D_P·den/num).
	a := new(big.Int).Mul(big.NewInt(int64(t.HolderTTL())), den)
	if c := clampDuration(ceilDiv(a, num)); c > q {
		q = c
	}
	return q
}

// Validate reports the first problem it finds with t, wrapped around
// ErrInvalidTiming (a field out of range) or ErrUnsafeTiming (fields in range
// that together leave the holder no usable time). It neither changes t nor
// panics.
//
// Beyond the ranges given with each field, it requires:
//
//   - D_P = HolderTTL() > 0;
//   - NoticeMargin < D_P, so that the notice comes after the grant;
//   - 2·RenewEvery() ≤ D_P − NoticeMargin.
//
// The last rule means that once the first renewal starts (RenewEvery after
// t0), at least one more renew interval remains before the lost notice fires.
// A renewal attempt that times out within one interval therefore has room for
// a retry before the holder is told to stop, and one lost message need not
// cost a lease. Asking for more (three intervals, say) would reject the
// usual TTL/3 schedule; asking for less would let one slow round trip end a
// healthy lease.
func (t Timing) Validate() error {
	switch {
	case t.TTL <= 0:
		return fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalidTiming, t.TTL)
	case t.TTL > MaxTTL:
		return fmt.Errorf("%w: TTL %v exceeds the maximum %v", ErrInvalidTiming, t.TTL, MaxTTL)
	case !(t.Drift >= 0 && t.Drift <= MaxDrift): // also refuses NaN
		return fmt.Errorf("%w: drift %v is outside [0, %v]", ErrInvalidTiming, t.Drift, MaxDrift)
	case t.SafetyMargin < 0:
		return fmt.Errorf("%w: safety margin %v is negative", ErrInvalidTiming, t.SafetyMargin)
	case t.NoticeMargin < 0:
		return fmt.Errorf("%w: notice margin %v is negative", ErrInvalidTiming, t.NoticeMargin)
	case t.RenewInterval < 0:
		return fmt.Errorf("%w: renew interval %v is negative (zero means TTL/3)", ErrInvalidTiming, t.RenewInterval)
	case t.RenewEvery() <= 0:
		return fmt.Errorf("%w: TTL %v is too short to derive a renew interval from", ErrInvalidTiming, t.TTL)
	}

	// The fields are in range, so the arithmetic below cannot overflow.
	dp, _ := t.holderTTL()
	renew := t.RenewEvery()
	switch {
	case dp <= 0:
		return fmt.Errorf("%w: holder duration %v is not positive (γ·TTL is %v, safety margin %v)",
			ErrUnsafeTiming, dp, dp+t.SafetyMargin, t.SafetyMargin)
	case t.NoticeMargin >= dp:
		return fmt.Errorf("%w: notice margin %v is not shorter than the holder duration %v",
			ErrUnsafeTiming, t.NoticeMargin, dp)
	case renew > (dp-t.NoticeMargin)/2: // 2·renew ≤ dp − notice, without overflow
		return fmt.Errorf("%w: holder duration %v leaves no time to renew (notice margin %v, renew every %v: "+
			"the holder duration must be at least notice margin + 2 × renew interval = %v)",
			ErrUnsafeTiming, dp, t.NoticeMargin, renew, addSat(t.NoticeMargin, addSat(renew, renew)))
	}
	return nil
}

// holderTTL computes D_P without clamping it at zero, so that Validate can
// report how far below zero it fell. ok is false when D_P cannot be computed:
// a non-positive TTL or a drift outside [0, 1).
func (t Timing) holderTTL() (d time.Duration, ok bool) {
	num, den, ok := t.gammaParts()
	if !ok || t.TTL <= 0 {
		return 0, false
	}
	// γ·TTL = TTL·num/den. For integers a and b > 0, the largest integer
	// strictly below a/b is floor((a−1)/b); big.Int.Div rounds towards
	// negative infinity when the divisor is positive.
	q := new(big.Int).Mul(big.NewInt(int64(t.TTL)), num)
	q.Sub(q, big.NewInt(1))
	q.Div(q, den)
	q.Sub(q, big.NewInt(int64(t.SafetyMargin)))
	return clampDuration(q), true
}

// gammaParts returns positive integers num and den with γ = num/den exactly.
// Every finite float64 is a binary fraction, ρ = m/2^k, so γ =
// (2^k − m)/(2^k + m) with no rounding at all, and the safety inequality holds
// exactly rather than up to floating-point error. ok is false when ρ is NaN,
// infinite, negative or at least 1, where γ would not be in (0, 1].
func (t Timing) gammaParts() (num, den *big.Int, ok bool) {
	if !(t.Drift >= 0 && t.Drift < 1) {
		return nil, nil, false
	}
	if t.Drift == 0 {
		return big.NewInt(1), big.NewInt(1), true
	}
	frac, exp := math.Frexp(t.Drift) // ρ = frac·2^exp, frac in [0.5, 1), exp ≤ 0
	m := big.NewInt(int64(math.Ldexp(frac, 53)))
	pow := new(big.Int).Lsh(big.NewInt(1), uint(53-exp)) // ρ = m/pow
	return new(big.Int).Sub(pow, m), pow.Add(pow, m), true
}

// ceilDiv returns the smallest integer not below a/b, for b > 0.
func ceilDiv(a, b *big.Int) *big.Int {
	q, m := new(big.Int).DivMod(a, b, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// addSat returns a+b for non-negative a and b, saturating at the largest
// Duration rather than wrapping. Validate uses it to print a requirement that
// may not fit.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// clampDuration converts q to a Duration, saturating instead of wrapping when
// q is out of range (only possible for settings Validate refuses).
func clampDuration(q *big.Int) time.Duration {
	switch {
	case q.IsInt64():
		return time.Duration(q.Int64())
	case q.Sign() < 0:
		return math.MinInt64
	default:
		return math.MaxInt64
	}
}
