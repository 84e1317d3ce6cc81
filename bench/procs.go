package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/nodecmd"
	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// lockmeshProcesses measures 3 voters in 3 OS processes (benchnode), the
// workloads running inside v1's process, CPU read from /proc for all three.
func lockmeshProcesses(ctx context.Context, o options, bin *nodeBinary, log io.Writer) workload.Row {
	row := workload.Row{Case: "lockmesh-procs",
		Setup: "lockmesh, 3 voters in 3 OS processes, loopback TCP, state in memory (no disk, no fsync), DefaultConfig timing (TTL 10 s, round timeout 250 ms), caller in v1's process"}
	path, err := bin.get(ctx, o, log)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Notes = append(row.Notes, "node binary: bench/internal/benchnode, workloads run inside the node process")
	start := time.Now()
	nodes, err := startProcCluster(ctx, path, 3, []string{"-lan-timing"}, log)
	defer stopAll(nodes)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Notes = append(row.Notes, fmt.Sprintf("cluster ready (all voters live) in %.1fs", time.Since(start).Seconds()))

	v1 := nodes[0]
	r, err := v1.call(ctx, fmt.Sprintf("latency %d %d bench/latency", o.n, o.warmup()))
	row.Latency = r.Latency
	if err != nil {
		row.Error = "latency: " + err.Error()
		return row
	}
	var cpu []workload.CPUSource
	for _, n := range nodes {
		cpu = append(cpu, workload.Proc(n.name, n.cmd.Process.Pid))
	}
	cpu0, err := readAll(cpu)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	r, err = v1.call(ctx, fmt.Sprintf("throughput %d %s", o.workers, o.duration))
	if err != nil {
		row.Error = "throughput: " + err.Error()
		return row
	}
	cpu1, err := readAll(cpu)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	tp := r.Throughput
	var total time.Duration
	for i := range cpu {
		used := cpu1[i] - cpu0[i]
		total += used
		tp.CPU = append(tp.CPU, workload.ProcessCPU{Name: cpu[i].Name, Seconds: used.Seconds()})
	}
	if tp.Ops > 0 {
		tp.CPUMicrosPerOp = float64(total) / float64(time.Microsecond) / float64(tp.Ops)
	}
	row.Throughput = tp

	// Hand-over: the contenders spread over the three processes (3, 3, 2).
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		holds []workload.Hold
		errs  []error
	)
	for i, n := range nodes {
		workers := o.handoverWorkers / len(nodes)
		if i < o.handoverWorkers%len(nodes) {
			workers++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := n.call(ctx, fmt.Sprintf("contend %d %s %s %d bench/handover", workers, o.duration, o.hold, o.maxHolds()/len(nodes)))
			mu.Lock()
			defer mu.Unlock()
			holds = append(holds, r.Holds...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
			}
		}()
	}
	wg.Wait()
	row.Handover = workload.Handovers(holds, o.handoverWorkers,
		fmt.Sprintf("%d goroutines spread over the 3 node processes (3, 3, 2)", o.handoverWorkers))
	if err := errors.Join(errs...); err != nil {
		row.Error = "hand-over: " + err.Error()
	}
	return row
}

