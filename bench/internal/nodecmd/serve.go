package nodecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/mesh"
)

// node is the state the commands share.
type node struct {
	m      *mesh.Mesh
	voters int
	sink   *metrics.InmemSink // nil: no counters

	mu     sync.Mutex
	leases []*mesh.Lease // taken by hold, kept until the node stops
}

// Serve reads commands from in and answers on out until "quit" or the end
// of in. Commands run concurrently; replies are written whole, one a line.
// sink, when not nil, is the mesh's metric sink, read by "stats".
func Serve(ctx context.Context, m *mesh.Mesh, voters int, sink *metrics.InmemSink, in io.Reader, out io.Writer) {
	n := &node{m: m, voters: voters, sink: sink}
	var mu sync.Mutex
	reply := func(r Reply) {
		b, err := json.Marshal(r)
		if err != nil {
			b, _ = json.Marshal(Reply{ID: r.ID, Error: err.Error()})
		}
		mu.Lock()
		out.Write(append(b, '\n'))
		mu.Unlock()
	}
	st := m.Status()
	reply(Reply{Event: "started", Addr: st.Addr, RPC: st.RPCAddr})
	sc := bufio.NewScanner(in)
	var wg sync.WaitGroup
	defer wg.Wait()
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			reply(Reply{Error: fmt.Sprintf("bad id %q", f[0])})
			continue
		}
		if f[1] == "quit" {
			reply(Reply{ID: id})
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := n.handle(ctx, f[1], f[2:])
			r.ID = id
			if err != nil {
				r.Error = err.Error()
			}
			reply(r)
		}()
	}
}

func (n *node) handle(ctx context.Context, verb string, args []string) (Reply, error) {
	m, voters := n.m, n.voters
	var r Reply
	switch verb {
	case "ready":
		d, err := duration(args, 0)
		if err != nil {
			return r, err
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return r, waitReady(ctx, m, voters)
	case "join":
		if len(args) != 1 {
			return r, fmt.Errorf("join ADDR,ADDR")
		}
		_, err := m.Join(strings.Split(args[0], ",")...)
		return r, err
	case "latency":
		if len(args) != 3 {
			return r, fmt.Errorf("latency N WARMUP KEY")
		}
		n, err1 := strconv.Atoi(args[0])
		warm, err2 := strconv.Atoi(args[1])
		if err1 != nil || err2 != nil {
			return r, fmt.Errorf("latency: bad N or WARMUP")
		}
		op := workload.AcquireRelease(locker{m}, args[2])
		var err error
		r.Latency, err = workload.Latency(ctx, n, warm, time.Minute, op)
		return r, err
	case "throughput":
		if len(args) != 2 {
			return r, fmt.Errorf("throughput WORKERS DURATION")
		}
		workers, err := strconv.Atoi(args[0])
		if err != nil {
			return r, err
		}
		d, err := duration(args, 1)
		if err != nil {
			return r, err
		}
		// The bench reads every node's CPU from /proc: none here.
		r.Throughput, err = workload.Throughput(ctx, workers, d, func(i int) (workload.Op, error) {
			return workload.AcquireRelease(locker{m}, fmt.Sprintf("bench/tput/%d", i)), nil
		}, nil)
		return r, err
	case "contend":
		if len(args) != 5 {
			return r, fmt.Errorf("contend WORKERS DURATION HOLD MAXHOLDS KEY")
		}
		workers, err1 := strconv.Atoi(args[0])
		maxHolds, err2 := strconv.Atoi(args[3])
		if err1 != nil || err2 != nil {
			return r, fmt.Errorf("contend: bad WORKERS or MAXHOLDS")
		}
		d, err := duration(args, 1)
		if err != nil {
			return r, err
		}
		hold, err := duration(args, 2)
		if err != nil {
			return r, err
		}
		r.Holds, err = workload.Contend(ctx, workers, d, hold, maxHolds, args[4],
			func(int) (workload.Locker, error) { return locker{m}, nil },
			func(i int) string { return fmt.Sprintf("%s/%d", m.Name(), i) })
		return r, err
	case "hold":
		if len(args) != 2 {
			return r, fmt.Errorf("hold N PREFIX")
		}
		want, err := strconv.Atoi(args[0])
		if err != nil || want < 0 {
			return r, fmt.Errorf("hold: bad N %q", args[0])
		}
		start := time.Now()
		err = n.hold(ctx, want, args[1])
		r.Seconds = time.Since(start).Seconds()
		r.Held, r.Lost = n.count()
		return r, err
	case "cpuprofile":
		if len(args) != 2 {
			return r, fmt.Errorf("cpuprofile FILE DURATION")
		}
		d, err := duration(args, 1)
		if err != nil {
			return r, err
		}
		return r, cpuProfile(ctx, args[0], d)
	case "heapprofile":
		if len(args) != 1 {
			return r, fmt.Errorf("heapprofile FILE")
		}
		return r, heapProfile(args[0])
	case "stats":
		r.Held, r.Lost = n.count()
		r.HeapBytes = liveHeap()
		r.Counters = n.counters()
		return r, nil
	}
	return r, fmt.Errorf("unknown command %q", verb)
}

// hold takes leases prefix/i, 256 at a time, until want are held.
func (n *node) hold(ctx context.Context, want int, prefix string) error {
	n.mu.Lock()
	from := len(n.leases)
	n.mu.Unlock()
	if want <= from {
		return nil
	}
	got := make([]*mesh.Lease, want-from)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(256, len(got)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(got) || ctx.Err() != nil {
					return
				}
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := n.m.Acquire(actx, fmt.Sprintf("%s/%d", prefix, from+i))
				cancel()
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				got[i] = l
			}
		}()
	}
	wg.Wait()
	n.mu.Lock()
	for _, l := range got {
		if l != nil {
			n.leases = append(n.leases, l)
		}
	}
	n.mu.Unlock()
	if first != nil {
		return fmt.Errorf("hold: %w", first)
	}
	return ctx.Err()
}

