package quorumtest

import (
	"cmp"
	"slices"
	"strconv"
	"sync"

	"github.com/anishathalye/porcupine"
)

// Infinity is the return time of an operation whose caller never learned
// its outcome (its node crashed, say).
const Infinity = int64(1) << 62

// History records operations on many keys, safely from many goroutines.
type History struct {
	mu       sync.Mutex
	ops      map[string][]porcupine.Operation
	open     map[int]pending
	next     int
	amnesias []int64
	losses   []int64 // MajorityLoss
	name     string
	verdicts map[string]Verdict
}

type pending struct {
	key    string
	client int
	input  Input
	call   int64
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{ops: make(map[string][]porcupine.Operation), open: make(map[int]pending)}
}

// SetName names the history in the files its failed checks leave (see
// Check): the test's name, and whatever tells one run of it from another
// (a seed, an era). Verify uses the test's name when none was set.
func (h *History) SetName(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.name = name
}

// Call records the start of an operation and returns its handle.
func (h *History) Call(key string, client int, in Input, at int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.open[h.next] = pending{key: key, client: client, input: in, call: at}
	return h.next
}

// Retime moves the call of an open operation later, to the start of the
// part of it that could take effect (its last round): a tighter interval is
// still a correct one, and it spares the checker much work.
func (h *History) Retime(handle int, call int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.open[handle]; ok && call > p.call {
		p.call = call
		h.open[handle] = p
	}
}

// Return records the end of the operation with the given handle.
func (h *History) Return(handle int, out Output, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.open[handle]
	if !ok {
		return
	}
	delete(h.open, handle)
	h.ops[p.key] = append(h.ops[p.key], porcupine.Operation{
		ClientId: p.client, Input: p.input, Output: out, Call: p.call, Return: at,
	})
}

// Add records a whole operation at once.
func (h *History) Add(key string, client int, in Input, out Output, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[key] = append(h.ops[key], porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// Amnesia records that every node was down at once at the given time, all
// their state lost (a full restart): every key's history gets an amnesia
// operation there, and every operation that began before it is taken to
// have ended before it (whatever it did, it did before its node died).
func (h *History) Amnesia(at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.amnesias = append(h.amnesias, at)
}

// MajorityLoss records that the voters of a majority lost their state at
// the given time (crashed together, memory only) while other nodes ran on.
// Unlike a full restart, operations in flight go on across it; and every
// register may afterwards hold any value the surviving voters accepted, an
// older one than a majority had chosen. From there on the history of a key
// is linearizable again, but not across the loss: no quorum system keeps a
// value that a majority forgot. (Exclusion and tokens do not rest on the
// register's history; the simulator checks them on their own.)
func (h *History) MajorityLoss(at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.losses = append(h.losses, at)
}

// Abandon closes every open operation as one whose outcome nobody learned.
func (h *History) Abandon(filter func(client int) bool) {
	h.mu.Lock()
	handles := make([]int, 0, len(h.open))
	for id, p := range h.open {
		if filter == nil || filter(p.client) {
			handles = append(handles, id)
		}
	}
	h.mu.Unlock()
	slices.Sort(handles)
	for _, id := range handles {
		h.mu.Lock()
		p := h.open[id]
		h.mu.Unlock()
		out := Output{Outcome: NoQuorum, Unknown: true}
		if p.input.Kind == Acquire {
			out.AnyEpoch = true
		}
		h.Return(id, out, Infinity)
	}
}

// Len is the number of recorded operations.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ops := range h.ops {
		n += len(ops)
	}
	return n
}

// Keys lists the keys with recorded operations, sorted.
func (h *History) Keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.ops))
	for k := range h.ops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Ops returns the operations recorded for key.
func (h *History) Ops(key string) []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops[key])
}

// informative reports whether an operation constrains the history: one
// that certainly changed nothing and reported nothing (no quorum, cancelled,
// a cleanup that declined) is a no-op the model accepts in every state, and
// leaving it out spares the checker the work of placing it (an abandoned
// one overlaps everything after it).
func informative(op porcupine.Operation) bool {
	out := op.Output.(Output)
	if out.Unknown {
		return true
	}
	switch out.Outcome {
	case NoQuorum, Cancelled:
		return false
	case NotHeld:
		return op.Input.(Input).Kind != Cleanup
	}
	return true
}

// meta is what the visualisation shows of an operation besides its
// description: the client that ran it (the rows are lanes, see lanes).
type meta struct{ client int }

func (m meta) String() string {
	switch m.client {
	case amnesiaClient:
		return "every node"
	case -1:
		return "no client named"
	}
	return "client " + strconv.Itoa(m.client)
}

// amnesiaClient is the client of amnesia operations.
const amnesiaClient = -1 << 30

