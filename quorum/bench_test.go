package quorum

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// Benchmarks of the pure core: no network, no goroutines, a fake clock.
// They measure the state machines alone (what a node spends per message),
// and are deterministic: the same operations in the same order every run.
//
//	go test -run '^$' -bench . -benchmem -count 5 ./quorum/

const benchKeys = 4096

func benchKeyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%03d/lock-%05d", i%97, i)
	}
	return keys
}

// BenchmarkAcceptorPrepare: one prepare per request, over many keys, each
// promised a higher ballot than the last time round.
func BenchmarkAcceptorPrepare(b *testing.B) {
	f := newLiveAcceptor(b)
	keys := benchKeyNames(benchKeys)
	req := Request{Config: f.m.ID, From: "p", To: f.id, Ops: make([]Op, 1)}
	prepare := func(i int) *Response {
		req.Ops[0] = Op{ID: uint64(i), Kind: OpPrepare, Key: keys[i%len(keys)],
			Ballot: Ballot{Counter: uint64(i/len(keys) + 1), Incarnation: 1, Node: "p"}}
		return f.a.HandleRequest(&req)
	}
	for i := range keys { // every register exists before the clock starts
		prepare(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if resp := prepare(len(keys) + i); !resp.Results[0].OK {
			b.Fatalf("prepare refused: %+v", resp.Results[0])
		}
	}
}

// BenchmarkAcceptorAccept: one accept per request, over many keys; each is
// a lease's first write (it starts an exclusion timer) and promises the next
// ballot, as the fast path does.
func BenchmarkAcceptorAccept(b *testing.B) {
	f := newLiveAcceptor(b)
	keys := benchKeyNames(benchKeys)
	req := Request{Config: f.m.ID, From: "p", To: f.id, Ops: make([]Op, 1)}
	accept := func(i int) *Response {
		bal := Ballot{Counter: uint64(2*(i/len(keys)) + 1), Incarnation: 1, Node: "p"}
		req.Ops[0] = Op{ID: uint64(i), Kind: OpAccept, Key: keys[i%len(keys)], Ballot: bal, Inc: accInc,
			Value: Value{Held: true, Holder: "p", HolderInc: 1, Epoch: uint64(i + 1), TTL: accTTL, Lease: bal},
			Next:  Ballot{Counter: bal.Counter + 1, Incarnation: 1, Node: "p"}}
		return f.a.HandleRequest(&req)
	}
	for i := range keys {
		accept(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if resp := accept(len(keys) + i); !resp.Results[0].OK {
			b.Fatalf("accept refused: %+v", resp.Results[0])
		}
	}
}

// benchCluster is three live acceptors and one proposer "p1", wired by the
// leanest possible synchronous loop (drive), so that the figures are the
// core's, not the test driver's.
type benchCluster struct {
	c    *testCluster
	p    *Proposer
	accs map[NodeID]*Acceptor
}

func newBenchCluster(b *testing.B) *benchCluster {
	c := newTestCluster(b, voters3, "p1")
	bc := &benchCluster{c: c, p: c.node("p1").prop, accs: make(map[NodeID]*Acceptor)}
	for _, id := range voters3 {
		bc.accs[id] = c.node(id).acc
	}
	return bc
}

// drive delivers every request and answer until the proposer is quiet, and
// returns what it reported, and how many requests it sent. Like
// Node.Advance, it gives the operations and results back to their pools
// once handled.
func (bc *benchCluster) drive(results []OpResult, events []LeaseEvent) ([]OpResult, []LeaseEvent, int) {
	sent := 0
	for bc.p.HasReady() {
		rd := bc.p.Ready()
		results = append(results, rd.Results...)
		events = append(events, rd.Leases...)
		for i := range rd.Requests {
			sent++
			resp := bc.accs[rd.Requests[i].To].HandleRequest(&rd.Requests[i])
			bc.p.Step(resp)
			resultsPool.Put(resp.Results)
			opsPool.Put(rd.Requests[i].Ops)
		}
	}
	return results, events, sent
}

// complete drives the proposer until it reports a result, moving the clocks
// to its next timer whenever it is quiet without one (a round lost to
// another ballot retries after a backoff).
func (bc *benchCluster) complete(results []OpResult) ([]OpResult, int) {
	sent := 0
	for {
		var n int
		results, _, n = bc.drive(results, nil)
		sent += n
		if len(results) > 0 {
			return results, sent
		}
		at, ok := bc.p.NextTick()
		if !ok {
			return results, sent
		}
		bc.advance(max(at-bc.c.node("p1").clock.Now(), 0))
		bc.p.Tick()
	}
}

// advance moves every clock of the cluster by d without ticking.
func (bc *benchCluster) advance(d time.Duration) {
	bc.c.setNow(bc.c.now + d)
}

// BenchmarkProposerAcquire: whole acquires against three acceptors.
//
//   - fresh-key: a key nobody touched, so prepare then accept (2 round
//     trips); the leases pile up on the proposer, as on a node that holds
//     many locks.
//   - fast-path-acquire+release: one key taken and given back in turn; each
//     is a single round trip of accepts (the figure covers both). Once every
//     4096 turns the proposer forgets the key's fast path and a ballot is
//     lost (TestProposerIdleKeysKeepTheKeyJustUsed); complete() rides that out.
func BenchmarkProposerAcquire(b *testing.B) {
	opts := scOpts(false)
	b.Run("fresh-key", func(b *testing.B) {
		bc := newBenchCluster(b)
		var results []OpResult
		sent := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := bc.p.Acquire(fmt.Sprintf("k%d", i), opts); err != nil {
				b.Fatal(err)
			}
			var n int
			results, _, n = bc.drive(results[:0], nil)
			sent += n
			if len(results) != 1 || results[0].Outcome != Granted {
				b.Fatalf("acquire %d: %+v", i, results)
			}
		}
		b.ReportMetric(float64(sent)/float64(b.N), "requests/op")
	})
	b.Run("fast-path-acquire+release", func(b *testing.B) {
		bc := newBenchCluster(b)
		var results []OpResult
		// The first acquire prepares; every later one rides the fast path.
		bc.p.Acquire("k", opts)
		results, _, _ = bc.drive(results[:0], nil)
		epoch := results[0].Epoch
		bc.p.Release("k", epoch, 0)
		bc.drive(nil, nil)
		sent := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := bc.p.Acquire("k", opts); err != nil {
				b.Fatal(err)
			}
			var n int
			results, n = bc.complete(results[:0])
			sent += n
			if len(results) != 1 || results[0].Outcome != Granted {
				b.Fatalf("acquire %d: %+v", i, results)
			}
			if _, err := bc.p.Release("k", results[0].Epoch, 0); err != nil {
				b.Fatal(err)
			}
			results, n = bc.complete(results[:0])
			sent += n
			if len(results) != 1 || results[0].Outcome != Released {
				b.Fatalf("release %d: %+v", i, results)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(sent)/float64(b.N), "requests/op")
		// Not quite 2 per iteration: see TestProposerIdleKeysKeepTheKeyJustUsed.
		b.ReportMetric(float64(bc.p.Stats().FastRounds)/float64(b.N), "fast-rounds/op")
	})
}

// benchRenewBatch: one proposer holding n leases; each iteration moves the
// clocks to the next renewal time and renews all n against three
// acceptors: in one batch (one request per voter) up to maxRenewBatch, in
// batches of maxRenewBatch a renewal pace apart above it.
func benchRenewBatch(b *testing.B, n int) {
	bc := newBenchCluster(b)
	opts := scOpts(false)
	for i := 0; i < n; i++ {
		if _, err := bc.p.Acquire(fmt.Sprintf("k%05d", i), opts); err != nil {
			b.Fatal(err)
		}
	}
	results, _, _ := bc.drive(nil, nil)
	if len(results) != n {
		b.Fatalf("%d of %d acquires ended", len(results), n)
	}
	var events []LeaseEvent
	b.ReportAllocs()
	b.ResetTimer()
	batches := (n + maxRenewBatch - 1) / maxRenewBatch
	for i := 0; i < b.N; i++ {
		bc.advance(opts.RenewEvery)
		bc.p.Tick()
		sent := 0
		events = events[:0]
		for {
			var s int
			_, events, s = bc.drive(nil, events)
			sent += s
			if len(events) >= n {
				break
			}
			// The next batch, a renewal pace later.
			at, ok := bc.p.NextTick()
			if !ok || sent > batches*len(voters3) {
				break
			}
			bc.advance(max(at-bc.c.node("p1").clock.Now(), 0))
			bc.p.Tick()
		}
		if sent != batches*len(voters3) || len(events) != n {
			b.Fatalf("renewal %d: %d requests, %d renewals; want %d and %d", i, sent, len(events), batches*len(voters3), n)
		}
	}
}

func BenchmarkRenewBatch1000(b *testing.B) { benchRenewBatch(b, 1000) }

// BenchmarkRenewBatch10000 shows how the cost of a batch grows with the
// number of leases a node holds.
func BenchmarkRenewBatch10000(b *testing.B) { benchRenewBatch(b, 10000) }

// BenchmarkAcceptorCatchUp: a voter that restarted catches up, bucket by
// bucket, from the two others, each holding 10000 keys.
func BenchmarkAcceptorCatchUp(b *testing.B) {
	const n = 10000
	m := NewMembership(7, voters3...)
	peers := make(map[NodeID]*Acceptor)
	for _, id := range []NodeID{"b", "c"} {
		f := makeLive(newAccFixtureOf(b, id, m))
		for i, key := range benchKeyNames(n) {
			bal := Ballot{Counter: 1, Incarnation: 1, Node: "p"}
			f.one("p", Op{Kind: OpAccept, Key: key, Ballot: bal, Inc: accInc,
				Value: Value{Held: true, Holder: "p", HolderInc: 1, Epoch: uint64(i + 1), TTL: accTTL, Lease: bal}})
		}
		peers[id] = f.a
	}
	clock := &fakeClock{wall: testWallBase}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := NewAcceptor(AcceptorConfig{ID: "a", Incarnation: uint64(i + 1), Membership: m, Clock: clock,
			MaxTTL: accMaxTTL, Quarantine: accQuarantine})
		if err != nil {
			b.Fatal(err)
		}
		clock.advance(accQuarantine)
		a.Tick()
		reqs := a.Ready().CatchUps
		for len(reqs) > 0 {
			req := reqs[0]
			reqs = append(reqs[1:], func() []CatchUpRequest {
				a.HandleCatchUpResponse(peers[req.To].HandleCatchUp(&req))
				return a.Ready().CatchUps
			}()...)
		}
		if a.State() != Live || a.Keys() != n {
			b.Fatalf("after catching up: %v with %d keys, want live with %d", a.State(), a.Keys(), n)
		}
	}
}

