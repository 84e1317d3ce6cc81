package mesh

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
	"github.com/lockmesh/lockmesh/transport"
)

// callsPerPeer bounds the ballot calls in flight to one voter. Requests
// that find them all busy wait in the voter's outbox and leave together,
// as one message, when a call ends: under load, the operations of many
// callers share a message, its frame, its system calls and its reply (a
// group commit), while a lone caller, who never finds a call busy, pays no
// wait. With 64 callers on one voter, 0.16 requests per Acquire+Release
// leave this node, against 3.35 with no bound on calls in flight (a test
// of the mesh counts them).
const callsPerPeer = 2

// outbox is one voter's queue of requests waiting for a free call.
type outbox struct {
	mu       sync.Mutex
	inflight int
	queue    []quorum.Request
}

// outboxes maps each voter to its outbox; entries are few (one per voter
// this node ever sent to) and never reused by another node, as a removed
// voter's name is retired.
type outboxes struct {
	mu sync.Mutex
	m  map[quorum.NodeID]*outbox
}

func (o *outboxes) get(to quorum.NodeID) *outbox {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.m[to]
	if ob == nil {
		if o.m == nil {
			o.m = make(map[quorum.NodeID]*outbox)
		}
		ob = &outbox{}
		o.m[to] = ob
	}
	return ob
}

// post sends a copy of req now when a call is free, and otherwise queues
// it for the next call to end. It never blocks on the network. req's
// operations go back to the node at Advance; the copy's come from
// wire.OpsPool, and go back there once encoded (sendParts).
func (m *Mesh) post(addr string, req *quorum.Request) {
	r := *req
	r.Ops = wire.OpsPool.Get(len(req.Ops))
	copy(r.Ops, req.Ops)
	ob := m.outbox.get(r.To)
	ob.mu.Lock()
	if ob.inflight >= callsPerPeer {
		ob.queue = append(ob.queue, r)
		ob.mu.Unlock()
		m.incr("send.queued", 1)
		return
	}
	ob.inflight++
	ob.mu.Unlock()
	m.sendFrom(ob, addr, r)
}

// sendFrom sends req, and once its answers are in (sent), whatever queued
// for the same voter meanwhile, merged, until the outbox is empty. It
// returns once req is on its way: the answers are stepped on the
// transport's goroutines (transport.Async), with no goroutine of the mesh
// waiting for them.
func (m *Mesh) sendFrom(ob *outbox, addr string, req quorum.Request) {
	for m.sendParts(ob, addr, &req) {
		// Nothing in flight (nothing to send, or every call failed at
		// once): on to the next request, if any.
		next, ok := ob.next()
		if !ok {
			return
		}
		req, addr = next, m.readdress(next.To, addr)
	}
}

// sent is called once every answer to a request sent from ob is in.
func (m *Mesh) sent(ob *outbox, addr string) {
	if next, ok := ob.next(); ok {
		m.sendFrom(ob, m.readdress(next.To, addr), next)
	}
}

// readdress is the voter's address now: it may have moved while its
// requests waited.
func (m *Mesh) readdress(to quorum.NodeID, addr string) string {
	if a, ok := m.book.rpcAddr(string(to)); ok {
		return a
	}
	return addr
}

// next takes the queued requests that leave together in the next call,
// merged, or gives the call back when none waits.
func (ob *outbox) next() (quorum.Request, bool) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.queue) == 0 {
		ob.inflight--
		return quorum.Request{}, false
	}
	var req quorum.Request
	req, ob.queue = merge(ob.queue)
	return req, true
}

// merge joins the leading requests of queue that share a configuration and
// sender into one, and returns it with the rest. Operations keep their
// order; each carries its own id, so the one response answers them all.
func merge(queue []quorum.Request) (quorum.Request, []quorum.Request) {
	first := queue[0]
	n := 1
	for n < len(queue) && queue[n].Config == first.Config && queue[n].From == first.From {
		n++
	}
	if n == 1 {
		return first, queue[1:]
	}
	size := 0
	for _, r := range queue[:n] {
		size += len(r.Ops)
	}
	ops := wire.OpsPool.Get(size)[:0]
	for _, r := range queue[:n] {
		ops = append(ops, r.Ops...)
		wire.OpsPool.Put(r.Ops)
	}
	first.Ops = ops
	rest := queue[n:]
	if len(rest) == 0 {
		// All taken: the queue starts again at the front of its array.
		clear(queue)
		rest = queue[:0]
	}
	return first, rest
}