// count is how many leases hold took, and how many of them are lost.
func (n *node) count() (held, lost int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.leases {
		// (Err, not Done: Done makes the lease's channel, which a node
		// that only holds leases never needs.)
		if l.Err() != nil {
			lost++
		}
	}
	return len(n.leases), lost
}

// counters sums the mesh's counters over every interval the sink kept
// (the bench's sink keeps them all), by name without the "lockmesh."
// prefix and the node label.
func (n *node) counters() map[string]float64 {
	if n.sink == nil {
		return nil
	}
	out := map[string]float64{}
	for _, iv := range n.sink.Data() {
		iv.RLock()
		for key, v := range iv.Counters {
			name, _, _ := strings.Cut(key, ";")
			out[strings.TrimPrefix(name, "lockmesh.")] += v.Sum
		}
		iv.RUnlock()
	}
	return out
}

// cpuProfile writes a CPU profile of the next d (or until ctx ends) to
// path.
func cpuProfile(ctx context.Context, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d): // the profiled span itself, not a wait for an event
	}
	pprof.StopCPUProfile()
	return f.Close()
}

// heapProfile writes a heap profile (live objects as of a collection it
// forces, and allocations since the start) to path.
func heapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// liveHeap is the heap in use after two full collections.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func duration(args []string, i int) (time.Duration, error) {
	if len(args) <= i {
		return 0, fmt.Errorf("missing duration")
	}
	return time.ParseDuration(args[i])
}

// waitReady waits until m votes (if a voter) and sees every voter alive
// with a ballot address.
func waitReady(ctx context.Context, m *mesh.Mesh, voters int) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st := m.Status()
		alive := 0
		for _, mb := range st.Members {
			if mb.State == "alive" && mb.RPCAddr != "" && mb.Voter {
				alive++
			}
		}
		if (st.VotingState == mesh.NotVoter || st.VotingState == mesh.Live) && alive == voters {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %v, %d of %d voters seen: %w", st.VotingState, alive, voters, ctx.Err())
		case <-tick.C:
		}
	}
}

// locker takes locks through m.
type locker struct{ m *mesh.Mesh }

func (l locker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	// Goroutines in one process take turns as across processes.
	lease, err := l.m.Acquire(ctx, key, mesh.WaitBehindOwnLease())
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
