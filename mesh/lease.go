package mesh

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	m       *Mesh
	key     string
	token   uint64
	granted time.Duration // on m.clock
	ttl     time.Duration
	sem     *quorum.Semaphore // the semaphore whose slot this is (AcquireSemaphore)

	mu       sync.Mutex
	deadline time.Duration // on m.clock
	// val is the lease's value, nil while it has none and no SetValue
	// began (most leases: a node may hold 100,000, and their Lease is
	// most of what it keeps for each).
	val      *leaseValue
	err      error
	released bool
	// sig holds the channels and the context, made when first asked for
	// (a node may hold 100,000 leases, few of them watched, and renewing
	// them must not cost a channel each time): nil until then.
	sig *leaseSignals
}

// leaseValue is a Lease's value and the SetValue calls on it.
type leaseValue struct {
	value    string // as the holder last wrote it
	valueSeq uint64 // SetValue calls begun; applied is the latest that took effect
	applied  uint64
}

// values is l.val, made if there is none (l.mu held).
func (l *Lease) values() *leaseValue {
	if l.val == nil {
		l.val = &leaseValue{}
	}
	return l.val
}

// leaseSignals are how a Lease tells its watchers what happened.
type leaseSignals struct {
	renewed chan struct{} // closed when the deadline next moves, or the lease ends
	done    chan struct{} // closed when the lease ends
	ctx     context.Context
	cancel  context.CancelCauseFunc
}

// signals is l.sig, made if there is none (l.mu held).
func (l *Lease) signals() *leaseSignals {
	if l.sig == nil {
		l.sig = &leaseSignals{}
	}
	return l.sig
}

func newLease(m *Mesh, key string, token uint64, granted, deadline time.Duration, value string) *Lease {
	l := &Lease{m: m, key: key, token: token, granted: granted, deadline: deadline}
	if value != "" {
		l.val = &leaseValue{value: value}
	}
	return l
}

// Key is the lock's key.
func (l *Lease) Key() string { return l.key }

// Token is the fencing token of this grant: higher than every earlier
// grant's for the key, kept by renewals, never issued twice.
func (l *Lease) Token() uint64 { return l.token }

// Deadline is until when the holder may act: the lease is reported lost
// (Done closes) before it passes unless a renewal moves it. Only a renewal
// moves it later, and only one whose round began before it passed; once it
// has passed, the lease has ended as lost, whether or not the loss notice
// came (a process paused past it learns so from Err, Done, Context or
// Release as it resumes). A release moves it to the moment of the release,
// which is earlier: a release never makes it later.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.clock.at(l.deadline)
}

// TTL is the lease's TTL (WithTTL, or Config.Timing.TTL).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Granted is when the holder's clock started for this grant: this node
// read its clock just before it asked the voters, and the first Deadline
// was Granted plus the holder's share of the TTL. Every interval during
// which this holder may act starts at or after it.
func (l *Lease) Granted() time.Time { return l.m.clock.at(l.granted) }

// Renewed returns a channel that is closed when Deadline next moves (a
// renewal, or a SetValue, which renews too) or the lease ends. Take the
// channel before reading Deadline, then wait on it, to see every change:
//
//	for {
//		renewed := l.Renewed()
//		log.Print("held until ", l.Deadline())
//		select {
//		case <-renewed:
//		case <-l.Done():
//			return
//		}
//	}
func (l *Lease) Renewed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	sig := l.signals()
	if sig.renewed == nil {
		// (Once the lease has ended, nothing closes it: Done says so.)
		sig.renewed = make(chan struct{})
	}
	return sig.renewed
}

// moved closes the channel Renewed handed out, if any; the next call makes
// a new one (l.mu held).
func (l *Lease) moved() {
	if l.sig != nil && l.sig.renewed != nil {
		close(l.sig.renewed)
		l.sig.renewed = nil
	}
}

// Value is the lease's value (WithValue, SetValue), as the voters last
// accepted it; nil when it has none.
func (l *Lease) Value() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.val == nil {
		return nil
	}
	return l.userValue(l.val.value)
}

// userValue is v without a semaphore slot's header.
func (l *Lease) userValue(v string) []byte {
	if l.sem != nil {
		if _, data, ok := quorum.ParseSlotValue(v); ok {
			v = data
		}
	}
	if v == "" {
		return nil
	}
	return []byte(v)
}

// Done is closed when the lease ends: lost, released, or the mesh closed.
// A lease whose deadline has passed has ended: the channel Done returns
// then is closed, whether or not the loss notice came.
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkDeadline()
	sig := l.signals()
	if sig.done == nil {
		sig.done = make(chan struct{})
		if l.err != nil {
			close(sig.done)
		}
	}
	return sig.done
}

