package mesh_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// Leader election: a leads; an observer on c is told of each leader by the
// voters as it happens (no polling); when a resigns, b, which was
// campaigning, leads next under a higher token.
func ExampleMesh_Observe() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	leaders, err := c.Observe(ctx, "scheduler")
	if err != nil {
		panic(err)
	}
	// The first state is the election's now; then each change, in order.
	// A moment with nobody leading, between two leaders, may be skipped.
	fmt.Println("leader at first:", (<-leaders).Held)
	nextLeader := func() mesh.Leader {
		for l := range leaders {
			if l.Held {
				return l
			}
		}
		panic("observation ended")
	}

	leadA, err := a.Campaign(ctx, "scheduler", []byte("10.0.0.1:8080"))
	if err != nil {
		panic(err)
	}
	l := nextLeader()
	fmt.Printf("c sees %s lead at %s\n", l.Node, l.Value)

	campaignB := make(chan *mesh.Leadership)
	go func() { // b waits in line behind a
		lead, err := b.Campaign(ctx, "scheduler", []byte("10.0.0.2:8080"))
		if err != nil {
			panic(err)
		}
		campaignB <- lead
	}()
	leadA.Resign(ctx)
	leadB := <-campaignB
	l = nextLeader()
	fmt.Printf("c sees %s lead at %s\n", l.Node, l.Value)
	fmt.Println("b's token is higher than a's:", leadB.Token() > leadA.Token())
	now, _ := a.Leader(ctx, "scheduler") // a linearizable read
	fmt.Println("a reads the leader:", now.Node, now.Token == leadB.Token())
	leadB.Resign(ctx)
	// Output:
	// leader at first: false
	// c sees a lead at 10.0.0.1:8080
	// c sees b lead at 10.0.0.2:8080
	// b's token is higher than a's: true
	// a reads the leader: b true
}

// RunElection keeps a node in an election, as client-go's leaderelection
// does: it campaigns, runs OnStartedLeading while the node leads, and
// campaigns again after. The leader's ctx ends before another node can
// lead: here a's work has stopped before b's starts.
func ExampleMesh_RunElection() {
	nodes := startLocal([]string{"a", "b", "c"}, "a", "b", "c")
	defer shutdown(nodes)
	a, b := nodes[0], nodes[1]

	var aWorking atomic.Bool // a's work runs while it is set
	started, stopped := make(chan string, 4), make(chan string, 4)
	leaders := make(chan mesh.Leader, 64)
	run := func(m *mesh.Mesh, onNewLeader func(mesh.Leader)) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.RunElection(ctx, mesh.ElectionConfig{
				Name:  "scheduler",
				Value: []byte(m.Name()),
				OnStartedLeading: func(ctx context.Context) {
					if m == a {
						aWorking.Store(true)
						defer aWorking.Store(false)
					}
					started <- fmt.Sprintf("%s leads; a working: %v", m.Name(), aWorking.Load())
					<-ctx.Done() // work until the leadership ends
				},
				OnStoppedLeading: func() { stopped <- m.Name() + " stopped leading" },
				OnNewLeader:      onNewLeader,
			})
		}()
		return func() { cancel(); <-done }
	}
	waitLeader := func(node string) { // what b's OnNewLeader was told
		for {
			select {
			case l := <-leaders:
				if l.Held && l.Node == node {
					fmt.Println("b is told:", l.Node, "leads")
					return
				}
			case <-time.After(20 * time.Second):
				panic("no leader " + node)
			}
		}
	}

	stopA := run(a, nil)
	fmt.Println(<-started)
	stopB := run(b, func(l mesh.Leader) { leaders <- l })
	waitLeader("a")
	stopA() // a's ctx ends: a stops leading, resigns, and b takes over
	fmt.Println(<-stopped)
	fmt.Println(<-started)
	waitLeader("b")
	stopB()
	fmt.Println(<-stopped)
	// Output:
	// a leads; a working: true
	// b is told: a leads
	// a stopped leading
	// b leads; a working: false
	// b is told: b leads
	// b stopped leading
}
