package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockmesh/lockmesh/bench/internal/workload"
	"github.com/redis/go-redis/v9"
)

// runRedlock measures go-redsync (Redlock) on 3 redis-server processes that
// it starts on free loopback ports and stops at the end.
func runRedlock(ctx context.Context, p workload.Params) workload.Row {
	row := workload.Row{Setup: "Redlock (go-redsync) on 3 redis-server processes, loopback TCP, no persistence (--save \"\" --appendonly no), caller in a 4th process"}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		row.Error = "redis-server not installed: run bench/install-redis.sh"
		return row
	}
	if out, err := exec.Command(bin, "--version").Output(); err == nil {
		row.Notes = append(row.Notes, strings.TrimSpace(string(out)))
	}
	row.Notes = append(row.Notes,
		"redsync defaults (expiry 8 s, retry delay random 50–250 ms) but unlimited tries: a waiter polls, it is not told of a release")

	var (
		servers []*exec.Cmd
		pools   []*redis.Client
		cpu     = []workload.CPUSource{workload.Self("peers (redsync client)")}
	)
	defer func() {
		for _, c := range pools {
			c.Close()
		}
		for _, s := range servers {
			s.Process.Kill()
			s.Wait()
		}
	}()
	for i := range 3 {
		port, err := freePort()
		if err != nil {
			row.Error = err.Error()
			return row
		}
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
			"--loglevel", "warning")
		// The servers die with this process, even when it is killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			row.Error = fmt.Sprintf("starting redis-server: %v", err)
			return row
		}
		servers = append(servers, cmd)
		cpu = append(cpu, workload.Proc(fmt.Sprintf("redis-server %d", i), cmd.Process.Pid))
		pools = append(pools, redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 128}))
	}
	for i, c := range pools {
		if err := waitPing(ctx, c); err != nil {
			row.Error = fmt.Sprintf("redis-server %d: %v", i, err)
			return row
		}
	}
	var rpools []redsyncredis.Pool
	for _, c := range pools {
		rpools = append(rpools, goredis.NewPool(c))
	}
	rs := redsync.New(rpools...)
	locker := workload.LockerFunc(func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := rs.NewMutex("bench/"+key, redsync.WithTries(1<<30))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("unlock refused by a majority")
			}
			return err
		}, nil
	})
	err = workload.MeasureLocks(ctx, p, workload.Service{
		Caller:        locker,
		Worker:        func(int) (workload.Locker, error) { return locker, nil },
		Contender:     func(int) (workload.Locker, error) { return locker, nil },
		ContenderName: func(i int) string { return fmt.Sprintf("g%d", i) },
		Placement:     fmt.Sprintf("%d goroutines in the client process", p.Contenders),
		CPU:           cpu,
	}, &row)
	if err != nil {
		row.Error = err.Error()
	}
	return row
}

// waitPing waits until the server answers.
func waitPing(ctx context.Context, c *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer to PING: %w", err)
		case <-tick.C:
		}
	}
}