// Err says why the lease ended (nil while it is held): an error wrapping
// ErrLeaseLost, ErrReleased or ErrClosed. It reads the clock: a lease
// whose deadline has passed has ended as lost, whether or not the loss
// notice came, so a holder that checks Err before each write is told at
// once, even in the moment after a pause before the node's timers run.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkDeadline()
	return l.err
}

// Context is cancelled when the lease ends (as Done closes); its cause is
// Err.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkDeadline()
	sig := l.signals()
	if sig.ctx == nil {
		sig.ctx, sig.cancel = context.WithCancelCause(context.Background())
		if l.err != nil {
			sig.cancel(l.err)
		}
	}
	return sig.ctx
}

// end ends the lease with err, once.
func (l *Lease) end(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endLocked(err)
}

// checkDeadline ends the lease as lost if its deadline has passed (l.mu
// held): one clock read while the lease runs, none after.
func (l *Lease) checkDeadline() {
	if l.err == nil && !l.released {
		l.maybeExpire(l.m.clock.Now())
	}
}

// maybeExpire ends the lease as lost if its deadline is not after now, and
// reports whether it did (l.mu held).
//
// It may run outside nodeMu, unlike the other ways a lease ends, because
// nothing can bring a passed deadline back: the node moves a deadline only
// by a renewal or an update whose round began before the lease's notice
// time (Proposer.startRound gives up a round past its operation's
// deadline, which for these is the notice time), and leaseEvent applies
// such a result only while the deadline it moves has not passed. The node
// itself drops the lease at its notice time, which has passed too: its
// loss event then finds the lease ended. Should a renewal's answer reach
// the node first, leaseEvent finds the lease ended and has the node let
// the grant go (releaseOrphans).
func (l *Lease) maybeExpire(now time.Duration) bool {
	if l.err != nil || l.released || now < l.deadline {
		return false
	}
	l.endLocked(fmt.Errorf("lease on %q (token %d): its deadline passed: %w", l.key, l.token, ErrLeaseLost))
	l.m.incr("leases.lost", 1)
	l.m.log.Warn("lease lost", "key", l.key, "token", l.token, "reason", "its deadline passed before the loss notice (the process paused?)")
	return true
}

// endLocked is end with l.mu held.
func (l *Lease) endLocked(err error) bool {
	if l.err != nil {
		return false
	}
	l.err = err
	l.m.holdingAdd(l.ttl, -1)
	if l.sig != nil && l.sig.done != nil {
		close(l.sig.done)
	}
	l.moved()
	if l.sig != nil && l.sig.cancel != nil {
		l.sig.cancel(err)
	}
	return true
}

// Release ends the lease and frees the key for the next waiter. The lease
// ends at once (Done closes, Deadline becomes now, which is earlier), then
// the key is freed by a majority. Release never frees another holder's
// grant: it acts only on this grant's token. Rounds that hear no majority
// (voters slow to answer, under load, say) are tried again until ctx's
// deadline, or for 20 round timeouts if that is later or ctx has none. It
// returns nil once the key is free (or was already taken by someone else
// after this lease expired), ErrNoQuorum if the voters could not be
// reached by then (the grant then frees itself when it expires), or ctx's
// error (the node keeps trying in the background until that same
// deadline).
// Calling it again returns nil. Called on a lease that had already ended
// otherwise, it says how: an error wrapping ErrLeaseLost (as Err does),
// or ErrClosed. A lease whose deadline has passed has ended as lost,
// whether or not the loss notice came: Release then returns that error,
// and Deadline stays as it was.
func (l *Lease) Release(ctx context.Context) error {
	m := l.m
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.checkDeadline()
	if err := l.err; err != nil {
		l.mu.Unlock()
		return err
	}
	// The deadline has not passed (checkDeadline): the release shortens
	// it, never lengthens it. A holder's interval ends at the Deadline its
	// Lease reports, and one reported after the real deadline would
	// overlap the next holder's.
	l.released = true
	l.deadline = min(l.deadline, m.clock.Now())
	l.mu.Unlock()
	o, ctxErr, err := m.runOp(ctx, m.opRelease(), func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error) {
		// Ending the lease under nodeMu keeps a renewal result from
		// racing with it.
		if !l.end(ErrReleased) {
			return 0, l.Err() // lost (or closed) a moment ago
		}
		if n.LeaseTag(l.key) == any(l) {
			n.TagLease(l.key, l.token, nil) // no longer one of this node's leases
		}
		m.gaugeLeases()
		id, err := n.Release(l.key, l.token, deadline)
		if err != nil {
			// Lost meanwhile: nothing to free.
			return 0, fmt.Errorf("releasing %q (token %d): %w", l.key, l.token, ErrLeaseLost)
		}
		return id, nil
	})
	switch {
	case err != nil:
		return err
	case ctxErr != nil:
		return ctxErr // the node keeps trying until the same deadline
	case o.err != nil:
		return o.err
	case o.res.Outcome == quorum.NoQuorum:
		m.incr("quorum.failures", 1)
		return fmt.Errorf("releasing %q: %w", l.key, ErrNoQuorum)
	}
	return nil
}