// BenchmarkAcceptorRenewals100k: a voter holding 100,000 grants answers
// renewal batches of 4,096 accepts each, the keys in an order unrelated to
// the order the registers were made in (as a holder's renewals arrive), so
// that each register lookup meets a cold cache, as it does in the renewal
// bench. ns/op is per accept.
func BenchmarkAcceptorRenewals100k(b *testing.B) {
	const n, batch = 100000, 4096
	f := newLiveAcceptor(b)
	f.a.cfg.MaxRegisters = 2 * n
	keys := benchKeyNames(n)
	rand.New(rand.NewSource(1)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	counter := make([]uint64, n)
	req := Request{Config: f.m.ID, From: "p", To: f.id, Ops: make([]Op, batch)}
	round := func(from int) {
		req.Ops = req.Ops[:0]
		for j := 0; j < batch; j++ {
			i := (from + j) % n
			bal := Ballot{Counter: counter[i] + 1, Incarnation: 1, Node: "p"}
			counter[i] += 2
			req.Ops = append(req.Ops, Op{ID: uint64(j + 1), Kind: OpAccept, Key: keys[i], Ballot: bal, Inc: accInc,
				Value: Value{Held: true, Holder: "p", HolderInc: 1, Epoch: uint64(i + 1), TTL: accTTL, Lease: Ballot{Counter: 1, Incarnation: 1, Node: "p"}},
				Next:  Ballot{Counter: bal.Counter + 1, Incarnation: 1, Node: "p"}})
		}
		resp := f.a.HandleRequest(&req)
		for j := range resp.Results {
			if !resp.Results[j].OK {
				b.Fatalf("accept of %s refused: %+v", req.Ops[j].Key, resp.Results[j])
			}
		}
	}
	for from := 0; from < n; from += batch {
		round(from)
	}
	b.ReportAllocs()
	b.ResetTimer()
	from := 0
	for done := 0; done < b.N; done += batch {
		round(from)
		from = (from + batch*7) % n
	}
}

// BenchmarkRenewBatch100000: as BenchmarkRenewBatch10000, with the state
// of 100,000 leases far larger than the processor's caches.
func BenchmarkRenewBatch100000(b *testing.B) { benchRenewBatch(b, 100000) }