// checkedOps returns what the checker gets for key: the operations that
// constrain its history, each ended before the first amnesia after its
// call, and the amnesias; each on a lane of its own client (ClientId), with
// its client in Metadata.
func (h *History) checkedOps(key string) []porcupine.Operation {
	h.mu.Lock()
	amnesias := slices.Clone(h.amnesias)
	h.mu.Unlock()
	slices.Sort(amnesias)
	var ops []porcupine.Operation
	for _, op := range h.Ops(key) {
		if !informative(op) {
			continue
		}
		if i, _ := slices.BinarySearch(amnesias, op.Call+1); i < len(amnesias) && op.Return >= amnesias[i] {
			op.Return = max(op.Call, amnesias[i]-1)
		}
		op.Metadata = meta{client: op.ClientId}
		ops = append(ops, op)
	}
	ops = dropUnobservedGhosts(ops)
	for _, at := range amnesias {
		ops = append(ops, porcupine.Operation{ClientId: amnesiaClient, Input: Input{Kind: Amnesia}, Output: Output{},
			Call: at, Return: at, Metadata: meta{client: amnesiaClient}})
	}
	h.mu.Lock()
	for _, at := range h.losses {
		ops = append(ops, porcupine.Operation{ClientId: amnesiaClient, Input: Input{Kind: MajorityLost}, Output: Output{},
			Call: at, Return: at, Metadata: meta{client: amnesiaClient}})
	}
	h.mu.Unlock()
	lanes(ops)
	return ops
}

// dropUnobservedGhosts leaves out the writes of unknown outcome (ghosts of
// acquires, with their attempted epochs) that no operation can have
// observed. Ghosts are what makes a check slow: each may be placed anywhere
// in its interval, which may run to the end of the run, and a run that ends
// in a duel of acquires under faults leaves dozens of them overlapping (36
// on one key in a run of 7 voters, undecided after 20 s).
//
// Leaving an operation out can never hide a violation: a ghost may always
// have done nothing, so a history linearizable without it is linearizable
// with it. It could only make a correct history fail, were the ghost's write
// needed to explain it; it is not when, for each epoch e it attempted:
//
//   - no other operation names e (an input's or output's epoch, another
//     ghost's attempts): a read, a release, a cleanup, a "locked by" that
//     saw the register held at e, or a free read at e, needs the write;
//   - no release that may follow the ghost answered "not held" about a
//     grant the ghost's write may have taken the register from: one the
//     register may have held before the write (see firstHeld);
//   - no cleanup of the ghost's node of unknown outcome and epoch may follow
//     it: it may have freed the write, at e, unnamed.
//
// Otherwise the register without the write allows everything the register
// with it allows: the write's epoch is above every bound before it, so any
// grant above it is above them too, any "locked by" at an epoch above it is
// allowed either way, and an amnesia's floor is lower without it.
func dropUnobservedGhosts(ops []porcupine.Operation) []porcupine.Operation {
	named := make(map[uint64]int) // epoch -> operations naming it
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		for _, e := range slices.Compact([]uint64{in.Epoch, out.Epoch}) {
			named[e]++
		}
		for _, e := range out.Attempted {
			named[e]++
		}
	}
	held := firstHeld(ops)
	unobserved := func(g porcupine.Operation) bool {
		in, out := g.Input.(Input), g.Output.(Output)
		if in.Kind != Acquire || !out.Unknown || out.AnyEpoch || in.Epoch != 0 || out.Epoch != 0 {
			return false
		}
		for _, e := range out.Attempted {
			if e == 0 || named[e] > 1 { // named elsewhere, or twice here
				return false
			}
		}
		for _, op := range ops {
			if op.Return <= g.Call {
				continue // before the ghost began: cannot follow its write
			}
			oin, oout := op.Input.(Input), op.Output.(Output)
			switch {
			case oin.Kind == Release && oout.Outcome == NotHeld && !oout.Unknown:
				if at, ok := held.at(oin.Holder, oin.Epoch); ok && at <= g.Return {
					return false
				}
			case oin.Kind == Cleanup && oout.Unknown && oout.Epoch == 0 && oin.Holder == in.Holder:
				return false
			}
		}
		return true
	}
	kept := ops[:0]
	for _, op := range ops {
		if !unobserved(op) {
			kept = append(kept, op)
		}
	}
	return kept
}

// heldSince is, for each holder and epoch, the earliest call of an
// operation that can leave the register held by that holder at that epoch;
// and for each holder, of one that can leave it held by the holder at an
// epoch nobody learned (a wild register, which matches any epoch above
// its own).
type heldSince struct {
	exact map[holderEpoch]int64
	wild  map[string]int64
}

type holderEpoch struct {
	holder string
	epoch  uint64
}