// AcquireOption changes how one Acquire or TryAcquire takes a lock.
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	ttl       time.Duration
	behindOwn bool // WaitBehindOwnLease
	value     string
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

// WithValue publishes value with the grant, at most Config.MaxValueSize
// bytes (ErrValueTooLarge otherwise): Holder, Watch, Locks and Leader
// report it while the lease is held, and a TryAcquire that finds the key
// held names it (LockedError.Value). Lease.SetValue changes it; a new
// grant starts with its own. The value travels with every renewal, to every
// voter: keep it small. It needs every node on protocol version 3
// (ErrUpgradeRequired otherwise).
func WithValue(value []byte) AcquireOption {
	return func(o *acquireOptions) error {
		o.value = string(value)
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
	// when the key is free (Token 0: never granted, or forgotten).
	Node  string
	Token uint64
	// Value is the holder's value (WithValue, Lease.SetValue); nil when
	// the key is free.
	Value []byte `json:",omitempty"`
	// TimeLeft is about how long the lease had left when the voters last
	// said (Watch, Locks; zero from Holder and for a free key): the
	// longest time a voter's timer had to run, on that voter's clock.
	TimeLeft time.Duration `json:",omitempty"`
}

// Acquire takes key, waiting while another lease holds it, until ctx ends.
// Waiters are woken when the key is released or its holder's lease expires,
// in turn (no polling). It returns the lease, or, when ctx ends first, a
// *CancelledError: ctx's error, what the acquire was still waiting for
// (ErrNoQuorum: no majority answered; a *LockedError: the key was held),
// and whether a grant happened as ctx ended and was given back. It also
// returns ErrInvalidKey, ErrInvalidOption, ErrValueTooLarge, ErrNoVoters,
// ErrClosed.
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
	if o.value != "" {
		if err := m.valuesAllowed(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	qo := m.quorumOptions(o)
	qo.Wait, qo.Data = wait, o.value
	kind := m.opAcquire()
	if !wait {
		kind = m.opTry()
	}
	out, ctxErr, err := m.runOp(ctx, kind, func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error) {
		if l, _ := n.LeaseTag(key).(*Lease); l != nil && !(wait && o.behindOwn) {
			// An acquire would wait for this node's own lease to end,
			// which a caller that holds it will never see.
			return 0, &LockedError{Key: key, Holder: m.cfg.Name, Token: l.token, ThisNode: true}
		}
		q := qo // qo stays as it was captured: a copy, not a shared variable
		q.Deadline = deadline
		id, err := n.Acquire(key, q)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		return id, nil
	})
	switch {
	case err != nil:
		return nil, err
	case ctxErr != nil:
		// Cancelled: the outcome says whether a grant raced in, given back.
		return nil, m.cancelled(key, out, start, ctxErr)
	}
	l, err := m.acquired(key, out, start)
	if err != nil && wait && (out.res.Outcome == quorum.Locked || out.res.Outcome == quorum.NoQuorum) {
		// A waiting acquire ends this way only at its deadline, ctx's.
		err = &CancelledError{Key: key, Err: context.DeadlineExceeded, Waiting: err, Unknown: out.res.Unknown}
	}
	return l, err
}

// cancelled is the error of an acquire whose ctx ended, from the outcome
// its cancellation led to.
func (m *Mesh) cancelled(key string, out outcome, start time.Time, ctxErr error) error {
	e := &CancelledError{Key: key, Err: ctxErr, Unknown: out.res.Unknown}
	if out.err != nil {
		return out.err
	}
	if out.lease != nil {
		// Granted as ctx ended: nobody will use it.
		e.GaveBack, e.Unknown = true, false
		go out.lease.Release(context.Background())
		m.measure("acquire.cancelled", start)
		return e
	}
	switch out.res.Outcome {
	case quorum.NoQuorum, quorum.Locked:
		// It ended on its own, at the deadline it shares with ctx.
		_, e.Waiting = m.acquired(key, out, start)
		return e
	}
	switch out.res.Why {
	case quorum.NoQuorum:
		m.incr("quorum.failures", 1)
		m.measure("acquire.no_quorum", start)
		e.Waiting = fmt.Errorf("acquiring %q: %w", key, ErrNoQuorum)
	case quorum.Locked:
		m.measure("acquire.locked", start)
		e.Waiting = &LockedError{Key: key, Holder: string(out.res.Holder), Token: out.res.Epoch}
	default:
		m.measure("acquire.cancelled", start)
	}
	return e
}

func (m *Mesh) acquired(key string, out outcome, start time.Time) (*Lease, error) {
	if out.err != nil {
		return nil, out.err
	}
	switch out.res.Outcome {
	case quorum.Granted:
		m.measure("acquire.granted", start)
		return out.lease, nil
	case quorum.Locked:
		m.measure("acquire.locked", start)
		return nil, &LockedError{Key: key, Holder: string(out.res.Holder), Token: out.res.Epoch, Value: bytesOf(out.res.Data)}
	case quorum.NoQuorum:
		m.incr("quorum.failures", 1)
		m.measure("acquire.no_quorum", start)
		return nil, fmt.Errorf("acquiring %q: %w", key, ErrNoQuorum)
	case quorum.Cancelled:
		m.measure("acquire.cancelled", start)
		if m.leaving.Load() {
			return nil, fmt.Errorf("acquiring %q: the node is leaving: %w", key, ErrClosed)
		}
		return nil, context.Canceled
	}
	return nil, fmt.Errorf("mesh: acquiring %q: unexpected outcome %v", key, out.res.Outcome)
}

// bytesOf is s as a fresh slice, nil when empty.
func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// Holder reads who holds key, linearizably: a majority of the voters
// answers, and what it says is never older than what any earlier call
// returned — except across a restart of every voter at once, which forgets
// every key, and for a free key the voters have forgotten (both then read
// as never granted, Token 0; the next grant's token is still higher than
// every earlier one).
func (m *Mesh) Holder(ctx context.Context, key string) (Holder, error) {
	if err := m.userKey(key); err != nil {
		return Holder{}, err
	}
	h, err := m.readHolder(ctx, key)
	return shown(h), err
}

// readHolder is Holder with the register's value as it is.
func (m *Mesh) readHolder(ctx context.Context, key string) (Holder, error) {
	if err := m.waitReady(ctx); err != nil {
		return Holder{}, err
	}
	out, ctxErr, err := m.runOp(ctx, m.opRead(), func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error) {
		return n.Read(key, deadline)
	})
	switch {
	case err != nil:
		return Holder{}, err
	case ctxErr != nil:
		// The read runs until the same deadline: no majority answered
		// in time.
		m.incr("quorum.failures", 1)
		return Holder{}, fmt.Errorf("reading %q: %w (%w)", key, ErrNoQuorum, ctxErr)
	case out.err != nil:
		return Holder{}, out.err
	case out.res.Outcome != quorum.ReadDone:
		m.incr("quorum.failures", 1)
		return Holder{}, fmt.Errorf("reading %q: %w", key, ErrNoQuorum)
	}
	return holderOf(key, out.res.Value, out.res.Live, 0), nil
}

