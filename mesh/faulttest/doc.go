// Package faulttest runs lockmesh nodes as separate OS processes and does to
// them what production does, while clients lock through every node. Each
// scenario ends by checking the whole history it recorded (every operation
// with its start and end, its result and its token):
//
//   - linearizability per key: quorumtest's model and check, over what a
//     client of the mesh can observe (see lin in check_test.go); a failed or
//     timed-out check leaves porcupine's drawing of the key's history in
//     $LOCKMESH_ARTIFACTS (default: lockmesh-artifacts in the temporary
//     directory) and names the file;
//   - exclusion: no two holders of a key in overlapping intervals, from the
//     grant to the deadline the holder's Lease reported (to the release, for
//     a lease released earlier);
//   - tokens strictly increasing per key, in the order of the grants;
//   - a fenced resource (lease.Fence, in the test process: nodes report
//     each write with its token) that never admitted a lower token.
//
// The scenarios:
//
//   - TestKillHolder: kill -9 of a holder (a non-voter, then a voter) while
//     another node waits: the waiter holds the key within the TTL plus a
//     small bound, with a higher token.
//   - TestPausedHolderIsFenced: SIGSTOP of a holder for two TTLs; another
//     node takes the key; after SIGCONT the holder reports the lease lost and
//     the write it had decided on is refused by the fence.
//   - TestPartition: five voters in network namespaces; {a,b} cut from
//     {c,d,e} both ways, one way each, a → c only, and both ways for longer
//     than memberlist's dead-node gossip window (shortened to 3s in the
//     nodes). The minority grants nothing, the majority takes a's key only
//     after a's lease ended, and after healing the mesh is whole and the
//     minority grants again, with nothing restarted.
//   - TestRollingRestart: each voter in turn leaves and starts again: no
//     double grant, increasing tokens, bounded waits for the other clients.
//   - TestFullRestart: every node killed at once and started again: tokens
//     afterwards exceed every token before.
//   - TestSlowNetwork: delay, jitter and loss between namespaces (tc netem,
//     or where the kernel has none, a relaying proxy): still safe; latencies
//     reported.
//   - TestVoterGoneForGood: kill -9 of a voter that never comes back; an
//     operator adds a spare as a voter and removes the dead one, through
//     surviving nodes (a voter and a non-voter), while clients keep locking:
//     every live node ends on the new voters, no acquire on a live node
//     fails or waits past the bound.
//   - TestAutopilotReplacesGoneVoter: the same with nobody's help: the
//     autopilot (DeadAfter 2s) promotes the healthy spare and retires the
//     dead voter (the autopilot's own pilot), never the node started with
//     NoVote, and never removes before it has added.
//   - TestRollingUpgrade: a mesh of the previous release's nodes (commit
//     4de5f7e, protocol version 1, built from git history; skipped with a
//     message when the clone lacks it) and this tree's, two old voters and
//     a new one, an old and a new non-voter; clients lock on every node, then
//     each old node leaves and starts again on the new binary. Every node is
//     granted leases in the mixed mesh, a new node that gives up waiting
//     (and so sends OpUnwatch) disturbs no old one, and no node refuses
//     another's settings.
//   - TestChecksCatchBrokenHistories, TestModelOfWhatClientsSee: each check
//     fails on a history broken the way it guards against, and the model
//     accepts what clients of the mesh may legally see, full restarts
//     included (these start no process and always run).
//
// The suite is opt-in: the scenarios skip unless LOCKMESH_FAULTS=1. Run one
// scenario at a time on a shared machine:
//
//	LOCKMESH_FAULTS=1 go test -race -v -run 'TestKillHolder$' ./mesh/faulttest
//
// On loopback, without root: TestKillHolder, TestPausedHolderIsFenced,
// TestRollingRestart, TestFullRestart (the one with an amnesia in its
// history), TestVoterGoneForGood, TestAutopilotReplacesGoneVoter,
// TestRollingUpgrade. In
// network namespaces (root): TestPartition, TestSlowNetwork. A failed
// linearizability check names the HTML file it left; set
// LOCKMESH_ARTIFACTS=dir to choose where.
//
// The nodes are cmd/faultnode, built once per test run (with -race when the
// tests run with -race; a data race reported in a node's log fails the
// test) and driven over stdin and stdout with the JSON lines of
// internal/control. Times are the machine's CLOCK_MONOTONIC, shared by every
// process. Scenarios that cut the network need root and iproute2 (network
// namespaces, veth pairs, a bridge); without them they skip and say so, and
// the others still run on loopback. A cut points a node's neighbour entry
// for a peer at a MAC address nobody has: frames are dropped silently, one
// direction at a time, with neither iptables nor nftables. Namespaces and
// links are named after the test process id (lockmesh-PID-*, lmPIDt*), removed
// by the test's cleanup even when it fails, and leftovers of earlier runs
// whose process is gone are removed before a new network is built.
//
// A scenario is a test that builds a cluster (newCluster: voters, nodes that
// do not vote, timers, optionally a netlab), starts background clients
// (startClients), applies its faults through the cluster (kill, leave,
// start, proc().signal) or the lab (cut, split, heal), and ends with
// finish, which stops every node and runs the checks. A node that joins the
// mesh later without being a voter is cluster.addNode; a scenario that
// changes the voter configuration adds its own request to the control
// protocol and cmd/faultnode.
package faulttest
