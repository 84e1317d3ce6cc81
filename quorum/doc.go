// Package quorum is the ballot protocol of lockmesh, as pure state machines:
// no goroutines, no sockets, no clock reads, no global randomness. Time
// comes from a Clock the caller passes in, randomness from a seeded
// *rand.Rand, messages through method calls, and everything the machines
// want done comes back from Ready. Package mesh drives them over a network;
// the simulator in this package's tests drives hundreds of them on virtual
// time.
//
// # Driving it
//
// A Node is one node of the mesh: its proposer, its acceptor while it is a
// voter, and the rules between the two (one configuration for both, when
// an acceptor may start empty, the answers of a node that does not vote,
// what the node sends itself). Like etcd's RawNode it is driven from
// outside, one goroutine at a time:
//
//	n, _ := quorum.NewNode(quorum.NodeConfig{ID: "a", Membership: voters, ...})
//
//	id, _ := n.Acquire("invoices/2026-11", quorum.AcquireOptions{...})
//	for {
//		rd := n.Ready()
//		for _, msg := range rd.Messages { send(msg) } // to msg.To; a reply carries its request's Ref
//		for _, res := range rd.Results { ... }        // Granted, Locked, ...
//		for _, ev := range rd.Leases { ... }          // renewed, lost
//		n.Advance(rd)                                  // all of rd is the node's again
//		// on any message from another node: n.Step(msg)
//		// at NextTick:                       n.Tick()
//	}
//
// Package mesh drives Nodes over the network; the simulator in this
// package's tests drives the same Nodes on virtual time. The Proposer and
// the Acceptor are the Node's halves, with APIs of their own for unit
// tests.
//
// # The protocol
//
// Each key is an independent register replicated on the voters: single-decree
// Paxos with a change function (CASPaxos). The register holds who holds the
// key (node and incarnation), the fencing token (Epoch) and the lease's TTL.
// Acquire, renew, release and read are rounds of prepare and accept; replies
// are counted by distinct voter of the one configuration whose ID travels on
// every message (Membership); a majority of that configuration decides, and
// nothing gossip believes changes its size. The configuration itself is a
// register (ConfigKey) that its majority changes, one voter at a time, moving
// every key into the new voters before the next change (see
// Proposer.ChangeVoters and proposer_reconfig.go).
//
// Leases follow PaxosLease. The proposer reads its monotonic clock (t0)
// before it sends anything of the round that writes a grant or a renewal;
// the holder's deadline is t0 + HolderTTL. Each acceptor that accepts such a
// write runs an exclusion timer of TTL on its own clock, and reports it as
// Remaining to every later prepare. An acquire writes only when no acceptor
// of its majority reports a live lease. With clock rates within ±ρ of real
// time, HolderTTL ≤ γ·TTL (γ = (1−ρ)/(1+ρ)) makes every acceptor's timer
// outlast the holder's deadline, so no two holders' intervals overlap. The
// proposer reports a lease lost Notice before its deadline when renewal has
// not succeeded. Renewals of all of a node's leases share one message per
// voter.
//
// A round whose accepts reached a majority promises the proposer's next
// ballot at the same time (Op.Next): the next operation of the node that
// touched a key last, usually its renewal or release, goes straight to accept
// and takes one round trip.
//
// Epochs are the fencing tokens: each grant takes one above every epoch a
// majority knows of and at least the wall clock in microseconds. The floor
// keeps tokens increasing after the voters of a majority lost their state
// together (every node restarted at once) and registers were lost. Exactly:
// a token issued after the loss by node B at real time t2 exceeds one issued
// before it by node A at real time t1 if B's wall clock at t2 reads later
// than A's did at t1; t2−t1 is at least the outage plus a quarantine (at
// least MaxTTL), so wall clocks that never differ by that much, and are
// never stepped back by that much, are enough. While a majority keeps its
// state, or when voters keep a Disk, tokens do not depend on wall clocks.
//
// # Restarts
//
// An acceptor may keep a little on a Disk (durable.go): whether it voted,
// its configuration and configuration register, and marks above every
// epoch and ballot it saw. One whose disk says it never voted votes at
// once; one whose disk is new asks the others, and votes at once if those
// that never voted meet every majority (a new mesh; its own empty disk is
// no evidence, since a wiped one looks the same), or, with the operator's
// word that the mesh is new (NodeConfig.NewMesh), if a majority with it
// never voted. One that voted restarts as below, but
// on the newest configuration it adopted, and when a majority of its
// configuration restarted from disks together, it goes live on theirs: its
// marks, not the wall clock, keep tokens and ballots above the earlier
// ones. A voter change needs every voter it asks to keep a Disk
// (ReasonNoDisk), so that no configuration that was replaced comes back by
// restarts: a voter that accepted a configuration says so in its catch-up
// answers until it adopts it, and a restarted acceptor does not vote in an
// older one while the voters that said so and those it has not heard from
// could make a majority (it adopts a configuration only when a majority's
// own votes show it chosen; copies a catch-up merged are no votes).
//
// Without a disk, state lives in memory. An acceptor always starts as if it
// had lost it:
// it votes on nothing for Quarantine (at least the longest lease it may have
// accepted, so every such lease has ended), then catches up: it learns, for
// every key, the highest promise, the value of the highest accepted ballot
// and the highest epoch from a majority of the configuration other than
// itself, which meets every accept majority of its earlier life. Accepts
// carry the incarnation of the acceptor whose promise they rely on, so an
// acceptor that restarted refuses accepts meant for its earlier life. When
// so many voters restarted together that no such majority exists, the state
// of a majority is gone for good: the acceptor goes live on what it could
// learn (FloorOnly), and tokens rest on the wall-clock floor.
//
// The longest lease it may have accepted is not always this life's MaxTTL:
// a rolling restart may have lowered it. A restarted acceptor waits out the
// longest lease horizon it hears of while quarantined: from the other
// voters (CatchUpResponse.Horizon: their MaxTTL, or a longer lease they
// heard of), and from the accepts it refuses meanwhile, which carry the
// holders' TTLs. A live voter that refuses an accept longer than its MaxTTL
// keeps that TTL as its horizon for the others. A node's mesh may also say
// that a running node holds such a lease (Node.SetPeerTTL, from gossip).
// If a majority of voters lose their state together while a lease longer
// than their new MaxTTL runs, and none of these reach them, that lease can
// be cut to the new MaxTTL; a disk keeps the horizon (Durable.Horizon).
//
// # Waiting
//
// An acquire with Wait parks when the key is held, and each acceptor with a
// live lease remembers it as a watcher. When a key is freed (released, or the
// lease expired) an acceptor tells the first watcher in line, and keeps the
// key for it for a short grace (HandoffGrace): waiters are served in turn and
// do not all rush at a freed key. A waiter also retries when the lease it saw
// should have ended, in case every notification was lost. Acquires that find
// a key held promise nothing (Op.IfFree), so the holder's one-round-trip
// renewals and release are not disturbed by contenders. Nor is a release
// that a write-back of the grant overtook (the key free at some voters, the
// grant written again above it at others): only the holder's next round can
// free the key, and an acquire that sees this waits for it as behind a
// lease, rather than outbid it at the voters where the key looks free.
//
// # Unknown outcomes
//
// An operation whose accepts may or may not have been chosen (a timeout
// after some accepts) never reports what it does not know: it reads the key
// again (a new prepare) before it says anything, keeps its own grant if that
// is what it finds, and frees grants to this node that no lease stands for
// in the background. OpResult.Attempted lists every epoch an operation
// proposed, so a history checker can account for writes whose outcome its
// caller never learned.
package quorum
