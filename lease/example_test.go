package lease_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/lease"
)

// A holder paused past its deadline (a long GC pause, SIGSTOP) wakes up and
// writes with its old token after the next holder has written. The fence
// refuses the late write.
func ExampleFence() {
	fence := lease.NewFence()
	const key = "invoices/2026-11"

	fmt.Println(fence.Admit(key, 41)) // the first holder writes
	fmt.Println(fence.Admit(key, 42)) // its lease ran out; the next holder writes
	err := fence.Admit(key, 41)       // the first holder wakes and writes again
	fmt.Println(err)
	fmt.Println(errors.Is(err, lease.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// lease: stale token 41 for "invoices/2026-11": highest seen is 42
	// true
}

// Apply puts the write itself behind the fence: the check, the write and the
// recording of the token happen as one step for the key.
func ExampleFence_Apply() {
	fence := lease.NewFence()
	totals := map[string]int{} // the protected resource; only written inside Apply

	write := func(token uint64, total int) error {
		return fence.Apply("invoice-7", token, func() error {
			totals["invoice-7"] = total
			return nil
		})
	}
	fmt.Println(write(3, 100))
	fmt.Println(write(3, 120)) // same grant, another write
	fmt.Println(write(4, 90))  // next grant
	fmt.Println(write(3, 150)) // the old holder, too late
	fmt.Println(totals["invoice-7"])
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// lease: stale token 3 for "invoice-7": highest seen is 4
	// 90
}

// A caller can recover the key and both tokens from the error, for logging or
// to decide whether to re-acquire.
func ExampleStaleTokenError() {
	fence := lease.NewFence()
	_ = fence.Admit("jobs/nightly", 9)
	err := fmt.Errorf("running job: %w", fence.Admit("jobs/nightly", 8))

	var stale *lease.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("key %s: our token %d, current %d\n", stale.Key, stale.Token, stale.Highest)
	}
	// Output:
	// key jobs/nightly: our token 8, current 9
}

// The numbers a holder and an acceptor work with under DefaultTiming.
func ExampleTiming() {
	tm := lease.DefaultTiming()
	if err := tm.Validate(); err != nil {
		panic(err)
	}
	// The holder reads its monotonic clock before the first prepare.
	base := time.Now()
	t0 := time.Since(base) // an offset on the monotonic clock
	deadline := t0 + tm.HolderTTL()

	fmt.Println("acceptor excludes others for", tm.TTL)
	fmt.Println("holder may act for", tm.HolderTTL())
	fmt.Println("renew after", tm.RenewEvery())
	fmt.Println("lost notice", deadline-tm.NoticeAt(deadline), "before the deadline")
	fmt.Println("restarted acceptor stays silent for", tm.Quarantine())
	// Output:
	// acceptor excludes others for 10s
	// holder may act for 9.751980198s
	// renew after 3.333333333s
	// lost notice 500ms before the deadline
	// restarted acceptor stays silent for 10s
}

// Validate explains what is wrong instead of accepting a setting that could
// end a healthy lease.
func ExampleTiming_Validate() {
	tm := lease.LocalTiming()
	tm.RenewInterval = 500 * time.Millisecond // too slow for a 1s TTL

	err := tm.Validate()
	fmt.Println(errors.Is(err, lease.ErrUnsafeTiming))
	fmt.Println(err)
	// Output:
	// true
	// lease: unsafe timing: holder duration 975.198019ms leaves no time to renew (notice margin 100ms, renew every 500ms: the holder duration must be at least notice margin + 2 × renew interval = 1.1s)
}