// holderOf describes a register's value: held when a lease of it runs.
func holderOf(key string, v quorum.Value, live bool, left time.Duration) Holder {
	h := Holder{Key: key, Held: v.Held && live, Node: string(v.Holder), Token: v.Epoch}
	if h.Held {
		h.Value, h.TimeLeft = bytesOf(v.Data), left
	}
	return h
}

// shown is h as the application sees it: a semaphore's slot (NAME#i)
// shows the holder's value, without the header that carries the
// semaphore's N (which the semaphore's own checks read).
func shown(h Holder) Holder {
	if h.Held && strings.Contains(h.Key, "#") {
		if _, data, ok := quorum.ParseSlotValue(string(h.Value)); ok {
			h.Value = bytesOf(data)
		}
	}
	return h
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
	if err := m.checkValue(o.value); err != nil {
		return o, err
	}
	return o, nil
}

// checkValue refuses a value over MaxValueSize.
func (m *Mesh) checkValue(v string) error {
	if n, limit := len(v), m.cfg.maxValueSize(); n > limit {
		return fmt.Errorf("%w: %d bytes, and Config.MaxValueSize is %d", ErrValueTooLarge, n, limit)
	}
	return nil
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
		l := newLease(m, res.Key, res.Epoch, res.LeaseStart, res.Deadline, res.Value.Data)
		l.ttl = res.Value.TTL
		m.holdingAdd(l.ttl, 1) // until l.end
		// The node keeps it with the lease (Node.LeaseTag): the mesh's
		// table of its leases. Its renewals name it (LeaseEvent.Tag): no
		// lookup by key for each of them (a twelfth of a holder's CPU at
		// 100,000 leases).
		tagged := m.node.TagLease(res.Key, res.Epoch, l)
		out.lease = l
		m.incr("leases.granted", 1)
		if !tagged {
			// The node holds it no more: this Ready reported its loss
			// too, among the lease events, which leaseEvents applied
			// before any Lease stood for it (a stall between the step
			// that granted it and a tick past its notice time). No event
			// is left to end it: it ends now.
			l.end(fmt.Errorf("lease on %q (token %d): lost before its grant was reported: %w", res.Key, res.Epoch, ErrLeaseLost))
			m.incr("leases.lost", 1)
			m.log.Warn("lease lost before its grant was reported", "key", res.Key, "token", res.Epoch)
		}
		defer m.gaugeLeases()
	}
	ch <- out
}

