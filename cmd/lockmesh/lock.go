package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

const lockHelp = `
Takes the lock KEY through the local agent (waiting while another holder
has it), runs CMD with LOCKMESH_KEY and LOCKMESH_TOKEN (the fencing token)
added to its environment, releases the lock when CMD exits, and exits with
CMD's status.

With -n N (N > 1), KEY names a counting semaphore: up to N commands hold it
at once, mesh-wide, each through one of N slots, KEY#0 to KEY#(N-1), each
slot a lock of its own with its own fencing token. LOCKMESH_KEY is then the
slot's key (the token is the slot's), LOCKMESH_SEMAPHORE is KEY, and every
user of KEY must give the same N (a different one is refused: status 64).

The lease lives in the agent, tied to this process's connection: if lock
dies, the agent releases the key at once. lock keeps its own bound of the
lease's deadline, never later than the real one, by asking the agent every
TTL/10 how long the lease has left. When the agent reports the lease lost,
or the connection to the agent breaks, or the agent stops answering until
the bound is within the notice margin, lock stops CMD: SIGTERM to CMD's
process group, then SIGKILL after -grace, or earlier, so that the SIGKILL
goes out at least a quarter of the notice margin before the bound (125 ms
for the agent's lan default of a 10 s TTL, 25 ms for its local 1 s). This
assumes that lock itself is scheduled, and the kernel delivers the
signal, within that quarter; a machine paused as a whole (SIGSTOP of lock
and CMD, a frozen VM) cannot be helped. That is what the token is for: pass
LOCKMESH_TOKEN to every write, and have the resource refuse tokens lower
than the highest it has seen (see lease.Fence).

CMD runs in its own process group (it is not the terminal's foreground job:
lock forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it).
On Linux CMD also gets SIGKILL if lock dies; processes CMD started are not
covered by that, and run on unlocked. When CMD exits after a loss, the rest
of its process group is SIGKILLed too.

exit status: CMD's (128+N if a signal N killed it); 64 usage error
(including an -n that another user of KEY does not give); 65 the agent, or
a node of its mesh, cannot do it yet (-n on an earlier release); 69 the
agent could not be
reached, or no majority of the voters answered; 75 the lock was not
acquired within -timeout; 76 the lease was lost while CMD ran (CMD was
signalled); 126 CMD could not be run; 127 CMD was not found; 128+N a
signal N arrived before CMD started.`

func lockCommand() *command {
	c := newCommand("lock", "KEY -- CMD [ARG...]", "run a command while holding a lock", lockHelp)
	socket := c.socketFlag()
	ttl := c.fs.Duration("ttl", 0, "lease TTL (default: the agent's -ttl); at most the agent's -max-ttl")
	n := c.fs.Int("n", 1, "holders allowed at once: KEY is a semaphore of N slots when N > 1")
	timeout := c.fs.Duration("timeout", 0, "give up when the lock is not acquired within this long (0: wait for ever)")
	grace := c.fs.Duration("grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lease is lost; cut short to end before the deadline")
	verbose := c.fs.Bool("v", false, "say on stderr when the lock is acquired and released")
	c.run = func(args []string) error {
		switch {
		case len(args) < 3 || args[1] != "--":
			return c.usageError("want KEY -- CMD [ARG...] (flags go before KEY)")
		case *n < 1 || *n > maxHolders:
			return c.usageError("-n %d: want 1 to %d", *n, maxHolders)
		case *ttl < 0 || *timeout < 0 || *grace <= 0:
			return c.usageError("-ttl and -timeout must not be negative, -grace must be positive")
		}
		l := &locker{socket: *socket, key: args[0], n: *n, argv: args[2:], ttl: *ttl, timeout: *timeout, grace: *grace, verbose: *verbose}
		return l.run()
	}
	return c
}

// maxHolders bounds -n (quorum.MaxSemaphore: an acquire may look at every
// slot).
const maxHolders = 256

