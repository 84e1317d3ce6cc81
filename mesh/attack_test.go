package mesh

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The attack suite (docs/security.md, "What each can and cannot do"):
// each test plays one attack against a mesh under lock traffic and checks
// exclusion, tokens and recovery, logging what the attack achieved
// (double grants, token regressions, memory pinned, time to recover).
//
//   - TestAttackForgedAliveMember: a process with a non-voter's certificate
//     and the gossip key forges memberlist alive messages that move every
//     voter's ballot address to itself, and answers as the voters.
//   - TestAttackForgedAliveOutsider: the same by a host on the network of a
//     mesh without a gossip key, with TLS (it has no certificate) and
//     without (it answers the ballots in the clear).
//   - TestAttackDuplicateName: a second process started with a voter's
//     name (a copied configuration), with and without TLS.
//   - TestAttackStolenCertificate: a member's certificate used to speak in
//     another member's name, and a certificate of another CA.
//   - TestAttackFrameFlood, TestAttackHandshakeFlood: hundreds of
//     connections sending 4 MiB frames at a voter run as a child process
//     (its memory is measured), and connections that never finish their
//     handshake.
//
// The suite is opt-in, like the fault suite (mesh/faulttest):
//
//	LOCKMESH_ATTACKS=1 go test -race -run 'TestAttack' ./mesh/
//
// .ci/run sets it. A child node is this test binary run again with
// LOCKMESH_ATTACK_CHILD set (TestAttackChildNode).

// requireAttacks skips the test unless the attack suite was asked for.
func requireAttacks(t *testing.T) {
	t.Helper()
	if os.Getenv("LOCKMESH_ATTACKS") != "1" {
		t.Skip("attack tests are opt-in: set LOCKMESH_ATTACKS=1 to run them")
	}
}

// grant is one lease of the lock traffic, as its holder saw it: from the
// moment Acquire returned to the moment it stopped acting (the release, or
// the deadline the lease reported, whichever came first).
type grant struct {
	key, node  string
	token      uint64
	start, end time.Time
}

// traffic is lock traffic: clients on each node that acquire one of a few
// keys, hold it a few milliseconds and release it, recording every grant.
type traffic struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	grants []grant
	fails  map[string]int       // failed acquires per node
	last   map[string]time.Time // the start of each node's latest grant
}

// startTraffic starts perNode clients on each node, over keys.
func startTraffic(t *testing.T, nodes []*Mesh, keys []string, perNode int) *traffic {
	tr := &traffic{stop: make(chan struct{}), fails: make(map[string]int), last: make(map[string]time.Time)}
	for i, m := range nodes {
		for j := 0; j < perNode; j++ {
			rng := rand.New(rand.NewSource(int64(i*100 + j + 1)))
			tr.wg.Add(1)
			go tr.client(m, keys, rng)
		}
	}
	t.Cleanup(tr.halt)
	return tr
}

func (tr *traffic) client(m *Mesh, keys []string, rng *rand.Rand) {
	defer tr.wg.Done()
	pause := func(d time.Duration) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-tr.stop:
			return false
		case <-timer.C: // a pause between operations, not a wait for an event
			return true
		}
	}
	for {
		select {
		case <-tr.stop:
			return
		default:
		}
		key := keys[rng.Intn(len(keys))]
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := m.Acquire(ctx, key, WaitBehindOwnLease()) // clients of one node take turns too
		cancel()
		if err != nil {
			tr.mu.Lock()
			tr.fails[m.Name()]++
			tr.mu.Unlock()
			if !pause(20 * time.Millisecond) {
				return
			}
			continue
		}
		start := time.Now()
		pause(time.Duration(rng.Intn(3000)) * time.Microsecond)
		end := time.Now()
		if d := l.Deadline(); d.Before(end) {
			end = d
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		l.Release(ctx)
		cancel()
		tr.mu.Lock()
		tr.grants = append(tr.grants, grant{key: key, node: m.Name(), token: l.Token(), start: start, end: end})
		tr.last[m.Name()] = start
		tr.mu.Unlock()
	}
}

// halt stops the clients and waits for them.
func (tr *traffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
}

// verdict is what the traffic saw.
type verdict struct {
	grants      int
	doubles     int // pairs of grants of one key whose intervals overlap
	regressions int // grants whose token is not above that of a grant that ended before they began
	fails       int
}

func (v verdict) String() string {
	return fmt.Sprintf("%d grants, %d double grants, %d token regressions, %d failed acquires",
		v.grants, v.doubles, v.regressions, v.fails)
}

