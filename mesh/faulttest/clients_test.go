//go:build linux

package faulttest

import (
	"context"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// workload is what the background clients do, one client per node: pick a
// key, then acquire it (waiting), try it, or read its holder; a grant is
// written to the fenced resource, held a little, written again and
// released.
type workload struct {
	keys           []string
	maxHold        time.Duration // default 50ms
	maxThink       time.Duration // pause between operations; default 20ms
	acquireTimeout time.Duration // default 10s
	seed           int64
}

// clients runs a workload until stopped.
type clients struct {
	c      *cluster
	w      workload
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	took []timed // every acquire, try and read, with how long it took
}

// timed is one acquire, try or read as its client saw it.
type timed struct {
	node, kind, code string
	call, ret        int64
}

func (t timed) took() time.Duration { return time.Duration(t.ret - t.call) }

// Client ids: background clients count from 0; scripted operations of a
// test use ids from scripted up.
const scripted = 1000

// startClients starts one client on each of nodes.
func (c *cluster) startClients(w workload, nodes ...*node) *clients {
	if w.maxHold == 0 {
		w.maxHold = 50 * time.Millisecond
	}
	if w.maxThink == 0 {
		w.maxThink = 20 * time.Millisecond
	}
	if w.acquireTimeout == 0 {
		w.acquireTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &clients{c: c, w: w, cancel: cancel}
	for i, n := range nodes {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			cl.run(ctx, i, n, rand.New(rand.NewSource(w.seed+int64(i)+1)))
		}()
	}
	c.t.Cleanup(cl.stop)
	return cl
}

// stop ends the clients once their current operation is done (a held
// lease is released first).
func (cl *clients) stop() {
	cl.cancel()
	cl.wg.Wait()
}

func (cl *clients) run(ctx context.Context, id int, n *node, rng *rand.Rand) {
	c, w := cl.c, cl.w
	pause := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	for ctx.Err() == nil {
		p, changed := n.current()
		if p == nil {
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		}
		key := w.keys[rng.Intn(len(w.keys))]
		req := control.Request{Key: key}
		switch x := rng.Intn(10); {
		case x < 6:
			req.Op, req.TimeoutMS = control.OpAcquire, w.acquireTimeout.Milliseconds()
		case x < 8:
			req.Op, req.TimeoutMS = control.OpTry, 2000
		default:
			req.Op, req.TimeoutMS = control.OpHolder, 2000
		}
		res := c.do(n, id, req)
		cl.mu.Lock()
		cl.took = append(cl.took, timed{node: n.name, kind: req.Op, code: res.code(), call: res.callAt, ret: res.at})
		cl.mu.Unlock()
		switch {
		case res.err != nil || res.r.Err == control.ErrClosed:
			// The node is going or gone: wait for its next process.
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		case req.Op == control.OpHolder || !res.ok():
			pause(time.Duration(rng.Int63n(int64(w.maxThink) + 1)))
			continue
		}
		c.do(n, id, control.Request{Op: control.OpWrite, Key: key})
		pause(time.Duration(rng.Int63n(int64(w.maxHold) + 1)))
		c.do(n, id, control.Request{Op: control.OpWrite, Key: key})
		c.do(n, id, control.Request{Op: control.OpRelease, Key: key, TimeoutMS: 5000})
		pause(time.Duration(rng.Int63n(int64(w.maxThink) + 1)))
	}
}

// timings returns the acquires, tries and reads the clients made, in the
// order they ended.
func (cl *clients) timings() []timed {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := slices.Clone(cl.took)
	slices.SortFunc(out, func(a, b timed) int {
		switch {
		case a.ret < b.ret:
			return -1
		case a.ret > b.ret:
			return 1
		}
		return 0
	})
	return out
}

// percentiles returns the p-th percentiles of ds (which it sorts).
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	slices.Sort(ds)
	out := make([]time.Duration, len(ps))
	if len(ds) == 0 {
		return out
	}
	for i, p := range ps {
		j := int(p / 100 * float64(len(ds)-1))
		out[i] = ds[j]
	}
	return out
}
