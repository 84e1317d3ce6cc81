package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// runEtcd measures 3 etcd members embedded in this process (embed), data
// in a temporary directory, through concurrency.Mutex: each goroutine has
// its own session (its own lease), all through one client connected to the
// leader's endpoint.
func runEtcd(ctx context.Context, p workload.Params, noFsync bool) workload.Row {
	tmp, err := os.MkdirTemp("", "lockmesh-bench-etcd-")
	if err != nil {
		return workload.Row{Setup: "etcd", Error: err.Error()}
	}
	defer os.RemoveAll(tmp)
	durability := "fsync on (etcd's default)"
	if noFsync {
		durability = "UnsafeNoFsync (no fsync)"
	}
	row := workload.Row{Setup: fmt.Sprintf("etcd, 3 members embedded in 1 process, data on %s, %s, concurrency.Mutex, client on the leader's endpoint",
		fsType(tmp), durability)}
	row.Notes = append(row.Notes,
		"one session (lease, default TTL 60 s) per goroutine, one client connection; Lock is a Txn plus a wait for earlier keys to go, Unlock a Delete")

	var urls [3]struct{ peer, client url.URL }
	var cluster []string
	for i := range urls {
		pp, err1 := freePort()
		cp, err2 := freePort()
		if err1 != nil || err2 != nil {
			row.Error = fmt.Sprintf("no free port: %v %v", err1, err2)
			return row
		}
		urls[i].peer = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
		urls[i].client = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)}
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i, urls[i].peer.String()))
	}
	var members []*embed.Etcd
	defer func() {
		for _, e := range members {
			e.Close()
		}
	}()
	start := time.Now()
	for i := range urls {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(tmp, cfg.Name)
		cfg.ListenPeerUrls = []url.URL{urls[i].peer}
		cfg.AdvertisePeerUrls = []url.URL{urls[i].peer}
		cfg.ListenClientUrls = []url.URL{urls[i].client}
		cfg.AdvertiseClientUrls = []url.URL{urls[i].client}
		cfg.InitialCluster = strings.Join(cluster, ",")
		cfg.InitialClusterToken = "lockmesh-bench"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.UnsafeNoFsync = noFsync
		// Silent: etcd logs errors about its own listeners while it closes.
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			row.Error = fmt.Sprintf("starting member %d: %v", i, err)
			return row
		}
		members = append(members, e)
	}
	for i, e := range members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			row.Error = fmt.Sprintf("member %d: %v", i, err)
			return row
		case <-ctx.Done():
			row.Error = fmt.Sprintf("member %d not ready: %v", i, ctx.Err())
			return row
		}
	}
	leader := -1
	for i, e := range members {
		if e.Server.Leader() == e.Server.MemberID() {
			leader = i
		}
	}
	if leader < 0 {
		row.Error = "no leader"
		return row
	}
	logf("3 members ready in %.1fs, leader m%d", time.Since(start).Seconds(), leader)

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{urls[leader].client.String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		row.Error = fmt.Sprintf("client: %v", err)
		return row
	}
	defer cli.Close()
	var sessions []*concurrency.Session
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	newLocker := func() (workload.Locker, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, s)
		return workload.LockerFunc(func(ctx context.Context, key string) (func(context.Context) error, error) {
			m := concurrency.NewMutex(s, "/bench/"+key)
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}), nil
	}
	caller, err := newLocker()
	if err != nil {
		row.Error = fmt.Sprintf("session: %v", err)
		return row
	}
	err = workload.MeasureLocks(ctx, p, workload.Service{
		Caller:        caller,
		Worker:        func(int) (workload.Locker, error) { return newLocker() },
		Contender:     func(int) (workload.Locker, error) { return newLocker() },
		ContenderName: func(i int) string { return fmt.Sprintf("s%d", i) },
		Placement:     fmt.Sprintf("%d goroutines, one session each, through the client on the leader", p.Contenders),
		CPU:           []workload.CPUSource{workload.Self("peers (3 etcd members and the client)")},
	}, &row)
	if err != nil {
		row.Error = err.Error()
	}
	return row
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before etcd listens: then the member fails to start and the row
// says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// fsType names the file system holding dir, because fsync costs what the
// file system and the disk under it make it cost (nothing on tmpfs).
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "an unknown file system"
	}
	names := map[int64]string{
		0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
		0x794C7630: "overlayfs", 0x65735546: "fuse",
	}
	name, ok := names[int64(st.Type)]
	if !ok {
		name = fmt.Sprintf("file system type %#x", st.Type)
	}
	return fmt.Sprintf("%s (%s)", name, filepath.Dir(dir))
}