// firstHeld finds, in ops, every operation after which the register may
// be held by a given holder at a given epoch. In the model (step) only
// these do: a grant (the caller, the epoch granted), a write of unknown
// outcome (the caller, an epoch it attempted, or any epoch: wild), and a
// read that names the holder and epoch (from a register a majority's loss
// left unknown, or pinning a wild one). A ghost that ended before every
// such operation for h@e began came before them in every linearization, so
// its write cannot have taken the register from h@e: a release of h@e that
// answered "not held" is explained without it.
func firstHeld(ops []porcupine.Operation) heldSince {
	h := heldSince{exact: make(map[holderEpoch]int64), wild: make(map[string]int64)}
	note := func(m map[holderEpoch]int64, k holderEpoch, at int64) {
		if old, ok := m[k]; !ok || at < old {
			m[k] = at
		}
	}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch in.Kind {
		case Acquire:
			switch {
			case out.Outcome == Granted && !out.Unknown:
				note(h.exact, holderEpoch{in.Holder, out.Epoch}, op.Call)
			case out.Unknown && out.AnyEpoch:
				if old, ok := h.wild[in.Holder]; !ok || op.Call < old {
					h.wild[in.Holder] = op.Call
				}
			case out.Unknown:
				for _, e := range out.Attempted {
					note(h.exact, holderEpoch{in.Holder, e}, op.Call)
				}
			}
		case Read:
			if out.Holder != "" {
				note(h.exact, holderEpoch{out.Holder, out.Epoch}, op.Call)
			}
		}
	}
	return h
}

// at is the earliest call after which the register may hold holder at
// epoch, and false when no operation can leave it so.
func (h heldSince) at(holder string, epoch uint64) (int64, bool) {
	at, ok := h.exact[holderEpoch{holder, epoch}]
	if w, wok := h.wild[holder]; wok && (!ok || w < at) {
		at, ok = w, true
	}
	return at, ok
}

// lanes numbers ops' ClientId from 0 for porcupine's visualisation, which
// draws one row per id and expects a row's operations not to overlap: each
// client's operations fill as few rows as they can, clients in order, and
// operations of no client (id -1, amnesias) last. The checker ignores ids.
func lanes(ops []porcupine.Operation) {
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	rank := func(c int) int {
		switch {
		case c == amnesiaClient:
			return 2
		case c < 0:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := ops[a], ops[b]
		return cmp.Or(cmp.Compare(rank(x.ClientId), rank(y.ClientId)), cmp.Compare(x.ClientId, y.ClientId),
			cmp.Compare(x.Call, y.Call), cmp.Compare(x.Return, y.Return))
	})
	lane := make([]int, len(ops))
	first := 0       // the current client's first row
	var ends []int64 // when each of its rows is free again
	for j, i := range order {
		if j > 0 && ops[order[j-1]].ClientId != ops[i].ClientId {
			first += len(ends)
			ends = ends[:0]
		}
		row := slices.IndexFunc(ends, func(end int64) bool { return end < ops[i].Call })
		if row < 0 {
			row = len(ends)
			ends = append(ends, 0)
		}
		ends[row] = ops[i].Return
		lane[i] = first + row
	}
	for i := range ops {
		ops[i].ClientId = lane[i]
	}
}

// Ghosts holds writes of unknown outcome until a run ends, when it is known
// how long each may take effect: from the start of its operation until the
// next write of the same writer on the same key that a majority accepted
// and that began after the ghost's operation ended. That write has a higher
// ballot (a proposer runs one operation per key at a time, and its ballots
// only grow), and once a majority accepted a higher ballot the register's
// value is that ballot's or a later one's: the ghost can no longer be the
// highest value any majority holds. A writer is therefore one incarnation of
// a node (one process): a restarted node's ballots need not be higher.
// Without a later write, the ghost stays open to the end (or to an
// amnesia). It is safe for concurrent use.
type Ghosts struct {
	mu     sync.Mutex
	ghosts []ghostOp
	chosen []chosenWrite
}

type ghostOp struct {
	key, writer string
	client      int
	in          Input
	out         Output
	call, opEnd int64
}

type chosenWrite struct {
	key, writer  string
	started, ret int64
}

// Add records a write of unknown outcome of writer on key, by the operation
// of client that began at call and ended at opEnd (Infinity: never).
func (g *Ghosts) Add(key, writer string, client int, in Input, out Output, call, opEnd int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ghosts = append(g.ghosts, ghostOp{key: key, writer: writer, client: client, in: in, out: out, call: call, opEnd: opEnd})
}

// Chosen records a write of writer on key that a majority accepted, by an
// operation that began at started and reported it at ret.
func (g *Ghosts) Chosen(key, writer string, started, ret int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.chosen = append(g.chosen, chosenWrite{key: key, writer: writer, started: started, ret: ret})
}

// Len is the number of ghosts not yet added to a history.
func (g *Ghosts) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ghosts)
}

// AddTo adds the ghosts to h, each ending at its writer's next chosen write
// on its key, and forgets them. It returns how many such a write ended.
func (g *Ghosts) AddTo(h *History) (bounded int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gh := range g.ghosts {
		ret := Infinity
		for _, c := range g.chosen {
			if c.writer == gh.writer && c.key == gh.key && c.started >= gh.opEnd && c.ret < ret {
				ret = c.ret
			}
		}
		if ret != Infinity {
			bounded++
		}
		h.Add(gh.key, gh.client, gh.in, gh.out, gh.call, ret)
	}
	g.ghosts = nil
	return bounded
}
