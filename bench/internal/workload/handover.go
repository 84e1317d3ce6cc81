package workload

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Locker takes a lock; the returned function releases it. A Locker is used
// by one goroutine at a time.
type Locker interface {
	Lock(ctx context.Context, key string) (release func(context.Context) error, err error)
}

// LockerFunc adapts a function to Locker.
type LockerFunc func(ctx context.Context, key string) (func(context.Context) error, error)

// Lock calls f.
func (f LockerFunc) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	return f(ctx, key)
}

// AcquireRelease is the op the latency and throughput workloads time on a
// lock service: take key, give it back.
func AcquireRelease(l Locker, key string) Op {
	return func(ctx context.Context) error {
		release, err := l.Lock(ctx, key)
		if err != nil {
			return fmt.Errorf("acquire %q: %w", key, err)
		}
		if err := release(ctx); err != nil {
			return fmt.Errorf("release %q: %w", key, err)
		}
		return nil
	}
}

// Hold is one grant of the contended key: who held it, when the grant
// returned and when its release began, in wall-clock nanoseconds (the same
// clock in every process of the machine, so holds recorded in several
// processes can be merged).
type Hold struct {
	Worker   string `json:"worker"`
	Acquired int64  `json:"acquired_ns"`
	Released int64  `json:"released_ns"`
}

// Contend runs workers goroutines that take key in turn until d has
// passed or maxHolds grants were recorded, and returns every hold.
//
// A holder keeps the key for hold (a short critical section, longer than a
// loopback round trip, so that the others are really waiting when it lets
// go), releases it, and asks again only once another goroutine of this
// process was granted the key (or after a second). Every grant is then a
// hand-over to a waiter: a lock whose releaser could take the key straight
// back (raft's woken waiters, Redlock's polling ones lose that race) is
// timed on its hand-overs, not on its releaser's re-grants.
//
// name(i) labels goroutine i (with where it runs). Goroutines stop between
// holds: one still waiting when time is up gets its grant as the others
// leave.
func Contend(ctx context.Context, workers int, d, hold time.Duration, maxHolds int, key string,
	locker func(worker int) (Locker, error), name func(worker int) string) ([]Hold, error) {
	lockers := make([]Locker, workers)
	for i := range lockers {
		l, err := locker(i)
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		lockers[i] = l
	}
	var (
		stop     atomic.Bool
		recorded atomic.Int64
		mu       sync.Mutex
		holds    []Hold
		firstErr error
		granted  = make(chan struct{}) // closed at the next grant (mu)
		wg       sync.WaitGroup
	)
	// A failure ends the run for every goroutine, those blocked in Lock
	// included: a holder whose release failed may keep the key for good
	// (a lock with no lease, such as the raft FSM's), and its waiters would
	// wait until the case times out.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		stop.Store(true)
		cancel()
	}
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []Hold
			defer func() {
				mu.Lock()
				holds = append(holds, mine...)
				mu.Unlock()
			}()
			for !stop.Load() && ctx.Err() == nil {
				release, err := l.Lock(ctx, key)
				if err != nil {
					fail(fmt.Errorf("worker %d: acquire: %w", i, err))
					return
				}
				h := Hold{Worker: name(i), Acquired: time.Now().UnixNano()}
				mu.Lock()
				close(granted)
				granted = make(chan struct{})
				next := granted
				mu.Unlock()
				if hold > 0 {
					// The critical section: a fixed time, not a wait for
					// an event.
					time.Sleep(hold)
				}
				h.Released = time.Now().UnixNano()
				err = release(ctx)
				mine = append(mine, h)
				if recorded.Add(1) >= int64(maxHolds) {
					stop.Store(true)
				}
				if err != nil {
					fail(fmt.Errorf("worker %d: release: %w", i, err))
					return
				}
				select {
				case <-next:
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	return holds, firstErr
}

// HandoverResult describes the gaps between consecutive holds of one key.
type HandoverResult struct {
	Workers int `json:"workers"`
	// Placement says where the workers ran (nodes, processes).
	Placement string `json:"placement"`
	Holds     int    `json:"holds"`
	// Handover is the time from a release's start to the next grant, when
	// the next holder is another worker: the time a waiter waits for a
	// lock that was just given back.
	Handover *Summary `json:"handover"`
	// SameWorker counts grants that went back to the worker that had just
	// released (no hand-over: no other waiter was granted within a second).
	SameWorker int `json:"same_worker"`
	// Overlaps counts grants that returned before the previous holder had
	// begun its release: two holders at once, as seen by the callers. Any
	// is a failure of mutual exclusion (or of the clock).
	Overlaps int `json:"overlaps"`
	// Fairness, when measured, is how the grants went to the nodes.
	Fairness *Fairness `json:"fairness,omitempty"`
}

// Handovers merges holds (from one or several processes) in the order they
// were granted and measures each release-to-next-grant gap.
func Handovers(holds []Hold, workers int, placement string) *HandoverResult {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b Hold) int { return cmp.Compare(a.Acquired, b.Acquired) })
	res := &HandoverResult{Workers: workers, Placement: placement, Holds: len(hs)}
	var gaps []time.Duration
	for i := 1; i < len(hs); i++ {
		prev, next := hs[i-1], hs[i]
		switch {
		case next.Acquired < prev.Released:
			res.Overlaps++
		case next.Worker == prev.Worker:
			res.SameWorker++
		default:
			gaps = append(gaps, time.Duration(next.Acquired-prev.Released))
		}
	}
	res.Handover = Summarize(gaps)
	return res
}
