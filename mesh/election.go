package mesh

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// Leader election. An election is a lock: its key is the election's name,
// its holder the leader, and the leader's value (an address, say) is the
// lease's value. Leadership is a lease, with all a lease promises:
// a fencing token that grows with every new leader (Leadership.Token; give
// it to whatever the leader writes to), a notice before the leader's
// deadline when it cannot renew (Done), and never two leaders whose
// deadlines overlap. etcd's concurrency.Election and client-go's
// leaderelection are the models; RunElection is the latter's
// LeaderElector.Run.

// Leader is an election's leader as the voters know it.
type Leader struct {
	// Name is the election's.
	Name string
	// Held: someone leads. Node, Token and Value are the leader's when it
	// does; Token is the last leader's when nobody does.
	Held  bool
	Node  string
	Token uint64
	Value []byte `json:",omitempty"`
}

func leaderOf(name string, h Holder) Leader {
	return Leader{Name: name, Held: h.Held, Node: h.Node, Token: h.Token, Value: h.Value}
}

// sameLeader reports whether two states name the same leadership.
func sameLeader(a, b Leader) bool {
	return a.Held == b.Held && a.Node == b.Node && a.Token == b.Token && bytes.Equal(a.Value, b.Value)
}

// Leadership is this node's leadership of an election: a lease on the
// election's name.
type Leadership struct {
	name string
	l    *Lease
}

// Campaign waits until this node leads the election name, then returns its
// leadership, with value published as the leader's (at most
// Config.MaxValueSize bytes; nil for none). It waits in turn with the
// other candidates (no polling), until ctx ends: then it returns a
// *CancelledError, as Acquire does. opts are Acquire's (WithTTL sets how
// long a leader that stops renewing stays leader). Like Acquire, it
// returns a *LockedError (ErrAlreadyHeld) at once if this node already
// leads name through another Leadership.
func (m *Mesh) Campaign(ctx context.Context, name string, value []byte, opts ...AcquireOption) (*Leadership, error) {
	if len(value) > 0 {
		opts = append(opts, WithValue(value))
	}
	l, err := m.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return &Leadership{name: name, l: l}, nil
}

// Name is the election's name.
func (e *Leadership) Name() string { return e.name }

// Token is the leadership's fencing token: higher than every earlier
// leader's of this election. Writes the leader makes should carry it.
func (e *Leadership) Token() uint64 { return e.l.Token() }

// Value is the value this leader publishes.
func (e *Leadership) Value() []byte { return e.l.Value() }

// Done is closed when the leadership ends: resigned, lost (before the
// deadline, when renewal fails), or the mesh closed. Err says which.
func (e *Leadership) Done() <-chan struct{} { return e.l.Done() }

// Err is nil while this node leads, and then why it stopped (see
// Lease.Err).
func (e *Leadership) Err() error { return e.l.Err() }

// Context is cancelled when the leadership ends; its cause is Err.
func (e *Leadership) Context() context.Context { return e.l.Context() }

// Lease is the leadership's lease (its deadline, renewals, grant time).
func (e *Leadership) Lease() *Lease { return e.l }

// Leader is this leadership as Leader reports it.
func (e *Leadership) Leader() Leader {
	return Leader{Name: e.name, Held: e.l.Err() == nil, Node: e.l.m.cfg.Name, Token: e.l.Token(), Value: e.l.Value()}
}

// Proclaim publishes a new value while leading (Lease.SetValue): refused
// once the leadership is lost.
func (e *Leadership) Proclaim(ctx context.Context, value []byte) error {
	return e.l.SetValue(ctx, value)
}

// Resign ends the leadership and hands the election to the next
// candidate in line (Lease.Release).
func (e *Leadership) Resign(ctx context.Context) error { return e.l.Release(ctx) }

// Leader reads who leads the election name, linearizably (as Holder
// does). It returns ErrNoLeader, with the election's last token in the
// Leader, when nobody leads.
func (m *Mesh) Leader(ctx context.Context, name string) (Leader, error) {
	h, err := m.Holder(ctx, name)
	if err != nil {
		return Leader{Name: name}, err
	}
	l := leaderOf(name, h)
	if !l.Held {
		return l, fmt.Errorf("election %s: %w", quoteKey(name), ErrNoLeader)
	}
	return l, nil
}

// Observe streams the leaders of the election name: who leads now, then
// every change — a new leader, a new value, or nobody leading — pushed by
// the voters as it happens, with Watch's guarantees: in order (tokens
// never go down), never stale for long, a slow reader sent the latest
// state. The channel is closed when ctx ends or the mesh closes.
//
// A candidate can be seen leading shortly before its Campaign returns,
// and, when a round of its campaign went unanswered on a slow or lossy
// network, with a grant its leadership does not keep: the register held
// for it under a token that the campaign then replaces with a higher one,
// or frees again. Nobody acts as leader under such a token (no Campaign
// returned it), and tokens still never go down.
func (m *Mesh) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	states, err := m.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader)
	go func() {
		defer close(out)
		var last Leader
		sent := false
		for h := range states {
			l := leaderOf(name, h)
			if sent && sameLeader(l, last) {
				continue // (a change of TimeLeft only)
			}
			select {
			case out <- l:
				last, sent = l, true
			case <-ctx.Done():
				for range states {
				}
				return
			}
		}
	}()
	return out, nil
}