// locker is one run of lock.
type locker struct {
	socket, key  string
	n            int    // holders at once (a semaphore when > 1)
	slot         string // the key of the semaphore's slot held
	argv         []string
	ttl, timeout time.Duration
	grace        time.Duration
	verbose      bool

	cl    *client
	token uint64
	t     timing
	sigs  chan os.Signal
	cmd   *exec.Cmd
	pgid  int

	stopping  string // why CMD is being stopped; empty while it runs under the lease
	stopTimer *time.Timer
	killC     <-chan time.Time
	agentDone <-chan struct{}
}

func (l *locker) run() error {
	if err := checkPlatform(); err != nil {
		return fail(exitUnsupported, "%v", err)
	}
	l.sigs = make(chan os.Signal, 8)
	signal.Notify(l.sigs, forwarded...)
	defer signal.Stop(l.sigs)
	cl, err := dial(context.Background(), l.socket)
	if err != nil {
		return err
	}
	l.cl = cl
	defer cl.close()
	ttl, notice, err := l.acquire()
	if err != nil {
		return err
	}
	if err := l.start(); err != nil {
		return err
	}
	return l.supervise(ttl, notice)
}

// acquire takes the lock, or fails with the status to exit with.
func (l *locker) acquire() (ttl, notice time.Duration, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if l.timeout > 0 {
		// The agent gives up at -timeout; this bounds an agent that does
		// not answer at all.
		ctx, cancel = context.WithTimeout(ctx, l.timeout+5*time.Second)
		defer cancel()
	}
	type result struct {
		r   reply
		err error
	}
	if l.verbose {
		fmt.Fprintf(os.Stderr, "lockmesh: %s: asking agent %s for the lock\n", l.key, l.cl.node)
	}
	done := make(chan result, 1)
	go func() {
		r, err := l.cl.call(ctx, request{Op: opAcquire, Key: l.key, TTL: int64(l.ttl), Timeout: int64(l.timeout), N: l.n})
		done <- result{r, err}
	}()
	var res result
	select {
	case res = <-done:
	case sig := <-l.sigs:
		return 0, 0, fail(exitSignal+signalNumber(sig), "%s: %v while waiting for the lock", l.key, sig)
	}
	var ae *apiError
	switch {
	case errors.As(res.err, &ae) && ae.Code == codeTimeout && ae.Holder != "":
		return 0, 0, fail(exitTimeout, "%s: not acquired within -timeout %v: held by %s (token %d)", l.key, l.timeout, ae.Holder, ae.Token)
	case errors.As(res.err, &ae) && ae.Code == codeTimeout:
		return 0, 0, fail(exitTimeout, "%s: not acquired within -timeout %v: %v", l.key, l.timeout, ae)
	case errors.Is(res.err, context.DeadlineExceeded):
		return 0, 0, fail(exitUnavailable, "%s: the agent did not answer within -timeout %v", l.key, l.timeout)
	case res.err != nil:
		return 0, 0, failAPI(l.key, res.err)
	}
	l.token, l.slot = res.r.Token, res.r.Key
	ttl, notice = time.Duration(res.r.TTL), time.Duration(res.r.Notice)
	// The bound starts from a question asked now: the acquire may have
	// been asked long before the grant (see supervise.go).
	lctx, lcancel := context.WithTimeout(context.Background(), ttl)
	defer lcancel()
	sent := time.Now()
	r, err := l.cl.call(lctx, request{Op: opLease})
	if err != nil {
		return 0, 0, fail(exitUnavailable, "%s: the lease ended as it was granted (CMD not run): %v", l.key, err)
	}
	l.t = newTiming(sent.Add(time.Duration(r.Remaining)), ttl, notice)
	if l.verbose {
		fmt.Fprintf(os.Stderr, "lockmesh: %s: acquired through agent %s, token %d, TTL %v\n", l.key, l.cl.node, l.token, ttl)
	}
	return ttl, notice, nil
}

// start runs CMD in its own process group.
func (l *locker) start() error {
	cmd := exec.Command(l.argv[0], l.argv[1:]...)
	cmd.Env = append(os.Environ(), "LOCKMESH_KEY="+l.slot, "LOCKMESH_TOKEN="+strconv.FormatUint(l.token, 10))
	if l.n > 1 {
		cmd.Env = append(cmd.Env, "LOCKMESH_SEMAPHORE="+l.key)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return fail(code, "%s: %v (the lock is released)", l.key, err)
	}
	l.cmd, l.pgid = cmd, cmd.Process.Pid
	return nil
}

