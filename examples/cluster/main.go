// Command cluster is the lockmesh demo to run first:
//
//	go run ./examples/cluster
//
// It starts three voter nodes in this one process, on loopback, with real
// gossip and the real TCP ballot transport, and tells a short story on
// stdout: workers on every node share a counter under one lock; a node
// observes a leader election while two others lead in turn; a node holding
// the lock crashes and its stale write is refused by the fence; the crashed
// node comes back; and a node that leaves gracefully hands the lock over at
// once. It exits 0 when every step behaved, 1 otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

const key = "counter" // the one lock of the story

// stepTimeout bounds every wait of the demo: no step may hang.
const stepTimeout = 5 * time.Second

func main() {
	increments := flag.Int("increments", 30, "increments of the shared counter in step 2")
	perNode := flag.Int("workers", 2, "workers per node in step 2")
	verbose := flag.Bool("v", false, "print the nodes' debug logs on stderr")
	flag.Parse()
	if *increments < 1 || *perNode < 1 {
		fmt.Fprintln(os.Stderr, "cluster: -increments and -workers must be at least 1")
		os.Exit(2)
	}

	// A last resort: whatever happens, the demo ends.
	time.AfterFunc(60*time.Second, func() {
		fmt.Fprintln(os.Stderr, "FAIL: the demo did not finish within 60s")
		os.Exit(1)
	})

	fmt.Println("lockmesh cluster demo: three voter nodes in one process share a lock over loopback gossip and TCP.")
	d := &demo{
		start:      time.Now(),
		c:          newCluster([]string{"a", "b", "c"}, *verbose),
		increments: *increments,
		perNode:    *perNode,
	}
	err := d.run()
	d.c.shutdown()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL at step %d: %v\n", d.step, err)
		os.Exit(1)
	}
	first, last := d.st.tokenRange()
	fmt.Printf("OK: counter %d after %d fenced writes, tokens strictly increasing (%d..%d), 1 stale write refused; "+
		"election hand-over %s, crash take-over %s, leave hand-over %s; total %s.\n",
		d.st.get(), d.writes, first, last, round(d.election), round(d.takeover), round(d.handover), round(time.Since(d.start)))
}

// demo is the story's state.
type demo struct {
	start      time.Time
	c          *cluster
	st         store
	increments int
	perNode    int

	step     int
	out      sync.Mutex
	writes   int           // writes the store accepted
	election time.Duration // resign → next leader
	takeover time.Duration // crash → new grant
	handover time.Duration // Leave → new grant
	crashed  mesh.Status   // node c just before its crash
}

func (d *demo) run() error {
	for _, step := range []func() error{d.startNodes, d.share, d.elect, d.crash, d.restart, d.leave} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// title starts a numbered step.
func (d *demo) title(format string, args ...any) {
	d.step++
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Printf("\n%d. %s\n", d.step, fmt.Sprintf(format, args...))
}

// say prints one indented line of the current step.
func (d *demo) say(format string, args ...any) {
	d.out.Lock()
	defer d.out.Unlock()
	fmt.Printf("   %s\n", fmt.Sprintf(format, args...))
}

func (d *demo) startNodes() error {
	d.title("Start voters a, b and c on 127.0.0.1. A lock is granted by a majority: 2 of the 3.")
	t := time.Now()
	for _, name := range d.c.voters {
		m, err := d.c.start(name)
		if err != nil {
			return err
		}
		st := m.Status()
		d.say("%s: gossip %s, ballots %s, seeds %s", name, st.Addr, st.RPCAddr, seedList(d.c.configs[name].Seeds))
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := d.c.waitReady(ctx, d.c.voters...); err != nil {
		return err
	}
	d.say("all three see each other and vote, after the 1s quarantine every voter waits out at start: ready in %s", round(time.Since(t)))
	return nil
}

type acquired struct {
	l   *mesh.Lease
	err error
	at  time.Time
}

func seedList(seeds []string) string {
	if len(seeds) == 0 {
		return "none (first node)"
	}
	return strings.Join(seeds, ",")
}

// round shortens a duration for printing: 1.234s, 12ms, 1.3ms.
func round(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}
