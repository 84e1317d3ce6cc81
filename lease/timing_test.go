package lease_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/lease"
)

// rat returns d nanoseconds as an exact rational.
func rat(d time.Duration) *big.Rat { return new(big.Rat).SetInt64(int64(d)) }

// exactRho returns ρ as an exact rational; every float64 is one.
func exactRho(t *testing.T, rho float64) *big.Rat {
	t.Helper()
	r := new(big.Rat)
	if r.SetFloat64(rho) == nil {
		t.Fatalf("drift %v is not finite", rho)
	}
	return r
}

// realTimeToReach returns the real time a clock running at rate takes to
// advance by local.
func realTimeToReach(local time.Duration, rate *big.Rat) *big.Rat {
	return new(big.Rat).Quo(rat(local), rate)
}

// testDrifts covers the allowed range of ρ, both ends and values that are not
// short binary fractions (0.01, 0.1).
func testDrifts() []float64 {
	ds := []float64{0, 5e-324, 1e-9, 1e-6, 0.0001, 0.001, 0.005, 0.01, 0.02, 0.05, 0.0999999, lease.MaxDrift}
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		ds = append(ds, r.Float64()*lease.MaxDrift)
	}
	return ds
}

// testTTLs covers one nanosecond to MaxTTL, including primes and values just
// around round numbers, where rounding mistakes show.
func testTTLs() []time.Duration {
	ts := []time.Duration{1, 2, 3, 7, 99, 100, 101, 997, time.Microsecond, time.Millisecond - 1, time.Millisecond,
		10 * time.Millisecond, 999_999_937, time.Second, time.Second + 1, 10 * time.Second, time.Minute,
		time.Hour, lease.MaxTTL - 1, lease.MaxTTL}
	r := rand.New(rand.NewPCG(3, 4))
	for range 60 {
		ts = append(ts, time.Duration(1+r.Int64N(int64(lease.MaxTTL))))
	}
	return ts
}

