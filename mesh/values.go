package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
)

// Lease values, and what a mesh of mixed protocol versions does with them.
//
// A lease's value travels in the key's register (quorum.Value.Data): with
// the grant, every renewal and write-back, catch-ups and the moves of a
// voter change. Nodes of protocol version 3 carry it; earlier ones do not
// know the field (version 2 skips it, version 1 refuses a message that has
// it), and one that read a register would write it back without the
// value. So, while a rolling upgrade from version 2 or 1 runs:
//
//   - nothing of version 3 is sent to an older node: values are left out
//     of what it is sent, an accept that carries a value is not sent to
//     it (that voter does not vote on it), and observations are plain
//     peeks to it (wire.EncodeRequestFor, sendParts);
//   - setting a value (WithValue, SetValue, Campaign with a value,
//     AcquireSemaphore), Watch, Observe and Locks return
//     ErrUpgradeRequired, naming the older nodes, while gossip shows one
//     alive: locks and tokens work as before, values wait for the upgrade;
//   - a voter refuses, from an older node, an accept that would write a
//     grant it holds with a value back without it (quorum.Request.NoData),
//     and a catch-up of an older voter while it holds values: refused, not
//     obeyed (and logged), never silently dropped.
//
// Once every node runs version 3, values work. Running an older node in a
// mesh that uses values (a downgrade) is not supported: its operations on
// keys with values are refused as above, and it would serve none of them.

// supported is the range of protocol versions this node speaks.
func (m *Mesh) supported() wire.Range {
	r := wire.Supported
	if m.cfg.maxVersion != 0 {
		r.Max = min(r.Max, m.cfg.maxVersion)
	}
	return r
}

// valuesAllowed refuses what needs protocol version 3 while gossip shows a
// node alive that speaks only earlier ones (or this node does).
func (m *Mesh) valuesAllowed() error {
	var old []string
	if m.supported().Max < wire.Version3 {
		old = append(old, fmt.Sprintf("%s (this node, version %s)", m.cfg.Name, m.supported()))
	}
	for _, p := range m.book.snapshot() {
		if p.state != "alive" || p.name == m.cfg.Name {
			continue
		}
		theirs, _ := p.meta.Settings()
		if v, ok := m.supported().Common(theirs.Versions); !ok || v < wire.Version3 {
			old = append(old, fmt.Sprintf("%s (version %s)", p.name, theirs.Versions))
		}
	}
	if len(old) == 0 {
		return nil
	}
	slices.Sort(old)
	return fmt.Errorf("%w: lease values, watches and listings need every node on protocol version %d or later, and %s: finish the upgrade first",
		ErrUpgradeRequired, wire.Version3, strings.Join(old, ", "))
}

// SetValue replaces the lease's value (see WithValue) with value, by a
// write through a majority of the voters that only this grant can make:
// it is refused once the lease is lost, so a holder that lost its lease
// cannot change what its successor published. It renews the lease as it
// goes (Deadline moves; Renewed fires). It returns nil once a majority
// holds the new value (Holder, Watch and Value report it from then on),
// an error wrapping ErrLeaseLost (the lease ended), ErrNoQuorum (the
// value may or may not have been written; renewals carry whichever a
// majority holds), ErrValueTooLarge, ErrUpgradeRequired, or ctx's error
// (likewise: written or not).
func (l *Lease) SetValue(ctx context.Context, value []byte) error {
	m := l.m
	v := string(value)
	if l.sem != nil {
		v = l.sem.SlotValue(v)
	}
	if err := m.checkValue(v); err != nil {
		return err
	}
	if err := m.valuesAllowed(); err != nil {
		return err
	}
	l.mu.Lock()
	l.checkDeadline() // past it, the lease has ended
	if err := l.err; err != nil || l.released {
		l.mu.Unlock()
		if err == nil {
			err = ErrReleased
		}
		return fmt.Errorf("setting the value of %q: %w", l.key, err)
	}
	val := l.values()
	val.valueSeq++
	seq := val.valueSeq
	l.mu.Unlock()
	out, ctxErr, err := m.runOp(ctx, m.opSetValue(), func(n *quorum.Node, deadline time.Duration) (quorum.OpID, error) {
		id, err := n.Update(l.key, l.token, v, deadline)
		if err != nil {
			return 0, fmt.Errorf("setting the value of %q (token %d): %w", l.key, l.token, ErrLeaseLost)
		}
		return id, nil
	})
	switch {
	case err != nil:
		return err
	case ctxErr != nil:
		// The update runs on until its own deadline (at most a few round
		// timeouts): written or not, renewals carry what a majority holds.
		return fmt.Errorf("setting the value of %q: %w (it may or may not have been written)", l.key, ctxErr)
	case out.err != nil:
		return out.err
	case out.res.Outcome == quorum.Updated:
		l.mu.Lock()
		if seq > val.applied {
			val.value, val.applied = v, seq
		}
		l.mu.Unlock()
		return nil
	case out.res.Outcome == quorum.NotHeld:
		return fmt.Errorf("setting the value of %q (token %d): %w", l.key, l.token, ErrLeaseLost)
	}
	m.incr("quorum.failures", 1)
	return fmt.Errorf("setting the value of %q: %w (it may or may not have been written)", l.key, ErrNoQuorum)
}

// carriesValues reports whether a catch-up answer holds a grant with a
// value.
func carriesValues(r *quorum.CatchUpResponse) bool {
	return slices.ContainsFunc(r.Entries, func(e quorum.Entry) bool { return e.Value.Data != "" })
}

// refuseOldCatchUp refuses a voter of an earlier protocol version the
// registers it asked for: it would keep their grants without their values.
// It then stays out of the vote (it cannot catch up from this voter) until
// it is upgraded.
func (m *Mesh) refuseOldCatchUp(to quorum.NodeID) error {
	m.incr("rpc.refused_old_catch_up", 1)
	if m.noisy.allow("old catch-up " + string(to)) {
		m.log.Error("refusing a catch-up to a voter of an earlier protocol version: leases here carry values it would drop; upgrade it",
			"voter", to)
	}
	return fmt.Errorf("%w: %s cannot take over lease values: upgrade it to protocol version %d", ErrUpgradeRequired, to, wire.Version3)
}
