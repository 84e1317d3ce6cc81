//go:build linux

package faulttest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
	qt "github.com/lockmesh/lockmesh/quorum/quorumtest"
)

// infinity is the return time of an operation whose outcome nobody learned
// (its process died, or it never answered).
const infinity = qt.Infinity

// Kinds of recorded operation.
const (
	kindAcquire = control.OpAcquire
	kindTry     = control.OpTry
	kindRelease = control.OpRelease
	kindRead    = control.OpHolder
)

// op is one client operation as the client saw it. Times are the machine's
// monotonic clock (control.Now), as the suite observed them: Call before the
// request was written, Return when the answer was read.
type op struct {
	Key    string
	Client int
	Node   string
	Proc   string // the node's process that served it ("a#2")
	Kind   string
	Call   int64
	Return int64  // infinity when the outcome is unknown
	Code   string // "" (done), an error code of package control, or "unknown"
	Token  uint64 // granted, locked, read
	Holder string // locked, read
	Held   bool   // read
}

func (o op) String() string {
	ret := fmt.Sprint(o.Return)
	if o.Return >= infinity {
		ret = "∞"
	}
	res := "ok"
	if o.Code != "" {
		res = o.Code
	}
	return fmt.Sprintf("[%d, %s] c%d %s %s(%q) -> %s token %d holder %q held %v",
		o.Call, ret, o.Client, o.Node, o.Kind, o.Key, res, o.Token, o.Holder, o.Held)
}

// grant is one lease as its holder reported it: from the grant to the
// deadline its Lease reported last (the release moment once released).
// Times are the holder's observations on the machine's monotonic clock.
type grant struct {
	Key, Node string
	Proc      *proc // the holder's process (nil in synthetic histories)
	Token     uint64
	Call      int64 // when the suite sent the acquire
	Start     int64 // when Acquire returned in the holder
	Deadline  int64 // the deadline at the grant
	End       int64 // the end of the interval; 0 while open
	How       string
	Reported  int64         // when the holder noticed the end (0: it never said)
	done      chan struct{} // closed when End is set
}

func (g *grant) String() string {
	end := fmt.Sprint(g.End)
	if g.End == 0 {
		end = "open"
	}
	return fmt.Sprintf("%s token %d on %q [%d, %s] (%s)", g.Node, g.Token, g.Key, g.Start, end, g.How)
}

// write is one write to the fenced resource, in the order the fence saw
// them.
type write struct {
	Key, Node string
	Token     uint64
	At        int64
	Stale     bool // made with the token of a lease the writer may have lost
	Accepted  bool
	Highest   uint64 // the highest token the fence had admitted before
}

// history is what a scenario's clients did and saw, safe for concurrent
// use.
type history struct {
	mu     sync.Mutex
	ops    []op
	grants []*grant
	writes []write
	fence  lease.Fence
	// amnesias are moments when every node was down: all lock state was
	// gone (quorumtest's Amnesia).
	amnesias []int64
}

// allDown records that every node is down now, its state lost.
func (h *history) allDown(at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.amnesias = append(h.amnesias, at)
}

func (h *history) amnesiaTimes() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.amnesias)
}

