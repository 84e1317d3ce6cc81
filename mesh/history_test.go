package mesh

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// recorder turns every operation result of every node into a history for
// porcupine, the way the simulator does: each operation from the start of
// the part of it that took effect to its result, and each write whose
// outcome its operation never learned (a ghost) as an operation of its own
// that may take effect at any time after it began — until a later write of
// the same node on the same key is chosen (see quorumtest.Ghosts).
type recorder struct {
	mu     sync.Mutex
	hist   *qt.History
	ghosts qt.Ghosts
}

func (r *recorder) attach(m *Mesh) {
	holder := fmt.Sprintf("%s/%d", m.name, m.inc)
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	m.observe = func(res quorum.OpResult) {
		r.mu.Lock()
		defer r.mu.Unlock()
		now := time.Now().UnixNano()
		call := m.clock.at(res.RoundStarted).UnixNano()
		started := m.clock.at(res.Started).UnixNano()
		ghost := func(in qt.Input, out qt.Output) {
			r.ghosts.Add(res.Key, holder, -1, in, out, started, now)
		}
		if res.Swept {
			// A sweep freed another holder's expired grant: a write that
			// may take effect until a later write of this node on the key
			// is chosen (see the simulator's record of it).
			in := qt.Input{Kind: qt.Cleanup, Holder: holderName(res.Holder, res.HolderInc)}
			ghost(in, qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: res.Epoch})
			return
		}
		if len(res.Quorum) > 0 && (res.Outcome == quorum.Granted || res.Outcome == quorum.Released) {
			r.ghosts.Chosen(res.Key, holder, started, now)
		}
		out := qt.Output{Outcome: outcomeName(res.Outcome), Epoch: res.Epoch}
		var in qt.Input
		switch {
		case res.Internal:
			in = qt.Input{Kind: qt.Cleanup, Holder: holder}
			for _, e := range res.Attempted {
				if res.Outcome != quorum.Released || e != res.Epoch {
					ghost(in, qt.Output{Outcome: qt.NoQuorum, Unknown: true, Epoch: e})
				}
			}
		case res.Outcome == quorum.ReadDone:
			in = qt.Input{Kind: qt.Read, Holder: holder}
			out.Held, out.Holder = res.Value.Held, holderName(res.Value.Holder, res.Value.HolderInc)
		case res.Outcome == quorum.Released || res.Outcome == quorum.NotHeld:
			epoch := res.Epoch
			in = qt.Input{Kind: qt.Release, Holder: holder, Epoch: epoch}
			if res.Outcome == quorum.NotHeld {
				for _, e := range res.Attempted {
					ghost(qt.Input{Kind: qt.Release, Holder: holder, Epoch: e}, qt.Output{Outcome: qt.NoQuorum, Unknown: true})
				}
			}
		default: // acquires, and no-quorum results of any kind
			in = qt.Input{Kind: qt.Acquire, Holder: holder}
			if res.Outcome == quorum.Locked {
				out.Holder = holderName(res.Holder, res.HolderInc)
			}
			for _, e := range res.Attempted {
				if res.Outcome != quorum.Granted || e != res.Epoch {
					ghost(in, qt.Output{Outcome: qt.NoQuorum, Unknown: true, Attempted: []uint64{e}})
				}
			}
		}
		r.hist.Add(res.Key, -1, in, out, min(call, now), now)
	}
}

func outcomeName(o quorum.Outcome) string {
	switch o {
	case quorum.Granted:
		return qt.Granted
	case quorum.Locked:
		return qt.Locked
	case quorum.Released:
		return qt.Released
	case quorum.NotHeld:
		return qt.NotHeld
	case quorum.ReadDone:
		return qt.ReadDone
	case quorum.Cancelled:
		return qt.Cancelled
	}
	return qt.NoQuorum
}

func holderName(id quorum.NodeID, inc uint64) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d", id, inc)
}

// Clients on every node acquire, try, read and release a few keys over a
// network that drops and delays ballot messages; the whole history must be
// linearizable against the lock register's model.
// maxOpsPerWorker bounds each client's operations in
// TestRealHistoryIsLinearizable.
const maxOpsPerWorker = 25

func TestRealHistoryIsLinearizable(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	rec := &recorder{hist: qt.NewHistory()}
	for _, m := range c.nodes {
		rec.attach(m)
	}
	c.net.SetDropRate(0.02)
	c.net.SetDelay(0, 2*time.Millisecond)
	keys := []string{"x", "y"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range c.nodes {
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(i*10 + w)))
				// A bounded history: porcupine's search grows fast with
				// its length when outcomes are unknown, and CI's machine
				// is busy with other packages' tests meanwhile.
				for n := 0; n < maxOpsPerWorker && ctx.Err() == nil; n++ {
					key := keys[rng.Intn(len(keys))]
					opctx, opcancel := context.WithTimeout(ctx, 500*time.Millisecond)
					switch rng.Intn(4) {
					case 0:
						m.Holder(opctx, key)
					case 1:
						if l, err := m.TryAcquire(opctx, key); err == nil {
							l.Release(ctx)
						}
					default:
						if l, err := m.Acquire(opctx, key, WaitBehindOwnLease()); err == nil {
							l.Release(ctx)
						}
					}
					opcancel()
				}
			}()
		}
	}
	wg.Wait()
	c.net.SetDropRate(0)
	// Let background work (cleanups of unknown outcomes) finish, so that
	// every write is in the history.
	var pending, logged []int
	waitFor(t, 20*time.Second, "background work to finish", func() bool {
		pending = pending[:0]
		busy := false
		for _, m := range c.nodes {
			m.nodeMu.Lock()
			n := m.node.Proposer().Pending()
			m.nodeMu.Unlock()
			pending = append(pending, n)
			busy = busy || n > 0
		}
		if busy && !slices.Equal(pending, logged) {
			// Shown only if the wait fails; each change once, not each poll.
			t.Logf("operations pending, per node: %v", pending)
			logged = slices.Clone(pending)
		}
		return !busy
	})
	ghosts := rec.ghosts.Len()
	bounded := rec.ghosts.AddTo(rec.hist)
	t.Logf("%d operations recorded, %d of them writes of unknown outcome (%d ended by a later write of their node)",
		rec.hist.Len(), ghosts, bounded)
	if rec.hist.Len() < 50 {
		t.Fatalf("only %d operations: the test did not exercise the mesh", rec.hist.Len())
	}
	for _, v := range rec.hist.Verify(t, 30*time.Second) {
		t.Logf("%v, checked in %v", v, v.Took.Round(time.Millisecond))
	}
}
