package meshtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/meshtest"
)

// job is the application's code under test: it runs on the node that
// holds "jobs/reindex", and must stop as soon as that node's lease is
// lost, before another node's job may start.
type job struct {
	held    chan *mesh.Lease
	stopped chan error
}

func startJob(ctx context.Context, m *mesh.Mesh) *job {
	j := &job{held: make(chan *mesh.Lease, 1), stopped: make(chan error, 1)}
	go func() {
		l, err := m.Acquire(ctx, "jobs/reindex") // waits while another node runs it
		if err != nil {
			j.stopped <- err
			return
		}
		j.held <- l
		<-l.Done() // the work would run here, writing under l.Token()
		j.stopped <- l.Err()
	}()
	return j
}

// A test of failover code: the job runs on node0; the test makes node0's
// lease be lost; the job there stops, and the standby job on node1 takes
// over under a higher fencing token. In a test, start the cluster with
// c := meshtest.New(t, 3) instead of Start and Close.
func Example_failover() {
	c, err := meshtest.Start(3)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	primary := startJob(ctx, c.Node(0))
	first := <-primary.held
	standby := startJob(ctx, c.Node(1))
	fmt.Println("node0 runs the job")

	c.LoseLease(first)
	err = <-primary.stopped
	fmt.Println("node0's job stopped, its lease lost:", errors.Is(err, mesh.ErrLeaseLost))

	select {
	case next := <-standby.held:
		fmt.Println("node1 took over under a higher token:", next.Token() > first.Token())
	case err := <-standby.stopped:
		fmt.Println("the standby failed:", err)
	}
	// Output:
	// node0 runs the job
	// node0's job stopped, its lease lost: true
	// node1 took over under a higher token: true
}