// ElectionConfig is what RunElection runs.
type ElectionConfig struct {
	// Name is the election's; Value what this node publishes as leader.
	Name  string
	Value []byte
	// TTL, when set, is the leadership lease's TTL (WithTTL): how long a
	// leader that stops renewing, its process paused or gone, keeps the
	// election from the others.
	TTL time.Duration
	// OnStartedLeading runs, in a goroutine of its own, each time this
	// node becomes leader. Its ctx ends when the leadership does, before
	// another node can lead: at the loss notice, before the lease's
	// deadline, when renewal fails (RunElection also ends it by its own
	// timer at that moment, should the mesh be slow to say so), or when
	// RunElection's ctx ends, in which case RunElection waits for it to
	// return before it resigns. When it returns while still leading,
	// RunElection resigns, so that another node can take over, and
	// campaigns again. Required.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading runs after each leadership ended and
	// OnStartedLeading returned. Optional.
	OnStoppedLeading func()
	// OnNewLeader runs at every change of leader RunElection observes
	// (this node's included; Held false: nobody leads), in order, in a
	// goroutine of its own. Optional.
	OnNewLeader func(Leader)
}

// RunElection campaigns for the election ec.Name again and again, runs
// ec.OnStartedLeading while this node leads, and reports the leaders it
// observes, until ctx ends; it then stops leading (if it does), resigns,
// and returns ctx's error. It returns sooner only with an error that
// will not go away: an invalid name, value or TTL, a closed mesh.
//
//	err := m.RunElection(ctx, mesh.ElectionConfig{
//		Name: "scheduler", Value: []byte(addr),
//		OnStartedLeading: func(ctx context.Context) { schedule(ctx) },
//		OnNewLeader:      func(l mesh.Leader) { log.Printf("leader: %s", l.Value) },
//	})
func (m *Mesh) RunElection(ctx context.Context, ec ElectionConfig) error {
	if ec.OnStartedLeading == nil {
		return fmt.Errorf("%w: ElectionConfig.OnStartedLeading is nil", ErrInvalidOption)
	}
	var opts []AcquireOption
	if ec.TTL != 0 {
		opts = append(opts, WithTTL(ec.TTL))
	}
	if ec.OnNewLeader != nil {
		leaders, err := m.Observe(ctx, ec.Name)
		if err != nil {
			return err
		}
		go func() {
			for l := range leaders {
				ec.OnNewLeader(l)
			}
		}()
	}
	for {
		lead, err := m.Campaign(ctx, ec.Name, ec.Value, opts...)
		switch {
		case ctx.Err() != nil:
			if err == nil {
				m.resign(ctx, lead) // won as ctx ended: nobody leads through it
			}
			return ctx.Err()
		case err != nil:
			return err // Campaign waits until ctx ends: this will not go away
		}
		m.lead(ctx, lead, ec)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// lead runs one leadership: OnStartedLeading under a context that ends
// with it, then resigns, then OnStoppedLeading.
func (m *Mesh) lead(ctx context.Context, lead *Leadership, ec ElectionConfig) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(lead.Context(), func() { cancel(context.Cause(lead.Context())) })
	defer stop()
	go m.noticeTimer(lctx, lead.l, cancel)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ec.OnStartedLeading(lctx)
	}()
	select {
	case <-done:
	case <-lctx.Done():
		<-done
	}
	// OnStartedLeading has returned: nothing acts as leader any more.
	m.resign(ctx, lead)
	if ec.OnStoppedLeading != nil {
		ec.OnStoppedLeading()
	}
}

// resign gives up a leadership, ctx ended or not.
func (m *Mesh) resign(ctx context.Context, lead *Leadership) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*m.cfg.roundTimeout())
	defer cancel()
	lead.Resign(rctx)
}

// noticeTimer ends a leader's context at the lease's notice time unless a
// renewal moves the deadline first: the mesh's own notice does the same,
// and this one does not depend on the mesh's goroutines being on time.
func (m *Mesh) noticeTimer(ctx context.Context, l *Lease, cancel context.CancelCauseFunc) {
	for {
		renewed := l.Renewed()
		at := l.Deadline().Add(-m.noticeOf(l))
		t := time.NewTimer(time.Until(at))
		select {
		case <-t.C:
			cancel(fmt.Errorf("leadership of %q: its notice time came without a renewal: %w", l.Key(), ErrLeaseLost))
			return
		case <-renewed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// noticeOf is how long before its deadline a lease is reported lost: the
// configured notice margin, scaled by the lease's TTL (as quorumOptions
// scales it).
func (m *Mesh) noticeOf(l *Lease) time.Duration {
	return time.Duration(float64(m.cfg.Timing.NoticeMargin) * float64(l.ttl) / float64(m.cfg.Timing.TTL))
}