// leaseEvents applies a Ready's renewals and losses to the leases (nodeMu
// held). The renewals a pass started share their start, and those that end
// in one Ready end together: they are counted and timed once per start,
// not once per lease (a node may renew 30,000 leases a second).
func (m *Mesh) leaseEvents(evs []quorum.LeaseEvent) {
	if len(evs) == 0 {
		return
	}
	now := m.clock.Now()
	var start time.Duration
	n := uint64(0)
	for _, ev := range evs {
		if !m.leaseEvent(ev, now) {
			continue
		}
		if n > 0 && ev.Started != start {
			m.renewals(start, n)
			n = 0
		}
		start = ev.Started
		n++
	}
	if n > 0 {
		m.renewals(start, n)
	}
}

// renewals counts and times n renewals that started at start.
func (m *Mesh) renewals(start time.Duration, n uint64) {
	m.incr("leases.renewed", float32(n))
	m.measureN("renew", m.clock.at(start), n)
}

// leaseEvent applies a renewal or a loss to the lease, and reports whether
// it was a renewal of a lease held here (nodeMu held; now is the clock as
// the Ready's events are applied). The event names its Lease (Tag, set by
// result) unless it came before the grant was reported.
func (m *Mesh) leaseEvent(ev quorum.LeaseEvent, now time.Duration) bool {
	l, _ := ev.Tag.(*Lease)
	if l == nil {
		l, _ = m.node.LeaseTag(ev.Key).(*Lease)
	}
	if l == nil || l.token != ev.Epoch {
		return false
	}
	if ev.Lost {
		if l.end(fmt.Errorf("lease on %q (token %d): %s: %w", ev.Key, ev.Epoch, ev.Reason, ErrLeaseLost)) {
			m.incr("leases.lost", 1)
			m.log.Warn("lease lost", "key", ev.Key, "token", ev.Epoch, "reason", ev.Reason.String())
		}
		// (Else it ended here meanwhile: released, closed, or past its
		// deadline, which Err or Done saw before the node did.)
		m.gaugeLeases()
		return false
	}
	l.mu.Lock()
	// A renewal whose answers came after the deadline had passed (the
	// process paused between sending and hearing them, say) does not
	// bring the lease back: the holder may already have been told that it
	// ended, and was told nothing in between. Nor does one that lands
	// while Release runs move the deadline past the release.
	l.maybeExpire(now)
	live := l.err == nil && !l.released
	if live && ev.Deadline > l.deadline {
		l.deadline = ev.Deadline
		l.moved()
	}
	orphan := !live && !l.released && errors.Is(l.err, ErrLeaseLost)
	l.mu.Unlock()
	if orphan {
		// The node holds, and renews, a grant whose Lease has ended.
		m.orphans = append(m.orphans, l)
	}
	return live
}

// releaseOrphans has the node let go of the grants it renewed after their
// Lease had ended as lost (nodeMu held): nobody acts under them, and the
// node would renew them for as long as it runs. Freeing the key is safe:
// the holder stopped when its Lease ended.
func (m *Mesh) releaseOrphans() {
	for i, l := range m.orphans {
		m.orphans[i] = nil
		if m.node.LeaseTag(l.key) != any(l) {
			continue // let go meanwhile
		}
		m.node.TagLease(l.key, l.token, nil)
		m.node.Release(l.key, l.token, 0) // its result goes to no caller
	}
	m.orphans = m.orphans[:0]
	m.gaugeLeases()
}
