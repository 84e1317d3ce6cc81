package mesh

import (
	"context"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// Every quorum operation a caller waits for (an acquire, a release, a read,
// a new value, a voter change) runs the same way, through runOp: it starts
// under the node's lock, it runs to a deadline set by one policy
// (opDeadline), its outcome comes back through m.waiters on a pooled
// channel, and when the caller's ctx ends first the operation is either
// cancelled and waited for, or left to run to its deadline, as its kind
// says (opKind).

// opKind says how long an operation may run and what ctx's end does to it.
type opKind struct {
	// def bounds an operation whose ctx has no deadline (0: the
	// proposer's own bound; forever: a wait with no end but ctx's).
	def time.Duration
	// max bounds it whatever ctx says (0: ctx's deadline stands): a try
	// gives up after a few rounds.
	max time.Duration
	// min keeps it running at least this long whatever ctx says (0: ctx's
	// deadline stands): a release frees the key in the background after
	// its caller gave up.
	min time.Duration
	// cancel: when ctx ends first, cancel the operation and wait for its
	// end, whose outcome the caller sees (an acquire: nothing may be
	// granted to a caller that is gone). Otherwise the caller gets ctx's
	// error at once and the operation runs on to its deadline (finishing
	// does no harm, and stopping half way could leave a key held or a
	// voter change half made).
	cancel bool
}

// forever stands for no deadline of an operation's own.
const forever = 100 * 365 * 24 * time.Hour

// The kinds of operation, with their bounds in round timeouts where they
// scale with the network.
func (m *Mesh) opAcquire() opKind { return opKind{def: forever, cancel: true} }
func (m *Mesh) opTry() opKind {
	return opKind{def: 3 * m.cfg.roundTimeout(), max: 3 * m.cfg.roundTimeout(), cancel: true}
}
func (m *Mesh) opRelease() opKind { return opKind{} }
func (m *Mesh) opRead() opKind    { return opKind{} }
func (m *Mesh) opSetValue() opKind {
	return opKind{def: 3 * m.cfg.roundTimeout(), max: 3 * m.cfg.roundTimeout()}
}
func (m *Mesh) opVoters() opKind { return opKind{def: time.Minute} }

// opDeadline is when an operation of kind k started now gives up, on the
// node's clock (0: the proposer's own bound).
func (m *Mesh) opDeadline(ctx context.Context, k opKind) time.Duration {
	now := m.clock.Now()
	d, ok := ctx.Deadline()
	if !ok {
		if k.def == 0 {
			return 0
		}
		return now + k.def
	}
	at := m.clock.since(d)
	if k.max > 0 {
		at = min(at, now+k.max)
	}
	if k.min > 0 {
		at = max(at, now+k.min)
	}
	return at
}

// runOp starts an operation of kind k (start runs under the node's lock,
// with the deadline opDeadline gives, and returns the operation's id, or an
// error that ends it before it began) and waits for its outcome. When ctx
// ends first, ctxErr is ctx's error, and out is the outcome the
// cancellation led to (k.cancel) or zero (the operation runs on). err is
// start's error, or ErrClosed.
func (m *Mesh) runOp(ctx context.Context, k opKind, start opStart) (out outcome, ctxErr, err error) {
	// One allocation per operation: the driver fills r in (a closure and
	// the variables it shares would cost one each).
	r := &opRun{start: start, deadline: m.opDeadline(ctx, k), ch: outcomeChans.Get().(chan outcome)}
	m.run(driveWaiter{op: r})
	if r.err != nil {
		outcomeChans.Put(r.ch) // never registered
		return outcome{}, nil, r.err
	}
	select {
	case out = <-r.ch:
		outcomeChans.Put(r.ch)
		return out, nil, nil
	case <-ctx.Done():
	case <-m.closed:
		return outcome{}, nil, ErrClosed
	}
	if !k.cancel {
		// The channel stays registered: the outcome goes to it later, and
		// it is not reused.
		return outcome{}, ctx.Err(), nil
	}
	// The operation may be in the middle of a round: wait for its end (a
	// round is bounded).
	m.drive(func(n *quorum.Node) { n.Cancel(r.id) })
	select {
	case out = <-r.ch:
		outcomeChans.Put(r.ch)
		return out, ctx.Err(), nil
	case <-m.closed:
		return outcome{}, nil, ErrClosed
	}
}

// opStart starts an operation on the node (nodeMu held), to run until
// deadline.
type opStart func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error)

// opRun is an operation runOp hands the driver to start.
type opRun struct {
	start    opStart
	deadline time.Duration
	ch       chan outcome
	id       quorum.OpID
	err      error
}

// startLocked starts the operation and registers its caller as the
// waiter of its outcome (nodeMu held).
func (r *opRun) startLocked(m *Mesh, n *quorum.Node) {
	r.id, r.err = r.start(n, r.deadline)
	if r.err == nil {
		m.waiters[r.id] = r.ch
	}
}