// TestSafetyInequality is the timing half of C1. The holder reads t0 before
// its first prepare; every acceptor starts its TTL timer at or after t0. With
// the holder's clock at its slowest (1−ρ) and the acceptor's at its fastest
// (1+ρ), the holder must reach its deadline t0+D_P strictly before, in real
// time, the acceptor's exclusion ends. Checked in exact arithmetic.
func TestSafetyInequality(t *testing.T) {
	one := big.NewRat(1, 1)
	starts := []time.Duration{0, 1, time.Millisecond} // acceptor's start, after t0
	checked := 0
	for _, rho := range testDrifts() {
		r := exactRho(t, rho)
		holderRate := new(big.Rat).Sub(one, r)
		acceptorRate := new(big.Rat).Add(one, r)
		for _, ttl := range testTTLs() {
			for _, margin := range []time.Duration{0, 1, time.Millisecond} {
				tm := lease.Timing{TTL: ttl, Drift: rho, SafetyMargin: margin}
				dp := tm.HolderTTL()
				if dp <= 0 {
					continue // nothing to hold; Validate refuses these
				}
				holderEnd := realTimeToReach(dp, holderRate)
				for _, s := range starts {
					acceptorEnd := new(big.Rat).Add(rat(s), realTimeToReach(ttl, acceptorRate))
					if holderEnd.Cmp(acceptorEnd) >= 0 {
						t.Fatalf("ρ=%v TTL=%v margin=%v: holder deadline D_P=%v ends at real %s, acceptor started at %v ends at %s",
							rho, ttl, margin, dp, holderEnd.FloatString(3), s, acceptorEnd.FloatString(3))
					}
					checked++
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d cases checked", checked)
	}
}

// TestHolderTTLIsLargestSafe checks that HolderTTL gives away no more than the
// one nanosecond needed to make the inequality strict: D_P + margin + 1 is not
// below γ·TTL.
func TestHolderTTLIsLargestSafe(t *testing.T) {
	one := big.NewRat(1, 1)
	for _, rho := range testDrifts() {
		r := exactRho(t, rho)
		gamma := new(big.Rat).Quo(new(big.Rat).Sub(one, r), new(big.Rat).Add(one, r))
		for _, ttl := range testTTLs() {
			const margin = 3 * time.Microsecond
			tm := lease.Timing{TTL: ttl, Drift: rho, SafetyMargin: margin}
			dp := tm.HolderTTL()
			if dp == 0 {
				continue
			}
			limit := new(big.Rat).Mul(gamma, rat(ttl))
			if rat(dp+margin).Cmp(limit) >= 0 || rat(dp+margin+1).Cmp(limit) < 0 {
				t.Fatalf("ρ=%v TTL=%v: D_P=%v, γ·TTL=%s", rho, ttl, dp, limit.FloatString(3))
			}
		}
	}
}

func TestHolderTTLZeroDriftIsStrict(t *testing.T) {
	tm := lease.Timing{TTL: time.Second}
	if got, want := tm.HolderTTL(), time.Second-1; got != want {
		t.Fatalf("HolderTTL() = %v, want %v", got, want)
	}
}

func TestHolderTTLNeverNegative(t *testing.T) {
	for _, tm := range []lease.Timing{
		{},
		{TTL: -time.Second, Drift: 0.01},
		{TTL: time.Millisecond, Drift: 0.01, SafetyMargin: time.Second},
		{TTL: time.Second, Drift: math.NaN()},
		{TTL: time.Second, Drift: 1},
		{TTL: time.Second, Drift: math.Inf(-1)},
		{TTL: math.MaxInt64, Drift: 0, SafetyMargin: math.MinInt64},
	} {
		if got := tm.HolderTTL(); got < 0 {
			t.Errorf("%+v: HolderTTL() = %v", tm, got)
		}
	}
}

func TestGamma(t *testing.T) {
	for _, c := range []struct{ rho, want float64 }{{0, 1}, {0.01, 0.99 / 1.01}, {0.1, 0.9 / 1.1}} {
		if got := (lease.Timing{Drift: c.rho}).Gamma(); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("Gamma(ρ=%v) = %v, want %v", c.rho, got, c.want)
		}
	}
}

// TestQuarantine checks that a restarted acceptor waits at least TTL and at
// least D_P/γ on its own clock, rounded up.
func TestQuarantine(t *testing.T) {
	one := big.NewRat(1, 1)
	for _, rho := range testDrifts() {
		r := exactRho(t, rho)
		gamma := new(big.Rat).Quo(new(big.Rat).Sub(one, r), new(big.Rat).Add(one, r))
		for _, ttl := range testTTLs() {
			tm := lease.Timing{TTL: ttl, Drift: rho, SafetyMargin: 1}
			q := tm.Quarantine()
			if q < ttl {
				t.Fatalf("ρ=%v TTL=%v: Quarantine() = %v < TTL", rho, ttl, q)
			}
			if new(big.Rat).Mul(rat(q), gamma).Cmp(rat(tm.HolderTTL())) < 0 {
				t.Fatalf("ρ=%v TTL=%v: Quarantine() = %v < D_P/γ", rho, ttl, q)
			}
		}
	}
	// A negative safety margin (refused by Validate) pushes D_P above γ·TTL;
	// Quarantine still covers D_P/γ rather than stopping at TTL.
	tm := lease.Timing{TTL: time.Second, Drift: 0.01, SafetyMargin: -time.Second}
	if q, dp := tm.Quarantine(), tm.HolderTTL(); float64(q)*tm.Gamma() < float64(dp) {
		t.Errorf("%+v: Quarantine() = %v, below D_P/γ for D_P = %v", tm, q, dp)
	}
	// Invalid settings give a value, not a panic.
	for _, tm := range []lease.Timing{{}, {TTL: -1}, {TTL: time.Second, Drift: math.NaN()}, {TTL: time.Second, Drift: 0.999999}} {
		if q := tm.Quarantine(); q < 0 {
			t.Errorf("%+v: Quarantine() = %v", tm, q)
		}
	}
}

func TestRenewEvery(t *testing.T) {
	if got := (lease.Timing{TTL: 9 * time.Second}).RenewEvery(); got != 3*time.Second {
		t.Errorf("default RenewEvery() = %v, want 3s", got)
	}
	if got := (lease.Timing{TTL: 9 * time.Second, RenewInterval: time.Second}).RenewEvery(); got != time.Second {
		t.Errorf("RenewEvery() = %v, want 1s", got)
	}
}

func TestNoticeAt(t *testing.T) {
	tm := lease.Timing{NoticeMargin: 100 * time.Millisecond}
	if got := tm.NoticeAt(5 * time.Second); got != 4900*time.Millisecond {
		t.Errorf("NoticeAt(5s) = %v, want 4.9s", got)
	}
}

func TestDefaultsValidate(t *testing.T) {
	for name, tm := range map[string]lease.Timing{"DefaultTiming": lease.DefaultTiming(), "LocalTiming": lease.LocalTiming()} {
		if err := tm.Validate(); err != nil {
			t.Errorf("%s().Validate() = %v", name, err)
		}
	}
}

// TestValidate has one row per rule that fails it, next to a row on the
// boundary that passes, so each rule is shown to bite exactly where it should.
func TestValidate(t *testing.T) {
	base := lease.Timing{TTL: time.Second, Drift: 0, SafetyMargin: 0, NoticeMargin: 0}
	with := func(f func(*lease.Timing)) lease.Timing { tm := base; f(&tm); return tm }
	dp := base.HolderTTL() // 1s − 1ns with zero drift and margin

	cases := []struct {
		name    string
		timing  lease.Timing
		want    error  // nil: valid
		message string // substring of the error
	}{
		{"base", base, nil, ""},
		{"zero value", lease.Timing{}, lease.ErrInvalidTiming, "TTL must be positive, got 0s"},
		{"negative TTL", with(func(t *lease.Timing) { t.TTL = -time.Second }), lease.ErrInvalidTiming, "TTL must be positive"},
		{"TTL at max", with(func(t *lease.Timing) { t.TTL = lease.MaxTTL }), nil, ""},
		{"TTL over max", with(func(t *lease.Timing) { t.TTL = lease.MaxTTL + 1 }), lease.ErrInvalidTiming, "exceeds the maximum 24h0m0s"},
		{"drift at max", with(func(t *lease.Timing) { t.Drift = lease.MaxDrift }), nil, ""},
		{"drift over max", with(func(t *lease.Timing) { t.Drift = math.Nextafter(lease.MaxDrift, 1) }), lease.ErrInvalidTiming, "drift 0.10000000000000002 is outside [0, 0.1]"},
		{"negative drift", with(func(t *lease.Timing) { t.Drift = -0.01 }), lease.ErrInvalidTiming, "drift -0.01 is outside"},
		{"NaN drift", with(func(t *lease.Timing) { t.Drift = math.NaN() }), lease.ErrInvalidTiming, "drift NaN is outside"},
		{"infinite drift", with(func(t *lease.Timing) { t.Drift = math.Inf(1) }), lease.ErrInvalidTiming, "drift +Inf is outside"},
		{"negative safety margin", with(func(t *lease.Timing) { t.SafetyMargin = -1 }), lease.ErrInvalidTiming, "safety margin -1ns is negative"},
		{"negative notice margin", with(func(t *lease.Timing) { t.NoticeMargin = -1 }), lease.ErrInvalidTiming, "notice margin -1ns is negative"},
		{"negative renew interval", with(func(t *lease.Timing) { t.RenewInterval = -1 }), lease.ErrInvalidTiming, "renew interval -1ns is negative"},
		{"TTL too short for TTL/3", lease.Timing{TTL: 2}, lease.ErrInvalidTiming, "too short to derive a renew interval"},
		{"holder duration just positive", with(func(t *lease.Timing) { t.SafetyMargin = dp - 1; t.RenewInterval = 1 }), lease.ErrUnsafeTiming, "leaves no time to renew"},
		{"holder duration zero", with(func(t *lease.Timing) { t.SafetyMargin = dp }), lease.ErrUnsafeTiming, "holder duration 0s is not positive"},
		{"holder duration negative", with(func(t *lease.Timing) { t.SafetyMargin = 2 * time.Second }), lease.ErrUnsafeTiming, "holder duration -1.000000001s is not positive"},
		{"notice just inside", with(func(t *lease.Timing) { t.NoticeMargin = dp - 2; t.RenewInterval = 1 }), nil, ""},
		{"notice equals holder duration", with(func(t *lease.Timing) { t.NoticeMargin = dp }), lease.ErrUnsafeTiming, "is not shorter than the holder duration"},
		{"notice beyond holder duration", with(func(t *lease.Timing) { t.NoticeMargin = 2 * time.Second }), lease.ErrUnsafeTiming, "notice margin 2s is not shorter"},
		{"renew exactly fits", with(func(t *lease.Timing) { t.NoticeMargin = dp - 2*time.Millisecond; t.RenewInterval = time.Millisecond }), nil, ""},
		{"renew one ns too long", with(func(t *lease.Timing) {
			t.NoticeMargin = dp - 2*time.Millisecond
			t.RenewInterval = time.Millisecond + 1
		}), lease.ErrUnsafeTiming, "leaves no time to renew"},
		{"default renew too slow", with(func(t *lease.Timing) { t.NoticeMargin = 500 * time.Millisecond }), lease.ErrUnsafeTiming, "renew every 333.333333ms"},
		{"huge renew interval", with(func(t *lease.Timing) { t.RenewInterval = math.MaxInt64 }), lease.ErrUnsafeTiming, "leaves no time to renew"},
		{"message from the brief", lease.Timing{TTL: 13 * time.Millisecond, SafetyMargin: time.Millisecond - 1, NoticeMargin: 10 * time.Millisecond, RenewInterval: 20 * time.Millisecond},
			lease.ErrUnsafeTiming, "lease: unsafe timing: holder duration 12ms leaves no time to renew (notice margin 10ms, renew every 20ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.timing
			err := c.timing.Validate()
			if !sameTiming(before, c.timing) {
				t.Fatalf("Validate changed its receiver: %+v became %+v", before, c.timing)
			}
			if c.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Validate() = %v, want an error wrapping %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Fatalf("Validate() = %q, want it to contain %q", err, c.message)
			}
			if !strings.HasPrefix(err.Error(), "lease: ") {
				t.Fatalf("Validate() = %q lacks the package prefix", err)
			}
		})
	}
}

