package mesh

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/quorum"
)

// Lease is a lock this node holds: granted under a fencing token, renewed in
// the background, ended by Release, by loss, or by Shutdown.
//
// Work done under the lease should stop when Done closes, and writes to a
// shared resource should carry Token so that the resource can refuse a
// holder that lost its lease without noticing (see lease.Fence).
type Lease struct {
	m     *Mesh
	key   string
	token uint64

	mu       sync.Mutex
	deadline time.Time
	err      error
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelCauseFunc
	released bool
}

func newLease(m *Mesh, key string, token uint64, deadline time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{m: m, key: key, token: token, deadline: deadline, done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Key is the lock's key.
func (l *Lease) Key() string { return l.key }

// Token is the fencing token of this grant: higher than every earlier
// grant's for the key, kept by renewals, never issued twice.
func (l *Lease) Token() uint64 { return l.token }

// Deadline is until when the holder may act: the lease is reported lost
// (Done closes) before it passes unless a renewal moves it. After a release
// it is the moment of the release.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed when the lease ends: lost, released, or the mesh closed.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err says why the lease ended (nil while it is held): an error wrapping
// ErrLeaseLost, ErrReleased or ErrClosed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context is cancelled when the lease ends; its cause is Err.
func (l *Lease) Context() context.Context { return l.ctx }

// end ends the lease with err, once.
func (l *Lease) end(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	l.err = err
	close(l.done)
	l.cancel(err)
	return true
}

// Release ends the lease and frees the key for the next waiter. The lease
// ends at once (Done closes, Deadline becomes now), then the key is freed
// by a majority. Release never frees another holder's grant: it acts only on
// this grant's token. It returns nil once the key is free (or was already
// taken by someone else after this lease expired), ErrNoQuorum if the
// voters could not be reached (the grant then frees itself when it
// expires; the node keeps trying in the background), or ctx's error.
// Calling it again, or after the lease was lost, returns nil.
func (l *Lease) Release(ctx context.Context) error {
	m := l.m
	l.mu.Lock()
	if l.released || l.err != nil {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.deadline = time.Now()
	l.mu.Unlock()
	ch := outcomeChans.Get().(chan outcome)
	var startErr error
	m.drive(func(n *quorum.Node) {
		// Ending the lease under nodeMu keeps a renewal result from
		// racing with it.
		l.end(ErrReleased)
		if m.leases[l.key] == l {
			delete(m.leases, l.key)
		}
		m.gaugeLeases()
		id, err := n.Release(l.key, l.token)
		if err != nil {
			startErr = err // lost meanwhile: nothing to free
			return
		}
		m.waiters[id] = ch
	})
	if startErr != nil {
		outcomeChans.Put(ch)
		return nil
	}
	select {
	case o := <-ch:
		outcomeChans.Put(ch)
		switch {
		case o.err != nil:
			return o.err
		case o.res.Outcome == quorum.NoQuorum:
			m.incr("quorum.failures", 1)
			return fmt.Errorf("releasing %q: %w", l.key, ErrNoQuorum)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
		return ErrClosed
	}
}

// AcquireOption changes how one Acquire or TryAcquire takes a lock.
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	ttl       time.Duration
	behindOwn bool // WaitBehindOwnLease
}

// WithTTL asks for a lease of the given TTL instead of Config.Timing.TTL:
// at least 3 round timeouts, at most Config.MaxTTL. The holder's deadline,
// renewal interval and loss notice scale with it.
func WithTTL(ttl time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		o.ttl = ttl
		return nil
	}
}

// WaitBehindOwnLease makes Acquire wait, in turn, while this node itself
// holds the key through another Lease, instead of returning ErrAlreadyHeld
// at once: for a process that takes locks on behalf of several independent
// clients (as the lockmesh agent does for its lock commands), whose
// clients wait for each other as they would across nodes. TryAcquire
// still returns at once.
func WaitBehindOwnLease() AcquireOption {
	return func(o *acquireOptions) error {
		o.behindOwn = true
		return nil
	}
}

// Holder describes who holds a key, as a majority of the voters saw it.
type Holder struct {
	Key string
	// Held is false when the key is free (never taken, released, or its
	// last lease expired).
	Held bool
	// Node and Token name the holder and its grant, or the last grant
	// when the key is free (Token 0: never granted).
	Node  string
	Token uint64
}

// Acquire takes key, waiting while another lease holds it, until ctx ends.
// Waiters are woken when the key is released or its holder's lease expires,
// in turn (no polling). It returns the lease, or, when ctx ends first, ctx's
// error wrapped with why it was still waiting: ErrNoQuorum (no majority
// answered) or a *LockedError (errors.Is ErrLocked: the key was held). It
// also returns ErrInvalidKey, ErrInvalidOption, ErrNoVoters, ErrClosed.
//
// If this node already holds key through another Lease, Acquire (and
// TryAcquire) return at once with a *LockedError naming this node
// (errors.Is ErrLocked and ErrAlreadyHeld) rather than wait for that lease
// to end, which a caller re-acquiring its own lock would wait for forever.
// Goroutines of one process that take turns on a lock either share the
// Lease, or pass WaitBehindOwnLease.
func (m *Mesh) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return m.acquire(ctx, key, true, opts)
}

// TryAcquire takes key if it is free now, and returns at once otherwise:
// a *LockedError (errors.Is ErrLocked) naming the holder, or ErrNoQuorum.
func (m *Mesh) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return m.acquire(ctx, key, false, opts)
}

