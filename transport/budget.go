package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// budget bounds the bytes of frames a transport holds at once, across all
// its connections (TCPConfig.MaxBytesInFlight). Without it, what a flood of
// connections can pin is the product of limits: MaxInboundConns frames of
// MaxFrameSize each (4 GiB by default), since the connections a peer may
// open are counted by a name that, without TLS, its hello only claims.
//
// A frame's body is reserved before it is read (so before it is
// allocated): in arrival order, a frame that does not fit waits unread,
// its sender held back by TCP's flow control, until earlier ones are done
// or its FrameTimeout runs out. Bodies are released when the handler
// returns (accepted connections) or when the reply is handed to its caller
// (dialed ones). A reply queued on an accepted connection is reserved when
// queued, without waiting (its handler has run; waiting would hold it
// uncounted), and released once written.
type budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	waiters []*budgetWaiter // FIFO: a large frame is not overtaken forever

	peak    atomic.Int64
	refused atomic.Uint64
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

func newBudget(limit int) *budget { return &budget{limit: int64(limit)} }

// acquire reserves n bytes, waiting until they fit, deadline passes or done
// closes. It reports whether the bytes were reserved.
func (b *budget) acquire(n int, deadline time.Time, done <-chan struct{}) bool {
	want := int64(n)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+want <= b.limit {
		b.take(want)
		b.mu.Unlock()
		return true
	}
	w := &budgetWaiter{n: want, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-w.ready:
		return true
	case <-timer.C:
	case <-done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		return true // granted while giving up: keep it
	default:
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.refused.Add(1)
	b.grantLocked() // a large waiter at the head may have held back smaller ones
	return false
}

// tryAcquire reserves n bytes if they fit now, ahead of waiting frames: it
// is for replies whose handler already ran.
func (b *budget) tryAcquire(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+int64(n) > b.limit {
		b.refused.Add(1)
		return false
	}
	b.take(int64(n))
	return true
}

// release gives back n reserved bytes and wakes the waiters that now fit.
func (b *budget) release(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= int64(n)
	if b.used < 0 {
		panic("transport: budget released more than reserved")
	}
	b.grantLocked()
	b.mu.Unlock()
}

func (b *budget) take(n int64) {
	b.used += n
	if b.used > b.peak.Load() {
		b.peak.Store(b.used)
	}
}

func (b *budget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.take(w.n)
		close(w.ready)
	}
}

// inUse returns the bytes reserved now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