// sendParts sends req to its voter, in several messages at once when it
// has more operations than a message may carry (by count, or by what the
// message and its answer may weigh: partSize); each answer is stepped when
// it comes, and once all are in, sent carries on with ob's queue. It
// reports true when nothing is in flight (nothing to send, or every
// message failed at once), and then sent is not called: the caller carries
// on. req's operations are put back in wire.OpsPool once encoded. A voter
// of an earlier protocol version is sent only what it knows (see
// withoutUnwatch and withoutValues).
func (m *Mesh) sendParts(ob *outbox, addr string, req *quorum.Request) (idle bool) {
	version := m.peerVersion(string(req.To))
	if version < wire.Version2 {
		req.Ops = withoutUnwatch(req.Ops)
	}
	if version < wire.Version3 {
		req.Ops = m.withoutValues(req.To, req.Ops)
	}
	if len(req.Ops) == 0 {
		wire.OpsPool.Put(req.Ops)
		return true
	}
	to := req.To
	// left counts the messages whose answers are not in, plus one for this
	// function until it has sent them all: whoever takes it to zero
	// carries on with the queue.
	left := new(atomic.Int32)
	left.Store(1)
	for ops := req.Ops; len(ops) > 0; {
		part := *req
		n := m.partSize(ops)
		part.Ops, ops = ops[:n:n], ops[n:]
		buf := getBody()
		body := wire.AppendRequestFor((*buf)[:0], &part, version)
		m.incr("messages.sent", 1)
		m.incr("bytes.sent", float32(len(body)))
		left.Add(1)
		err := transport.Go(m.tr, string(to), addr, body, m.cfg.roundTimeout(), func(reply []byte, err error) {
			m.answer(addr, to, reply, err)
			if left.Add(-1) == 0 {
				m.sent(ob, addr)
			}
		})
		// The transport is done with body once Go returns (it copies it
		// into the connection's queue): the buffer serves the next request.
		*buf = body
		putBody(buf)
		if err != nil {
			m.callError(addr, err)
			left.Add(-1)
		}
	}
	wire.OpsPool.Put(req.Ops)
	return left.Add(-1) == 0
}

// partSize is how many of ops, from the first, go in one message: at most
// MaxOpsPerMessage, and no more than keep the message, and its answer, in
// half a frame. An answer to a prepare or a peek may carry a value of up to
// MaxValueSize whatever the request weighs.
func (m *Mesh) partSize(ops []quorum.Op) int {
	budget := m.cfg.maxFrameSize() / 2
	size, n := 0, 0
	for n < len(ops) && n < m.lim.MaxOps {
		op := &ops[n]
		// The operation: numbers, its key, its value, and the names in its
		// ballots and value. Its result: numbers and up to three ballots'
		// names, and for a prepare or a peek the value held.
		w := 64 + len(op.Key) + len(op.Value.Data) + len(op.Ballot.Node) + len(op.Next.Node) +
			len(op.Value.Holder) + len(op.Value.Lease.Node) + resultOverhead
		if op.Kind == quorum.OpPrepare || op.Kind == quorum.OpPeek {
			w += wire.MaxNameLen + m.cfg.maxValueSize()
		}
		if n > 0 && size+w > budget {
			break
		}
		size += w
		n++
	}
	return max(n, 1)
}

// resultOverhead bounds a result without its value: numbers and the names
// of two ballots.
const resultOverhead = 64 + 2*wire.MaxNameLen

// withoutValues makes ops fit a voter of protocol version 2 or 1, in
// place: an accept that carries a value is dropped (that voter would keep
// the grant without it; it does not vote on the write), and an observing
// peek becomes a plain one (it cannot push).
func (m *Mesh) withoutValues(to quorum.NodeID, ops []quorum.Op) []quorum.Op {
	dropped := 0
	ops = slices.DeleteFunc(ops, func(op quorum.Op) bool {
		if op.Kind == quorum.OpAccept && op.Value.Data != "" {
			dropped++
			return true
		}
		return false
	})
	for i := range ops {
		ops[i].Observe = 0
	}
	if dropped > 0 {
		m.incr("send.value_to_old_voter", float32(dropped))
		if m.noisy.allow("value to old voter " + string(to)) {
			m.log.Warn("not sending a lease value to a voter of an earlier protocol version: it would drop it; that voter does not vote on it (finish the upgrade)",
				"voter", to, "writes", dropped)
		}
	}
	return ops
}

// withoutUnwatch drops, in place, the OpUnwatch and OpForget operations of
// ops, which a node of protocol version 1 refuses (with the whole request).
// Both are hints whose results nothing waits for. Without an unwatch, such
// a voter may still hand the key to this node when it is freed, and hands
// it to the next waiter after its hand-off grace, as between nodes of
// version 1; without a forget, it keeps the register, as version 1 did.
func withoutUnwatch(ops []quorum.Op) []quorum.Op {
	return slices.DeleteFunc(ops, func(op quorum.Op) bool {
		return op.Kind == quorum.OpUnwatch || op.Kind == quorum.OpForget
	})
}

// bodies keeps the buffers requests are encoded in (*[]byte). A renewal
// batch of 4,096 operations encodes to about 400 KB; made anew for every
// batch, such buffers were a sixth of a holder's CPU at 100,000 leases
// (zeroing them, growing them, and the runtime handing their pages back to
// the system). Transport.Go lets its caller reuse a body once it returns.
var bodies sync.Pool

func getBody() *[]byte {
	if b, ok := bodies.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 512)
	return &b
}

// putBody keeps b for a later request, unless it grew past maxKeptBody.
func putBody(b *[]byte) {
	if cap(*b) > maxKeptBody {
		return
	}
	bodies.Put(b)
}

// maxKeptBody is the largest buffer bodies keeps: a full renewal batch and
// some.
const maxKeptBody = 1 << 20