// check examines the grants that began in [from, to).
func (tr *traffic) check(from, to time.Time) verdict {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	byKey := make(map[string][]grant)
	var v verdict
	for _, g := range tr.grants {
		if g.start.Before(from) || !g.start.Before(to) {
			continue
		}
		v.grants++
		byKey[g.key] = append(byKey[g.key], g)
	}
	for _, f := range tr.fails {
		v.fails += f
	}
	for _, gs := range byKey {
		slices.SortFunc(gs, func(a, b grant) int { return a.start.Compare(b.start) })
		for i, g := range gs {
			for _, h := range gs[i+1:] {
				if !h.start.Before(g.end) {
					break
				}
				v.doubles++
			}
		}
		// A grant's token must exceed every token of a grant that ended
		// before it began.
		ends := slices.Clone(gs)
		slices.SortFunc(ends, func(a, b grant) int { return a.end.Compare(b.end) })
		var maxEnded uint64
		j := 0
		for _, g := range gs {
			for j < len(ends) && ends[j].end.Before(g.start) {
				maxEnded = max(maxEnded, ends[j].token)
				j++
			}
			if g.token <= maxEnded {
				v.regressions++
			}
		}
	}
	return v
}

// grantedEverywhere waits until every node named has had a grant that began
// after since, and returns how long after since that took (or false).
func (tr *traffic) grantedEverywhere(names []string, since time.Time, limit time.Duration) (time.Duration, bool) {
	var took time.Duration
	ok := poll(limit, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		took = 0
		for _, n := range names {
			last := tr.last[n]
			if !last.After(since) {
				return false
			}
			took = max(took, last.Sub(since))
		}
		return true
	})
	return took, ok
}

func (tr *traffic) resetFails() {
	tr.mu.Lock()
	clear(tr.fails)
	tr.mu.Unlock()
}

// childSpec configures a node run as a child process.
type childSpec struct {
	Name             string
	Voters, Seeds    []string
	MaxBytesInFlight int
}

// child is a node running in a child process.
type child struct {
	cmd       *exec.Cmd
	in        io.WriteCloser
	out       *bufio.Scanner
	gossip    string
	rpc       string
	waitErr   chan error
	stderrBuf *strings.Builder
}

// startChild runs this test binary again as a node (TestAttackChildNode).
func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	js, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackChildNode$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCKMESH_ATTACK_CHILD="+string(js))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out), waitErr: make(chan error, 1), stderrBuf: &strings.Builder{}}
	cmd.Stderr = c.stderrBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.waitErr <- cmd.Wait() }()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-c.waitErr:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-c.waitErr
		}
	})
	f := c.line(t, "ready")
	c.gossip, c.rpc = f[1], f[2]
	return c
}

// line reads the child's output up to a line starting with word, and
// returns its fields.
func (c *child) line(t *testing.T, word string) []string {
	t.Helper()
	for c.out.Scan() {
		f := strings.Fields(c.out.Text())
		if len(f) > 0 && f[0] == word {
			return f
		}
	}
	t.Fatalf("the child node ended without a %q line: %v\n%s", word, c.out.Err(), c.stderrBuf.String())
	return nil
}

// memory asks the child for its memory: the Go heap in use after a
// collection (what is pinned) and the resident set now and at its highest,
// in bytes.
func (c *child) memory(t *testing.T) (heap, rss, peak int64) {
	t.Helper()
	fmt.Fprintln(c.in, "mem")
	f := c.line(t, "mem")
	heap, _ = strconv.ParseInt(f[1], 10, 64)
	rss, _ = strconv.ParseInt(f[2], 10, 64)
	peak, _ = strconv.ParseInt(f[3], 10, 64)
	return heap, rss, peak
}

// TestAttackChildNode is not a test: it is the child node of the attack
// suite, run by startChild. It runs a node as LOCKMESH_ATTACK_CHILD says,
// prints "ready <gossip address> <ballot address>", answers "mem" with
// "mem <heap in use after a collection> <resident> <peak resident>" and
// stops when its input ends.
func TestAttackChildNode(t *testing.T) {
	js := os.Getenv("LOCKMESH_ATTACK_CHILD")
	if js == "" {
		t.Skip("the child node of the attack suite (run by startChild)")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig()
	cfg.Name = spec.Name
	cfg.Voters = spec.Voters
	cfg.Seeds = spec.Seeds
	cfg.Timing.TTL = 3 * time.Second
	setBudget(cfg, spec.MaxBytesInFlight)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	fmt.Printf("ready %s %s\n", m.Addr(), m.Status().RPCAddr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "mem" {
			runtime.GC() // what is pinned, not garbage not yet collected
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rss, peak := procMemory()
			fmt.Printf("mem %d %d %d\n", ms.HeapInuse, rss, peak)
		}
	}
}

// procMemory reads the resident set size and its peak from /proc (zeros
// where there is none).
func procMemory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

const mib = 1 << 20
