package meshtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/meshtest"
)

// A leader cut off from the others by a network partition stops leading
// before another node leads: its leadership ends when its renewals cannot
// reach a majority, and the other side elects a leader of its own with a
// higher token. Heal joins the two sides again.
func ExampleCluster_Isolate() {
	c, err := meshtest.Start(3)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lead, err := c.Node(0).Campaign(ctx, "scheduler", []byte("node0"))
	if err != nil {
		panic(err)
	}
	c.Isolate(0)
	<-lead.Done()
	fmt.Println("node0 stopped leading:", errors.Is(lead.Err(), mesh.ErrLeaseLost))

	next, err := c.Node(1).Campaign(ctx, "scheduler", []byte("node1"))
	if err != nil {
		panic(err)
	}
	fmt.Println("node1 leads, with a higher token:", next.Token() > lead.Token())

	c.Heal()
	c.WaitReady()
	leader, err := c.Node(0).Leader(ctx, "scheduler")
	fmt.Println("node0, healed, sees the leader:", leader.Node, err)
	// Output:
	// node0 stopped leading: true
	// node1 leads, with a higher token: true
	// node0, healed, sees the leader: node1 <nil>
}