// sameTiming compares two Timings, treating NaN drifts as equal.
func sameTiming(a, b lease.Timing) bool {
	if math.IsNaN(a.Drift) && math.IsNaN(b.Drift) {
		a.Drift, b.Drift = 0, 0
	}
	return a == b
}

// FuzzTimingValidate checks that Validate never panics and that whatever it
// accepts keeps every promise: a positive holder duration inside the safety
// bound, room to renew before the notice, and a long enough quarantine.
func FuzzTimingValidate(f *testing.F) {
	for _, tm := range []lease.Timing{lease.DefaultTiming(), lease.LocalTiming(), {}, {TTL: 1, Drift: math.NaN()}} {
		f.Add(int64(tm.TTL), tm.Drift, int64(tm.SafetyMargin), int64(tm.NoticeMargin), int64(tm.RenewInterval))
	}
	f.Add(int64(lease.MaxTTL), lease.MaxDrift, int64(0), int64(0), int64(0))
	f.Add(int64(math.MaxInt64), 0.0, int64(math.MinInt64), int64(math.MinInt64), int64(math.MaxInt64))
	one := big.NewRat(1, 1)
	f.Fuzz(func(t *testing.T, ttl int64, drift float64, safety, notice, renew int64) {
		tm := lease.Timing{TTL: time.Duration(ttl), Drift: drift, SafetyMargin: time.Duration(safety),
			NoticeMargin: time.Duration(notice), RenewInterval: time.Duration(renew)}
		// None of these may panic, valid or not.
		_, _, _, _ = tm.HolderTTL(), tm.Quarantine(), tm.RenewEvery(), tm.NoticeAt(tm.HolderTTL())
		if tm.Validate() != nil {
			return
		}
		dp := tm.HolderTTL()
		if dp <= 0 || tm.NoticeAt(dp) <= 0 || 2*tm.RenewEvery() > tm.NoticeAt(dp) {
			t.Fatalf("%+v validated, but D_P=%v notice at %v renew every %v", tm, dp, tm.NoticeAt(dp), tm.RenewEvery())
		}
		r := exactRho(t, drift)
		lhs := new(big.Rat).Mul(rat(dp), new(big.Rat).Add(one, r)) // D_P·(1+ρ)
		rhs := new(big.Rat).Mul(rat(tm.TTL), new(big.Rat).Sub(one, r))
		if lhs.Cmp(rhs) >= 0 {
			t.Fatalf("%+v validated, but D_P=%v is not below γ·TTL", tm, dp)
		}
		q := tm.Quarantine()
		if q < tm.TTL || new(big.Rat).Mul(rat(q), new(big.Rat).Sub(one, r)).Cmp(lhs) < 0 {
			t.Fatalf("%+v validated, but Quarantine()=%v is below TTL or D_P/γ", tm, q)
		}
	})
}

// BenchmarkHolderTTL shows the cost of the exact arithmetic, for callers
// deciding whether to cache the result.
func BenchmarkHolderTTL(b *testing.B) {
	tm := lease.DefaultTiming()
	b.ReportAllocs()
	for b.Loop() {
		_ = tm.HolderTTL()
	}
}
