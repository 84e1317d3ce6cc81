// Command lockmesh runs a lock mesh node and uses it from the shell:
//
//	go install github.com/lockmesh/lockmesh/cmd/lockmesh@latest
//
//	lockmesh agent -name a -voters a,b,c -seeds 10.0.0.2:7946   # on each machine
//	lockmesh lock -timeout 1m backups/nightly -- ./backup.sh     # anywhere an agent runs
//	lockmesh lock -n 3 transcode -- ./transcode.sh               # up to 3 at once, mesh-wide
//	lockmesh elect scheduler "$(hostname)"                       # stay leader until ^C
//	lockmesh elect -listen scheduler                             # print each new leader
//	lockmesh holder backups/nightly
//	lockmesh locks backups/
//	lockmesh status
//	lockmesh voters list | add NODE | remove NODE
//
// "lockmesh COMMAND -h" describes each command, its flags and its exit
// statuses. Every flag of agent can also be set by the environment:
// LOCKMESH_ and the flag's name in upper case, dashes as underscores
// (LOCKMESH_NAME, LOCKMESH_SEEDS, LOCKMESH_VOTERS, LOCKMESH_TLS_CERT,
// LOCKMESH_GOSSIP_KEY, LOCKMESH_DATA_DIR, LOCKMESH_HTTP, ...); a flag on the
// command line wins. The client commands read LOCKMESH_SOCKET.
//
// # lock goes through a local agent
//
// lock, elect and the other client commands do not join the mesh
// themselves: they ask the lockmesh agent on their machine, over a unix
// socket, as "consul lock" asks its local Consul agent (and unlike
// "etcdctl lock", a client of a server cluster: a lockmesh mesh has no
// servers to be a client of; joining it means becoming a member). The
// reasons:
//
//   - Credentials. With mutual TLS, a member's certificate must name it
//     (its DNS SAN is its node name), and every member needs the gossip
//     key. A lock process joining by itself would need a unique name per
//     run, a certificate for that name, and the gossip key in the
//     environment of every script. Through the agent, the machine's one
//     certificate and key stay with the agent, and access is the socket's
//     file permissions (0600 by default: the agent's user; -socket-mode
//     0660 adds its group).
//   - Churn and start-up. Every run that joined would be a new gossip member
//     that every node keeps for memberlist's dead-node window, and each run
//     would wait for the join and for the voter configuration to arrive
//     before it could ask for a lock. Through the agent, a lock costs one
//     local round trip plus the quorum's.
//   - Dying clients. The lease lives in the agent, tied to the client's
//     connection: when lock dies (even by SIGKILL) the kernel closes the
//     connection, and the agent releases the key at once, so the next
//     waiter runs within a round trip instead of a TTL.
//
// What it costs is one more process between the lease and CMD, so lock
// does not trust the agent to be timely. It asks the agent every TTL/10
// how long the lease has left, and keeps its own bound of the deadline,
// never later than the real one: the send time of the question plus the
// time left when the agent read it (durations only, both ends on one
// machine). lock stops CMD — SIGTERM to its process group, SIGKILL after
// -grace or earlier, at the latest a quarter of the notice margin before
// the bound — when the agent says the lease is lost, when the connection to
// the agent breaks (the agent died: lock cannot know the lease is kept),
// or when the agent has not moved the bound by the time it is within the
// notice margin (the agent is paused or starved: the mesh's own rule,
// applied to lock's bound). A paused or dead agent therefore cannot leave
// CMD running past the deadline, as long as lock itself is scheduled within
// that quarter of the notice margin. A machine paused as a whole cannot be
// helped by anyone: that is what LOCKMESH_TOKEN is for (see lease.Fence).
//
// # The agent's local API
//
// Newline-delimited JSON over the unix socket (api.go): the agent greets
// with the version it speaks, each request carries its version and an id,
// and each connection holds at most one lease or candidacy, released when
// the connection ends. It is small on purpose: acquire, lease (time left),
// release, holder, status, voters, add-voter, remove-voter, locks,
// campaign, resign, observe. Lines are bounded (64 KiB), and so are the
// connections (1024) and the requests in flight on each (16).
//
// # Exit statuses
//
//	0–255  lock: CMD's status (128+N if signal N killed it)
//	64     usage error (bad flags or arguments; lock -n that others of the
//	       key do not give)
//	65     not supported: an agent of an earlier release, or a node of the
//	       mesh still on an earlier protocol version (elect, locks, -n)
//	69     the agent could not be reached, or no majority of the voters answered
//	75     lock, elect: not acquired within -timeout (someone else held it)
//	76     lock: the lease was lost while CMD ran, and CMD was signalled;
//	       elect: leadership lost
//	1      a request the mesh refused (voters: unknown node, retired name, ...)
//	126    lock: CMD could not be run;  127: CMD not found
//	128+N  lock: signal N arrived before CMD started
//
// # Elections, semaphores, listing
//
// elect campaigns through the agent (mesh.Mesh.Campaign: a lease on the
// election's name, carrying VALUE), and elect -listen prints the leaders
// the voters push to the agent (mesh.Mesh.Observe). lock -n N takes a slot
// of a counting semaphore (mesh.Mesh.AcquireSemaphore). locks lists what a
// majority of the voters holds (mesh.Mesh.Locks). The agent's side of each
// is written against the interfaces electionAPI and locksAPI (elect.go),
// which meshapi.go implements on package mesh and tests fake.
package main