// record adds a client operation with the result it got. Requests that
// were never sent, and failed reads (which change nothing), are left out.
func (h *history) record(node, proc string, client int, req control.Request, res result) {
	if errors.Is(res.err, errDown) {
		return
	}
	switch req.Op {
	case kindAcquire, kindTry, kindRelease, kindRead:
	default:
		return
	}
	o := op{Key: req.Key, Client: client, Node: node, Proc: proc, Kind: req.Op, Call: res.callAt, Return: res.at, Code: res.code()}
	if res.err != nil {
		o.Return = infinity
	} else {
		o.Token, o.Holder, o.Held = res.r.Token, res.r.Holder, res.r.Held
	}
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// granted opens a lease's interval.
func (h *history) granted(p *proc, node, key string, token uint64, call, start, deadline int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants = append(h.grants, &grant{Key: key, Node: node, Proc: p, Token: token, Call: call, Start: start,
		Deadline: deadline, done: make(chan struct{})})
}

// ended closes a lease's interval at the deadline its holder reported last.
// For a lease its holder released, the interval ends when the holder called
// Release, or at the deadline the lease had then if that was earlier (the
// lease ran out unnoticed). What Lease.Deadline says after the release is
// noted when it is later than the release: the library documents it as
// the moment of the release.
func (h *history) ended(p *proc, r control.Reply) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end, how := r.Deadline, r.Reason
	if r.Released != 0 {
		end = min(r.Released, r.Before)
		if r.Before < r.Released {
			how += fmt.Sprintf(", %v after its deadline", time.Duration(r.Released-r.Before).Round(time.Millisecond))
		}
		// Release stamps its own moment a little after ours; a renewal
		// that lands during the release moves it a whole TTL.
		if r.Deadline > r.Released+int64(100*time.Millisecond) {
			how += fmt.Sprintf(", but Deadline() says %v after the release", time.Duration(r.Deadline-r.Released).Round(time.Millisecond))
		}
	}
	for _, g := range h.grants {
		if g.Proc == p && g.Key == r.Key && g.Token == r.Token && g.End == 0 {
			g.End, g.How, g.Reported = end, how, r.At
			close(g.done)
		}
	}
}

// exited closes the intervals of a process that died without reporting
// their end: at its exit, or, if it was stopped until then, when it
// stopped (a stopped process does nothing).
func (h *history) exited(p *proc, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	how := "process exited"
	if paused := p.pausedAt(); paused != 0 {
		at, how = paused, "process stopped, then killed"
	}
	for _, g := range h.grants {
		if g.Proc == p && g.End == 0 {
			g.End, g.How = at, how
			close(g.done)
		}
	}
}

// waitEnded waits until the holder of token on key reports the lease's end
// (or its process exits), and returns the grant.
func (h *history) waitEnded(key string, token uint64, timeout time.Duration) (grant, error) {
	h.mu.Lock()
	var found *grant
	for _, g := range h.grants {
		if g.Key == key && g.Token == token {
			found = g
		}
	}
	h.mu.Unlock()
	if found == nil {
		return grant{}, fmt.Errorf("no grant of %q with token %d", key, token)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-found.done:
	case <-timer.C:
		return grant{}, fmt.Errorf("the lease on %q (token %d) did not end within %v", key, token, timeout)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return *found, nil
}

// maxToken is the highest token granted for any key so far.
func (h *history) maxToken() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m uint64
	for _, g := range h.grants {
		m = max(m, g.Token)
	}
	return m
}

// wrote applies a node's write to the fenced resource and records it. It
// returns the fence's verdict.
func (h *history) wrote(node, key string, token uint64, at int64, stale bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	highest, _ := h.fence.Highest(key)
	err := h.fence.Admit(key, token)
	h.writes = append(h.writes, write{Key: key, Node: node, Token: token, At: at, Stale: stale, Accepted: err == nil, Highest: highest})
	return err
}

// grantsOf returns copies of the intervals of key (every key when empty).
func (h *history) grantsOf(key string) []grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []grant
	for _, g := range h.grants {
		if key == "" || g.Key == key {
			out = append(out, *g)
		}
	}
	return out
}

func (h *history) opsOf(key string) []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []op
	for _, o := range h.ops {
		if key == "" || o.Key == key {
			out = append(out, o)
		}
	}
	return out
}

func (h *history) writesOf(key string) []write {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []write
	for _, w := range h.writes {
		if key == "" || w.Key == key {
			out = append(out, w)
		}
	}
	return out
}

func (h *history) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool)
	for _, o := range h.ops {
		seen[o.Key] = true
	}
	for _, g := range h.grants {
		seen[g.Key] = true
	}
	for _, w := range h.writes {
		seen[w.Key] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
