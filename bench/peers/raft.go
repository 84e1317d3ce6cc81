package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// A lock on hashicorp/raft as an application would write one: the FSM maps
// key → holder; "lock" succeeds if the key is free, "unlock" if the caller
// holds it. A waiter is woken when an unlock of its key is applied on the
// leader (where every caller sits), and tries again. There is no lease: a
// crashed holder keeps its lock until someone removes it.

type lockFSM struct {
	mu      sync.Mutex
	holders map[string]string
	waiters map[string]map[chan struct{}]struct{}
}

func newLockFSM() *lockFSM {
	return &lockFSM{holders: map[string]string{}, waiters: map[string]map[chan struct{}]struct{}{}}
}

// A command is "L key holder" or "U key holder".
func command(op byte, key, holder string) []byte {
	return []byte(string(op) + " " + key + " " + holder)
}

func (f *lockFSM) Apply(l *raft.Log) any {
	parts := strings.SplitN(string(l.Data), " ", 3)
	if len(parts) != 3 {
		return false
	}
	op, key, holder := parts[0], parts[1], parts[2]
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op {
	case "L":
		if _, held := f.holders[key]; held {
			return false
		}
		f.holders[key] = holder
		return true
	case "U":
		if f.holders[key] != holder {
			return false
		}
		delete(f.holders, key)
		for ch := range f.waiters[key] {
			close(ch)
		}
		delete(f.waiters, key)
		return true
	}
	return false
}

// watch returns a channel closed at the next unlock of key.
func (f *lockFSM) watch(key string) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	if f.waiters[key] == nil {
		f.waiters[key] = map[chan struct{}]struct{}{}
	}
	f.waiters[key][ch] = struct{}{}
	f.mu.Unlock()
	return ch
}

func (f *lockFSM) unwatch(key string, ch chan struct{}) {
	f.mu.Lock()
	delete(f.waiters[key], ch)
	f.mu.Unlock()
}

func (f *lockFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.holders)
	return snapshot(b), err
}

func (f *lockFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	holders := map[string]string{}
	if err := json.NewDecoder(r).Decode(&holders); err != nil {
		return err
	}
	f.mu.Lock()
	f.holders = holders
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// raftLocker takes locks by applying commands on the leader.
type raftLocker struct {
	r   *raft.Raft
	fsm *lockFSM
	id  string
	seq *atomic.Int64
}

const applyTimeout = 10 * time.Second

func (l raftLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	holder := fmt.Sprintf("%s-%d", l.id, l.seq.Add(1))
	for {
		// Watch before asking, so that an unlock applied between a refused
		// lock and the wait is not missed.
		woken := l.fsm.watch(key)
		f := l.r.Apply(command('L', key, holder), applyTimeout)
		if err := f.Error(); err != nil {
			l.fsm.unwatch(key, woken)
			return nil, err
		}
		if f.Response().(bool) {
			l.fsm.unwatch(key, woken)
			return func(context.Context) error {
				f := l.r.Apply(command('U', key, holder), applyTimeout)
				if err := f.Error(); err != nil {
					return err
				}
				if !f.Response().(bool) {
					return errors.New("unlock refused: not the holder")
				}
				return nil
			}, nil
		}
		select {
		case <-woken:
		case <-ctx.Done():
			l.fsm.unwatch(key, woken)
			return nil, ctx.Err()
		}
	}
}

// runRaft measures 3 raft nodes in this process: in-memory log, stable and
// snapshot stores, and the in-memory transport or TCP on loopback.
func runRaft(ctx context.Context, p workload.Params, tcp bool) workload.Row {
	transportName := "in-memory transport (no sockets)"
	if tcp {
		transportName = "TCP transport on loopback"
	}
	row := workload.Row{Setup: "hashicorp/raft, 3 nodes in 1 process, in-memory log (no disk, no fsync), " +
		transportName + ", lock FSM, caller on the leader"}
	row.Notes = append(row.Notes,
		"raft.DefaultConfig; a waiter is woken by the leader's FSM when the key's unlock is applied, then applies its lock again",
		"no lease: a crashed holder's lock stays held")

	var (
		nodes []*raft.Raft
		fsms  []*lockFSM
		trans []raft.Transport
		addrs []raft.ServerAddress
	)
	defer func() {
		for _, r := range nodes {
			r.Shutdown().Error()
		}
		for _, t := range trans {
			if c, ok := t.(io.Closer); ok {
				c.Close()
			}
		}
	}()
	for i := range 3 {
		if tcp {
			t, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, hclog.NewNullLogger())
			if err != nil {
				row.Error = err.Error()
				return row
			}
			trans, addrs = append(trans, t), append(addrs, t.LocalAddr())
		} else {
			a, t := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node%d", i)))
			trans, addrs = append(trans, t), append(addrs, a)
		}
	}
	if !tcp {
		for i, t := range trans {
			for j, u := range trans {
				if i != j {
					t.(*raft.InmemTransport).Connect(addrs[j], u)
				}
			}
		}
	}
	var servers []raft.Server
	for i := range 3 {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("node%d", i)), Address: addrs[i]})
	}
	for i := range 3 {
		cfg := raft.DefaultConfig()
		cfg.LocalID = servers[i].ID
		cfg.Logger = hclog.NewNullLogger()
		store := raft.NewInmemStore()
		fsm := newLockFSM()
		r, err := raft.NewRaft(cfg, fsm, store, store, raft.NewInmemSnapshotStore(), trans[i])
		if err != nil {
			row.Error = err.Error()
			return row
		}
		nodes, fsms = append(nodes, r), append(fsms, fsm)
	}
	if err := nodes[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		row.Error = fmt.Sprintf("bootstrap: %v", err)
		return row
	}
	start := time.Now()
	leader := -1
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for leader < 0 {
		for i, r := range nodes {
			if r.State() == raft.Leader {
				leader = i
			}
		}
		if leader >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			row.Error = "no leader elected: " + ctx.Err().Error()
			return row
		case <-tick.C:
		}
	}
	logf("leader node%d elected in %.1fs", leader, time.Since(start).Seconds())
	var seq atomic.Int64
	locker := func(i int) raftLocker {
		return raftLocker{r: nodes[leader], fsm: fsms[leader], id: fmt.Sprintf("c%d", i), seq: &seq}
	}
	err := workload.MeasureLocks(ctx, p, workload.Service{
		Caller:        locker(-1),
		Worker:        func(i int) (workload.Locker, error) { return locker(i), nil },
		Contender:     func(i int) (workload.Locker, error) { return locker(i), nil },
		ContenderName: func(i int) string { return fmt.Sprintf("c%d", i) },
		Placement:     fmt.Sprintf("%d goroutines on the leader (Apply works only there)", p.Contenders),
		CPU:           []workload.CPUSource{workload.Self("peers (3 raft nodes and the caller)")},
	}, &row)
	if err != nil {
		row.Error = err.Error()
	}
	return row
}
