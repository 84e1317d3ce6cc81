package nodecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/lockmesh/lockmesh/mesh"
)

// Serve reads commands from in and answers on out until "quit" or the end
// of in. Commands run concurrently; replies are written whole, one a line.
func Serve(ctx context.Context, m *mesh.Mesh, voters int, in io.Reader, out io.Writer) {
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
			r, err := handle(ctx, m, voters, f[1], f[2:])
			r.ID = id
			if err != nil {
				r.Error = err.Error()
			}
			reply(r)
		}()
	}
}

func handle(ctx context.Context, m *mesh.Mesh, voters int, verb string, args []string) (Reply, error) {
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
	}
	return r, fmt.Errorf("unknown command %q", verb)
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
		if (st.Voting == "" || st.Voting == "live") && alive == voters {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: voting %q, %d of %d voters seen: %w", st.Voting, alive, voters, ctx.Err())
		case <-tick.C:
		}
	}
}

// locker takes locks through m.
type locker struct{ m *mesh.Mesh }

func (l locker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lease, err := l.m.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}
