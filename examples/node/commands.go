package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

const help = `commands, one per line:
  acquire KEY   take KEY, waiting up to -wait while another node holds it; prints the token
  try KEY       take KEY only if it is free now
  release KEY   release KEY (taken by this process)
  holder KEY    ask a majority of the voters who holds KEY
  status        this node's view: members, voters, leases, counters
  voters        the voter configuration this node knows
  add-voter N   make node N (running and joined) a voter; waits until done
  remove-voter N  remove node N from the voters (alive or gone for good)
  leave         release every lease, leave the mesh and exit
  quit          stop at once without releasing (like a crash) and exit
  help          this text`

// arity is how many arguments each command takes.
var arity = map[string]int{
	"acquire": 1, "try": 1, "release": 1, "holder": 1,
	"status": 0, "leave": 0, "quit": 0, "help": 0,
	"voters": 0, "add-voter": 1, "remove-voter": 1,
}

// leaveTimeout bounds a graceful leave.
const leaveTimeout = 3 * time.Second

// node is the running node and the leases this process holds.
type node struct {
	m    *mesh.Mesh
	out  *printer
	wait time.Duration

	mu     sync.Mutex
	leases map[string]*held
}

// held is a lease and the goroutine that reports its end.
type held struct {
	l        *mesh.Lease
	reported chan struct{} // closed once its end was printed
}

func newNode(m *mesh.Mesh, out *printer, wait time.Duration) *node {
	return &node{m: m, out: out, wait: wait, leases: make(map[string]*held)}
}

// announceReady prints "ready" once a majority of the voters answers a
// linearizable read (of a key no one uses): from then on locks can be
// granted.
func (n *node) announceReady(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.m.Holder(rctx, "lockmesh-node/ready-probe")
		cancel()
		if err == nil {
			n.out.emit(event{Event: "ready", Voters: n.m.Status().Voters})
			return
		}
		if errors.Is(err, mesh.ErrClosed) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// interactive runs the commands read from in until leave, quit or a
// signal (ctx), and returns the exit status. At the end of the input the
// node goes on serving (voting) until a signal.
func (n *node) interactive(ctx context.Context, in io.Reader) int {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return n.leave()
		case line, ok := <-lines:
			if !ok {
				n.out.emit(event{Event: "info", Message: "end of input: serving until SIGINT or SIGTERM"})
				lines = nil
				continue
			}
			if code, exit := n.exec(ctx, line); exit {
				return code
			}
		}
	}
}

// exec runs one command line; exit says the program should end with code.
func (n *node) exec(ctx context.Context, line string) (code int, exit bool) {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return 0, false
	}
	cmd, args := strings.ToLower(f[0]), f[1:]
	want, known := arity[cmd]
	switch {
	case !known:
		n.out.error(cmd, errorf("unknown_command", "unknown command %q (type \"help\")", cmd))
		return 0, false
	case len(args) != want && want == 0:
		n.out.error(cmd, errorf("usage", "%s takes no argument", cmd))
		return 0, false
	case len(args) != want && strings.HasSuffix(cmd, "-voter"):
		n.out.error(cmd, errorf("usage", "usage: %s NODE", cmd))
		return 0, false
	case len(args) != want:
		n.out.error(cmd, errorf("usage", "usage: %s KEY", cmd))
		return 0, false
	}
	switch cmd {
	case "acquire", "try":
		n.acquire(ctx, args[0], cmd == "acquire")
	case "release":
		n.release(args[0])
	case "holder":
		n.holder(ctx, args[0])
	case "status":
		st := n.m.Status()
		n.out.emit(event{Event: "status", Status: &st})
	case "voters":
		n.voters()
	case "add-voter", "remove-voter":
		n.changeVoters(cmd, args[0])
	case "help":
		n.out.emit(event{Event: "help", Message: help})
	case "leave":
		return n.leave(), true
	case "quit":
		n.m.Shutdown()
		n.waitReported()
		n.out.emit(event{Event: "quit"})
		return 0, true
	}
	return 0, false
}