func readAll(cpu []workload.CPUSource) ([]time.Duration, error) {
	out := make([]time.Duration, len(cpu))
	for i, c := range cpu {
		v, err := c.Read()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// nodeBinary is bench/internal/benchnode, built at most once per run.
type nodeBinary struct {
	tmp, path string
	err       error
}

// get builds the node binary the first time, and returns its path.
func (b *nodeBinary) get(ctx context.Context, o options, log io.Writer) (string, error) {
	if b.path != "" || b.err != nil {
		return b.path, b.err
	}
	b.tmp, b.err = os.MkdirTemp("", "lockmesh-bench-node-")
	if b.err != nil {
		return "", b.err
	}
	start := time.Now()
	path := filepath.Join(b.tmp, "benchnode")
	if b.err = goBuild(ctx, o.root, path, "./bench/internal/benchnode"); b.err != nil {
		return "", b.err
	}
	fmt.Fprintf(log, "bench: bench/internal/benchnode built in %.1fs\n", time.Since(start).Seconds())
	b.path = path
	return path, nil
}

func (b *nodeBinary) cleanup() {
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
}

// startProcCluster starts n voters v1..vn, each in its own benchnode
// process with the extra arguments args, joins them and waits until every
// one votes. The nodes it returns, even with an error, must be stopped.
func startProcCluster(ctx context.Context, bin string, n int, args []string, log io.Writer) ([]*nodeProc, error) {
	var voters []string
	for i := range n {
		voters = append(voters, fmt.Sprintf("v%d", i+1))
	}
	var nodes []*nodeProc
	for i, name := range voters {
		a := append([]string{"-name", name, "-voters", strings.Join(voters, ",")}, args...)
		if i > 0 {
			a = append(a, "-seeds", nodes[0].addr)
		}
		p, err := startNode(ctx, bin, name, a, log)
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, p)
	}
	var addrs []string
	for _, p := range nodes {
		addrs = append(addrs, p.addr)
	}
	for _, p := range nodes[1:] {
		if _, err := p.call(ctx, "join "+strings.Join(addrs, ",")); err != nil {
			return nodes, err
		}
	}
	for _, p := range nodes {
		if _, err := p.call(ctx, "ready 60s"); err != nil {
			return nodes, err
		}
	}
	return nodes, nil
}

func stopAll(nodes []*nodeProc) {
	for _, p := range nodes {
		p.stop()
	}
}

// goBuild builds pkg of the module in dir into out.
func goBuild(ctx context.Context, dir, out, pkg string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s (in %s): %w: %s", pkg, dir, err, lastLines(string(b), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// nodeProc is a running benchnode and the commands waiting for replies.
type nodeProc struct {
	name  string
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	nextID  int
	pending map[int]chan nodecmd.Reply
	exited  chan struct{} // closed when stdout ends
}

// startNode starts a benchnode and waits for its "started" line.
func startNode(ctx context.Context, bin, name string, args []string, log io.Writer) (*nodeProc, error) {
	n := &nodeProc{name: name, pending: map[int]chan nodecmd.Reply{}, exited: make(chan struct{})}
	n.cmd = exec.Command(bin, args...)
	// The node dies with the bench, even if the bench is killed.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.cmd.Stderr = prefixWriter{log, "bench: " + name + ": "}
	var err error
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	started := make(chan nodecmd.Reply, 1)
	go n.read(stdout, started)
	select {
	case r := <-started:
		n.addr = r.Addr
		return n, nil
	case <-n.exited:
		n.stop()
		return nil, fmt.Errorf("%s exited before it started", name)
	case <-ctx.Done():
		n.stop()
		return nil, fmt.Errorf("%s did not start: %w", name, ctx.Err())
	}
}

func (n *nodeProc) read(stdout io.Reader, started chan<- nodecmd.Reply) {
	defer close(n.exited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 256<<20) // hand-over replies carry every hold
	for sc.Scan() {
		var r nodecmd.Reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		if r.Event == "started" {
			started <- r
			continue
		}
		n.mu.Lock()
		ch := n.pending[r.ID]
		delete(n.pending, r.ID)
		n.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// call sends a command and waits for its reply.
func (n *nodeProc) call(ctx context.Context, command string) (nodecmd.Reply, error) {
	ch := make(chan nodecmd.Reply, 1)
	n.mu.Lock()
	n.nextID++
	id := n.nextID
	n.pending[id] = ch
	_, err := fmt.Fprintf(n.stdin, "%d %s\n", id, command)
	n.mu.Unlock()
	if err != nil {
		return nodecmd.Reply{}, fmt.Errorf("%s: %w", n.name, err)
	}
	select {
	case r := <-ch:
		if r.Error != "" {
			return r, fmt.Errorf("%s: %s", n.name, r.Error)
		}
		return r, nil
	case <-n.exited:
		return nodecmd.Reply{}, fmt.Errorf("%s exited during %q", n.name, command)
	case <-ctx.Done():
		return nodecmd.Reply{}, fmt.Errorf("%s: %q: %w", n.name, command, ctx.Err())
	}
}

// stop asks the node to quit and kills it if it does not within 5s.
func (n *nodeProc) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.call(ctx, "quit")
	n.stdin.Close()
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
	}
	// Wait only once stdout has been read to its end (os/exec's rule).
	n.cmd.Wait()
}

// prefixWriter prefixes each write (a log line, usually) for the log.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	_, err := fmt.Fprintf(p.w, "%s%s", p.prefix, b)
	return len(b), err
}