// bound is one answer of the agent about the lease: a newer bound of its
// deadline, or the error that says it has ended.
type bound struct {
	at  time.Time
	err error
}

// supervise waits for CMD's exit, stopping CMD first when the lease is, or
// may be, lost. Then it releases the lock and returns the exit status.
func (l *locker) supervise(ttl, notice time.Duration) error {
	exited := make(chan struct{})
	go func() {
		l.cmd.Wait()
		close(exited)
	}()
	pctx, stopPings := context.WithCancel(context.Background())
	defer stopPings()
	bounds := make(chan bound, 1)
	go l.ping(pctx, pingEvery(ttl), bounds)
	l.stopTimer = time.NewTimer(time.Until(l.t.stopAt()))
	defer l.stopTimer.Stop()
	l.agentDone = l.cl.done
	for {
		select {
		case b := <-bounds:
			var ae *apiError
			switch {
			case errors.As(b.err, &ae) && (ae.Code == codeLost || ae.Code == codeNotHeld):
				l.stop("lease lost: " + ae.Message)
			case b.err == nil && l.stopping == "":
				l.t = l.t.moved(b.at)
				l.stopTimer.Reset(time.Until(l.t.stopAt()))
			}
		case <-l.stopTimer.C:
			l.stop(fmt.Sprintf("the agent has not confirmed a renewal, and the lease may end within %v", l.t.notice))
		case ev := <-l.cl.events:
			if ev.Event == "lost" {
				l.stop("lease lost: " + ev.Message)
			}
		case <-l.agentDone:
			l.agentDone = nil
			l.stop(fmt.Sprintf("lost the agent (%v)", l.cl.err))
		case sig := <-l.sigs:
			signalGroup(l.pgid, sig)
		case <-l.killC:
			l.killC = nil
			signalGroup(l.pgid, syscall.SIGKILL)
		case <-exited:
			stopPings()
			return l.finish()
		}
	}
}

// stop starts stopping CMD, once: SIGTERM now, SIGKILL at killAt.
func (l *locker) stop(why string) {
	if l.stopping != "" {
		return
	}
	l.stopping = why
	l.stopTimer.Stop()
	now := time.Now()
	kill := l.t.killAt(now, l.grace)
	fmt.Fprintf(os.Stderr, "lockmesh: %s (token %d): %s: stopping CMD (SIGTERM, then SIGKILL within %v)\n",
		l.key, l.token, why, kill.Sub(now).Round(time.Millisecond))
	if !kill.After(now) {
		signalGroup(l.pgid, syscall.SIGKILL)
		return
	}
	signalGroup(l.pgid, syscall.SIGTERM)
	l.killC = time.After(kill.Sub(now))
}

// finish runs once CMD has exited.
func (l *locker) finish() error {
	status := exitStatus(l.cmd.ProcessState)
	if l.stopping != "" {
		// Nothing of CMD may go on without the lease.
		signalGroup(l.pgid, syscall.SIGKILL)
		return fail(exitLost, "%s (token %d): %s; CMD was stopped (its status: %d)", l.key, l.token, l.stopping, status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := l.cl.call(ctx, request{Op: opRelease}); err != nil {
		// The lease frees itself when it expires.
		fmt.Fprintf(os.Stderr, "lockmesh: %s: releasing: %v\n", l.key, err)
	} else if l.verbose {
		fmt.Fprintf(os.Stderr, "lockmesh: %s: released (token %d)\n", l.key, l.token)
	}
	return quietExit(status)
}

// ping asks the agent, every interval, how long the lease has left, and
// passes each answer on (see supervise.go). It stops at the first error:
// the lease ended, or the connection did.
func (l *locker) ping(ctx context.Context, every time.Duration, out chan<- bound) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		sent := time.Now()
		r, err := l.cl.call(ctx, request{Op: opLease})
		b := bound{at: sent.Add(time.Duration(r.Remaining)), err: err}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}
