// Package faulttest runs lockmesh nodes as separate OS processes and does to
// them what production does: kill -9, SIGSTOP past the lease TTL, network
// partitions between network namespaces (symmetric, one-way, and longer than
// memberlist's dead-node gossip window), rolling and full restarts, and a
// slow, lossy network. Clients drive the nodes throughout; every operation
// is recorded with its start and end time, its result and its token, and the
// history is checked at the end of each scenario:
//
//   - linearizability per key (porcupine), against a model of what a client
//     of the mesh can observe;
//   - exclusion: no two holders of a key in overlapping intervals (from the
//     grant to the deadline the holder's Lease reported);
//   - tokens strictly increasing per key, in the order of the grants;
//   - a fenced resource (lease.Fence, in the test process; nodes report their
//     writes with their token) that never accepted a lower token.
//
// The suite is opt-in: each scenario skips unless LOCKMESH_FAULTS=1.
//
//	LOCKMESH_FAULTS=1 go test -race -v ./mesh/faulttest
//
// The nodes are cmd/faultnode, built once per test run (with -race when the
// tests run with -race) and driven with the JSON lines of
// internal/control over stdin and stdout. Scenarios that cut the network
// need root and iproute2 (network namespaces, veth pairs, a bridge); without
// them they skip and say so, and the others still run on loopback. Partitions
// are made by pointing a node's neighbour entry for a peer at a MAC address
// nobody has: frames are dropped silently, one direction at a time, with
// neither iptables nor nftables. The slow network uses tc netem where the
// kernel has it, and otherwise a delaying, dropping UDP and TCP proxy
// (faultnode proxy) in a namespace of its own; the test log says which ran.
//
// Namespaces and links are named after the test process id (lockmesh-PID-*,
// lmPIDt*), removed by the test's cleanup even when it fails, and leftovers
// of earlier runs whose process is gone are removed before a new network is
// built.
package faulttest