func (m *Mesh) acquire(ctx context.Context, key string, wait bool, opts []AcquireOption) (*Lease, error) {
	if m.isClosed() || m.leaving.Load() {
		return nil, ErrClosed
	}
	if err := m.userKey(key); err != nil {
		return nil, err
	}
	o, err := m.options(opts)
	if err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	qo := m.quorumOptions(o)
	qo.Wait = wait
	switch d, ok := ctx.Deadline(); {
	case !wait:
		// A try gives up after a few rounds, sooner if ctx says so.
		qo.Deadline = m.clock.Now() + 3*m.cfg.roundTimeout()
		if ok {
			qo.Deadline = min(qo.Deadline, m.clock.since(d))
		}
	case ok:
		qo.Deadline = m.clock.since(d)
	default:
		qo.Deadline = m.clock.Now() + 100*365*24*time.Hour
	}
	ch := outcomeChans.Get().(chan outcome)
	var id quorum.OpID
	var startErr, heldErr error
	m.drive(func(n *quorum.Node) {
		if l := m.leases[key]; l != nil && !(wait && o.behindOwn) {
			// An acquire would wait for this node's own lease to end,
			// which a caller that holds it will never see.
			heldErr = &LockedError{Key: key, Holder: m.cfg.Name, Token: l.token, ThisNode: true}
			return
		}
		id, startErr = n.Acquire(key, qo)
		if startErr == nil {
			m.waiters[id] = ch
		}
	})
	if heldErr != nil {
		outcomeChans.Put(ch)
		return nil, heldErr
	}
	if startErr != nil {
		outcomeChans.Put(ch)
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, startErr)
	}
	select {
	case out := <-ch:
		outcomeChans.Put(ch)
		l, err := m.acquired(key, out, start)
		if err != nil && wait && (out.res.Outcome == quorum.Locked || out.res.Outcome == quorum.NoQuorum) {
			// A waiting acquire ends this way only at its deadline, ctx's.
			err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
		}
		return l, err
	case <-ctx.Done():
	case <-m.closed:
		return nil, ErrClosed
	}
	// Cancelled: the operation may be in the middle of a round. Wait for
	// its end (a round is bounded), and give back a grant that raced in.
	m.drive(func(n *quorum.Node) { n.Cancel(id) })
	select {
	case out := <-ch:
		outcomeChans.Put(ch)
		if out.lease != nil {
			go out.lease.Release(context.Background())
		}
		switch out.res.Outcome {
		case quorum.NoQuorum, quorum.Locked:
			// It ended on its own, at the deadline it shares with ctx.
			_, err := m.acquired(key, out, start)
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		switch out.res.Why {
		case quorum.NoQuorum:
			m.incr("quorum.failures", 1)
			return nil, fmt.Errorf("acquiring %q: %w (%w)", key, ErrNoQuorum, ctx.Err())
		case quorum.Locked:
			return nil, fmt.Errorf("acquiring %q: %w, %w", key, ctx.Err(),
				&LockedError{Key: key, Holder: string(out.res.Holder), Token: out.res.Epoch})
		}
	case <-m.closed:
		return nil, ErrClosed
	}
	return nil, ctx.Err()
}

func (m *Mesh) acquired(key string, out outcome, start time.Time) (*Lease, error) {
	if out.err != nil {
		return nil, out.err
	}
	switch out.res.Outcome {
	case quorum.Granted:
		m.measure("acquire", start)
		return out.lease, nil
	case quorum.Locked:
		return nil, &LockedError{Key: key, Holder: string(out.res.Holder), Token: out.res.Epoch}
	case quorum.NoQuorum:
		m.incr("quorum.failures", 1)
		return nil, fmt.Errorf("acquiring %q: %w", key, ErrNoQuorum)
	case quorum.Cancelled:
		if m.leaving.Load() {
			return nil, fmt.Errorf("acquiring %q: the node is leaving: %w", key, ErrClosed)
		}
		return nil, context.Canceled
	}
	return nil, fmt.Errorf("mesh: acquiring %q: unexpected outcome %v", key, out.res.Outcome)
}

