// Package lease holds the two pieces of lockmesh that stand on either side of
// a grant: the timing arithmetic that keeps holders apart in time, and Fence,
// the check a protected resource runs on every write. It reads no clock and
// starts no goroutine; package mesh supplies the clock.
//
// # The timing model
//
// Voters (acceptors) grant a key by majority vote. Nodes' clocks may disagree
// by any offset, but each ticks at a rate within ρ (Timing.Drift) of real
// time. Only durations are sent between nodes, never timestamps. Two
// durations follow from Timing:
//
//   - D_A = Timing.TTL. An acceptor that accepts a grant or renewal refuses
//     other holders for D_A on its own clock, counted from the moment it
//     accepts.
//   - D_P = Timing.HolderTTL(), just under γ·D_A − SafetyMargin with
//     γ = (1−ρ)/(1+ρ). The holder reads its monotonic clock (t0) before it
//     sends the first prepare of an acquire or a renewal. Its deadline is
//     t0 + D_P, and it sends accepts only before then.
//
// Every acceptor starts its timer after t0 in real time. In the worst case the
// holder's clock runs slow (rate 1−ρ) and the acceptor's fast (1+ρ): the
// holder reaches its deadline D_P/(1−ρ) of real time after t0, strictly
// before the acceptor's exclusion ends, D_A/(1+ρ) after t0 at the earliest.
// Because Timing.HolderTTL keeps D_P below γ·D_A, this holds for every
// setting that Timing.Validate accepts. Any later grant needs a
// majority, which shares an acceptor with the majority behind this one, so
// it cannot happen while this holder may act. The package tests check the
// inequality in exact arithmetic over the whole allowed range of ρ.
//
// The holder renews Timing.RenewEvery() after t0 (TTL/3 by default) and keeps
// retrying a failed renewal. If none has succeeded by Timing.NoticeAt(deadline)
// it is told that the lease is lost, NoticeMargin before the deadline, while
// nobody else can yet hold the key. An acceptor that restarts without its
// state stays silent for Timing.Quarantine(), so that it cannot help grant a
// key it has forgotten granting. Timing.Validate refuses settings under which
// any of this fails.
//
// # The fence
//
// Timing alone is safe only while every clock keeps to its rate bound and the
// holder is actually running. A garbage-collection pause, SIGSTOP, a migrated
// virtual machine or a suspended laptop can stop a holder in mid-write, past
// its deadline, while another holder is granted the key. When the first one
// wakes up, it does not know.
//
// Fencing tokens close that gap. Each grant of a key carries a token greater
// than every earlier grant's, and a renewal keeps it. The resource keeps the
// highest token it has seen for each key and refuses writes with a lower one,
// so the woken holder's late write fails instead of overwriting newer data.
// Equal tokens pass, since one holder writes many times under one grant.
//
// Fence does this in memory for resources that a single Go process fronts:
//
//	fence := lease.NewFence() // one per resource, shared by all requests
//
//	err := fence.Apply(key, l.Token(), func() error {
//		return store.Write(key, data) // runs only if the token is current
//	})
//	if errors.Is(err, lease.ErrStaleToken) {
//		// our lease ended and someone else has written since: stop
//	}
//
// The check, the write and the recording of the token are one step for that
// key, and the token is recorded only if the write succeeds. Fence.Admit
// checks and records without running anything; use it only where writes for a
// key are already serialised in the order of their checks.
//
// # Beyond one process
//
// A Fence in one process cannot protect a database that other processes also
// write: the database must keep the highest token itself and check it in the
// transaction that writes. Package sqlfence does this through database/sql
// for PostgreSQL, MySQL and SQLite, and Fence's documentation gives the
// one-statement recipe for a table that keeps the token in its own rows.
// Package httpfence carries the token to a service over HTTP, in headers,
// and runs the service's write handlers under either kind of fence.
//
// Object stores and files can follow the same pattern with a conditional write
// (compare-and-swap on a version or ETag) that carries the token.
package lease