// acquire takes key: waiting up to -wait (acquire) or not at all (try).
func (n *node) acquire(ctx context.Context, key string, wait bool) *mesh.Lease {
	op := "acquire"
	if !wait {
		op = "try"
	}
	n.mu.Lock()
	_, dup := n.leases[key]
	n.mu.Unlock()
	if dup {
		n.out.errorOn(op, key, errorf("already_held", "%q is already held by this process", key))
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.wait)
	defer cancel()
	var l *mesh.Lease
	var err error
	if wait {
		l, err = n.m.Acquire(ctx, key)
	} else {
		l, err = n.m.TryAcquire(ctx, key)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// mesh returns ctx's error when the wait ends, whatever the
		// reason: say what it may mean.
		err = fmt.Errorf("no grant within -wait %v (the key stayed held, or no majority of the voters answered): %w", n.wait, err)
	}
	if err != nil {
		n.out.errorOn(op, key, err)
		return nil
	}
	h := &held{l: l, reported: make(chan struct{})}
	n.mu.Lock()
	n.leases[key] = h
	n.mu.Unlock()
	n.out.emit(event{Event: "acquired", Key: key, Token: l.Token(), Deadline: l.Deadline().Format(time.RFC3339Nano)})
	go n.report(key, h)
	return l
}

// report prints how the lease ended, once it has: released (by release,
// leave or -hold) or lost (renewal failed, taken over, or the node stopped).
func (n *node) report(key string, h *held) {
	<-h.l.Done()
	e := event{Key: key, Token: h.l.Token()}
	if err := h.l.Err(); errors.Is(err, mesh.ErrReleased) {
		e.Event = "released"
	} else {
		e.Event, e.Message = "lost", err.Error()
	}
	n.out.emit(e)
	n.mu.Lock()
	if n.leases[key] == h {
		delete(n.leases, key)
	}
	n.mu.Unlock()
	close(h.reported)
}

// release releases key and waits for its "released" line.
func (n *node) release(key string) {
	n.mu.Lock()
	h := n.leases[key]
	n.mu.Unlock()
	if h == nil {
		n.out.errorOn("release", key, errorf("not_held", "%q is not held by this process", key))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	err := h.l.Release(ctx)
	<-h.reported // the lease ends at once, whatever Release returns
	if err != nil {
		n.out.errorOn("release", key, err)
	}
}

func (n *node) holder(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(ctx, n.wait)
	defer cancel()
	h, err := n.m.Holder(ctx, key)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within -wait %v (no majority of the voters answered): %w", n.wait, err)
	}
	if err != nil {
		n.out.errorOn("holder", key, err)
		return
	}
	n.out.emit(event{Event: "holder", Key: key, Held: &h.Held, Holder: h.Node, Token: h.Token})
}

// leave releases every lease, leaves the mesh and returns the exit status.
func (n *node) leave() int {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	err := n.m.Leave(ctx)
	n.waitReported()
	if err != nil {
		n.out.error("leave", err)
		n.m.Shutdown()
		return 1
	}
	n.out.emit(event{Event: "left"})
	return 0
}

// waitReported waits until the end of every lease has been printed.
func (n *node) waitReported() {
	n.mu.Lock()
	var hs []*held
	for _, h := range n.leases {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	for _, h := range hs {
		select {
		case <-h.reported:
		case <-time.After(leaveTimeout):
		}
	}
}

// hold is -hold: take key, hold it for d (renewed in the background),
// release it and leave. It returns the exit status.
func (n *node) hold(ctx context.Context, key string, d time.Duration) int {
	l := n.acquire(ctx, key, true)
	if l == nil {
		n.leave()
		return 1
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		n.release(key)
	case <-l.Done():
		n.leave()
		return 3
	case <-ctx.Done(): // the signal: leaving releases the key
	}
	return n.leave()
}

// voters prints the voter configuration this node knows.
func (n *node) voters() {
	c, err := n.m.Voters()
	if err != nil {
		n.out.error("voters", err)
		return
	}
	n.out.emit(event{Event: "voters", Voters: c.Voters, Version: c.Version, Pending: c.Pending, Retired: c.Retired})
}

// changeVoters adds or removes a voter and waits until the change is in
// effect (or fails).
func (n *node) changeVoters(cmd, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if cmd == "add-voter" {
		err = n.m.AddVoter(ctx, name)
	} else {
		err = n.m.RemoveVoter(ctx, name)
	}
	if err != nil {
		n.out.error(cmd, err)
		return
	}
	n.voters()
}