// Holder reads who holds key, linearizably: a majority of the voters
// answers, and what it says is never older than what any earlier call
// returned — except across a restart of every voter at once, which forgets
// every key (it then reads as never granted; tokens still increase).
func (m *Mesh) Holder(ctx context.Context, key string) (Holder, error) {
	if err := m.userKey(key); err != nil {
		return Holder{}, err
	}
	if err := m.waitReady(ctx); err != nil {
		return Holder{}, err
	}
	var deadline time.Duration
	if d, ok := ctx.Deadline(); ok {
		deadline = m.clock.since(d)
	}
	ch := make(chan outcome, 1)
	var startErr error
	m.drive(func(n *quorum.Node) {
		id, err := n.Read(key, deadline)
		if err != nil {
			startErr = err
			return
		}
		m.waiters[id] = ch
	})
	if startErr != nil {
		return Holder{}, startErr
	}
	select {
	case out := <-ch:
		if out.err != nil {
			return Holder{}, out.err
		}
		if out.res.Outcome != quorum.ReadDone {
			m.incr("quorum.failures", 1)
			return Holder{}, fmt.Errorf("reading %q: %w", key, ErrNoQuorum)
		}
		v := out.res.Value
		return Holder{Key: key, Held: v.Held && out.res.Live, Node: string(v.Holder), Token: v.Epoch}, nil
	case <-ctx.Done():
		// The read runs until the same deadline: no majority answered
		// in time.
		m.incr("quorum.failures", 1)
		return Holder{}, fmt.Errorf("reading %q: %w (%w)", key, ErrNoQuorum, ctx.Err())
	case <-m.closed:
		return Holder{}, ErrClosed
	}
}

func (m *Mesh) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-m.closed:
		return ErrClosed
	default:
	}
	select {
	case <-m.ready:
		return nil
	case <-m.closed:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNoVoters, ctx.Err())
	}
}

func (m *Mesh) options(opts []AcquireOption) (acquireOptions, error) {
	o := acquireOptions{ttl: m.cfg.Timing.TTL}
	for _, f := range opts {
		if err := f(&o); err != nil {
			return o, err
		}
	}
	if o.ttl < 3*m.cfg.roundTimeout() || o.ttl > m.cfg.maxTTL() {
		return o, fmt.Errorf("%w: TTL %v outside [%v, %v]", ErrInvalidOption, o.ttl, 3*m.cfg.roundTimeout(), m.cfg.maxTTL())
	}
	return o, nil
}

// quorumOptions turns a TTL into the protocol's durations, scaling the
// configured margins with the TTL.
func (m *Mesh) quorumOptions(o acquireOptions) quorum.AcquireOptions {
	t := m.cfg.Timing
	if o.ttl == t.TTL {
		return m.qo
	}
	scale := float64(o.ttl) / float64(t.TTL)
	t.NoticeMargin = time.Duration(float64(t.NoticeMargin) * scale)
	t.SafetyMargin = time.Duration(float64(t.SafetyMargin) * scale)
	t.RenewInterval = time.Duration(float64(t.RenewEvery()) * scale)
	t.TTL = o.ttl
	return timingOptions(t)
}

// timingOptions are the proposer's options for lease timing t.
func timingOptions(t lease.Timing) quorum.AcquireOptions {
	return quorum.AcquireOptions{
		TTL: t.TTL, HolderTTL: t.HolderTTL(), RenewEvery: t.RenewEvery(), Notice: t.NoticeMargin,
	}
}

// result hands an operation's result to its caller (nodeMu held). A grant
// becomes a Lease here, before any later event about it can arrive.
func (m *Mesh) result(res quorum.OpResult) {
	if m.observe != nil {
		m.observe(res)
	}
	if res.Internal {
		return
	}
	ch, ok := m.waiters[res.ID]
	if !ok {
		return
	}
	delete(m.waiters, res.ID)
	out := outcome{res: res}
	if res.Outcome == quorum.Granted {
		l := newLease(m, res.Key, res.Epoch, m.clock.at(res.Deadline))
		m.leases[res.Key] = l
		out.lease = l
		m.incr("leases.granted", 1)
		defer m.gaugeLeases()
	}
	ch <- out
}

// leaseEvent applies a renewal or a loss to the lease (nodeMu held).
func (m *Mesh) leaseEvent(ev quorum.LeaseEvent) {
	l := m.leases[ev.Key]
	if l == nil || l.token != ev.Epoch {
		return
	}
	if ev.Lost {
		delete(m.leases, ev.Key)
		l.end(fmt.Errorf("lease on %q (token %d): %s: %w", ev.Key, ev.Epoch, ev.Reason, ErrLeaseLost))
		m.incr("leases.lost", 1)
		m.log.Warn("lease lost", "key", ev.Key, "token", ev.Epoch, "reason", ev.Reason.String())
		m.gaugeLeases()
		return
	}
	l.mu.Lock()
	if l.err == nil && !l.released {
		// (A renewal that lands while Release runs must not move the
		// deadline past the release.)
		l.deadline = m.clock.at(ev.Deadline)
	}
	l.mu.Unlock()
	m.incr("leases.renewed", 1)
	m.measure("renew", m.clock.at(ev.Started))
}
