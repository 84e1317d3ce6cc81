// Package meshtest runs a lock mesh inside a test, and breaks it on
// demand, so that an application's own failover code can be tested
// against the real protocol: a lease lost now, a node cut off and healed,
// a node stopped and restarted.
//
//	func TestJobStopsWhenItsLeaseIsLost(t *testing.T) {
//		c := meshtest.New(t, 3) // 3 voters, ready; shut down when the test ends
//		ctx := t.Context()
//		j := startJob(ctx, c.Node(0)) // the code under test
//		l := <-j.held
//		c.LoseLease(l) // the node tells the holder: Done closes, Err wraps ErrLeaseLost
//		if err := <-j.stopped; !errors.Is(err, mesh.ErrLeaseLost) {
//			t.Fatalf("the job stopped with %v, want a lost lease", err)
//		}
//	}
//
// New starts n nodes (node0, node1, ...), every one a voter unless
// WithConfig says otherwise, and returns once every node is ready: about
// 200 ms for 3 nodes. Gossip runs on loopback, ballots on an in-memory
// network (transport.Network), every node keeps a data directory in the
// test's t.TempDir(), and timers are mesh.DefaultLocalConfig's (a 1 s lease
// TTL). The cluster shuts down when the test ends.
//
// The faults go through the mechanisms that cause them in production:
// LoseLease cuts the holder off and moves its clock (mesh.Clock) to the
// moment its node must give the lease up; Isolate cuts a node's gossip and
// ballots both ways; Stop is a crash (leases are not released; the voters
// free the keys when their TTL passes); Restart starts a node again on its
// data directory and gossip address. Nothing in the mesh is switched off
// to do it.
//
// Start and Close do the same for code without a *testing.T, such as an
// Example.
package meshtest
