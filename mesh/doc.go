// Package mesh is lockmesh's public API: a node of a lock mesh that an
// application embeds in each of its replicas. The replicas find each other
// by gossip (hashicorp/memberlist), and grant leases — locks with a time
// limit — by majority vote of a fixed set of voters; every grant carries a
// fencing token. No lock server runs anywhere.
//
//	cfg := mesh.DefaultConfig()
//	cfg.Name = "api-1"
//	cfg.Voters = []string{"api-1", "api-2", "api-3"}
//	cfg.Seeds = []string{"10.0.0.2:7946"}
//	m, err := mesh.New(cfg)
//	...
//	l, err := m.Acquire(ctx, "invoices/2026-11") // blocks until held, or ctx ends
//	defer l.Release(ctx)
//	err = store.Write(l.Token(), data)           // the store refuses stale tokens
//	select { case <-l.Done(): /* lost: stop work */ }
//
// # What it promises
//
// Exclusion: for a key, the intervals during which holders may act (from the
// grant to the Deadline their Lease reports) never overlap in real time, as
// long as no node's clock rate errs by more than Config.Timing.Drift.
// Synchronised clocks are not needed.
//
// Fencing: each grant carries a token higher than every earlier grant's for
// the key; a renewal keeps it; no token is issued twice, even after every
// node restarted (tokens continue from the wall clock in microseconds, see
// package quorum). A resource that keeps the highest token it has seen and
// refuses lower ones (lease.Fence) is safe even when a holder was paused past
// its deadline without noticing.
//
// Lost notice: a holder whose renewal has not succeeded is told (Done closes,
// Err wraps ErrLeaseLost) before its deadline, never after another holder may
// have been granted.
//
// Liveness: with a majority of the voters up and connected, a free key is
// granted within a few round trips; a released key goes to the next waiter
// (in turn) within about a round trip of the release; a crashed holder's key
// is free again within its TTL and a round trip.
//
// Gossip cannot break safety: what memberlist believes about liveness never
// changes the voter configuration or the size of a majority. A partitioned
// minority grants nothing.
//
// # Voters
//
// The voters are an explicit configuration: founded by Config.Voters (the
// same list on every node) or by Config.BootstrapExpect voters that find each
// other at first start, and changed only by a decision of its own majority,
// one voter at a time: Mesh.AddVoter, Mesh.RemoveVoter, or the opt-in
// Config.Autopilot, which replaces voters that gossip has shown dead for a
// while. Mesh.Voters shows it. Every node learns the newest configuration
// from the others (answers, pushes and gossip); a node started without
// Voters learns it entirely. Nodes that are not voters take locks all the
// same. A voter that starts votes only after a quarantine of Config.MaxTTL
// (it may have restarted and forgotten leases it granted) and after catching
// up from the other voters; a node that a change has just added, in the very
// process that was added, votes at once.
//
// # Readiness
//
// A node is ready when it knows a voter configuration, its own vote (if it
// is a voter) counts — quarantine and catch-up over — and a majority of the
// voters is known live: each node probes every voter every four round
// timeouts, and a voter counts while its last answer, saying it votes, is
// at most three probe intervals old (gossip's "alive" is only a hint: a
// restarted voter is alive long before it votes). Mesh.Ready and
// Mesh.WaitReady wait for it; Status.Ready, Status.VotingState and
// Status.Waiting say where the node stands and what it waits for
// (quarantine left, voters that have not answered its catch-up, voters not
// known live, mismatches with other nodes); HTTPHandler serves /healthz,
// /readyz and /status for probes. Restart voters one at a time, each once
// the one before is ready again, and a majority keeps voting throughout.
//
// # Beyond a mutex
//
// The same leases make the rest, each with a fencing token, a deadline and
// a loss notice. A holder publishes a small value with WithValue (at most
// Config.MaxValueSize bytes) and changes it with Lease.SetValue; Holder,
// Watch, Locks and Leader report it. An election is the lock of its name:
// Campaign waits in turn and returns a Leadership, Leader reads who leads,
// Observe streams every change of leader, and RunElection runs
// OnStartedLeading under a ctx that ends before another node can lead.
// Watch streams a key's holders as the voters push each change (one push
// message per voter per watching node per change); Locks lists the locks
// held under a prefix. AcquireSemaphore takes one of n slots, each a lock
// of its own with its own token.
//
//	lead, err := m.Campaign(ctx, "scheduler", []byte(addr)) // on each candidate
//	run(lead.Context(), lead.Token())                       // ends before another leads
//	leaders, err := m.Observe(ctx, "scheduler")             // on any node
//	for l := range leaders { log.Print(l.Node, l.Value) }
//
// # Testing
//
// Package meshtest runs a mesh of several nodes inside a test and breaks it
// on demand (a lease lost now, a node cut off, crashed or restarted), so
// that an application's failover code can be tested against the real
// protocol. Config.Clock is the clock it moves to do so.
//
// # Errors
//
// Callers can tell apart: ErrLocked (a *LockedError names the holder;
// ErrAlreadyHeld when it is this node), ErrNoQuorum (too few voters
// answered: nothing is known to be held), ErrLeaseLost, ErrReleased,
// ErrClosed, ErrInvalidKey, ErrInvalidConfig, ErrNoVoters, ErrNotReady
// (WaitReady), and for voter changes ErrUnknownNode and ErrBadVoterChange;
// a *CancelledError when an acquire's ctx ends first (whether a grant may
// have happened, and was given back); ErrValueTooLarge, ErrNoLeader,
// ErrSemaphoreMismatch (a *SemaphoreError) and ErrUpgradeRequired (a node
// of an earlier protocol version is in the mesh).
//
// # Observability
//
// Config.Logger (an hclog.Logger, or a *slog.Logger through SlogLogger)
// receives the mesh's logs and memberlist's, WARN and ERROR only for what
// an operator must act on. Mesh.Collector exports the node's metrics to
// Prometheus, and Config.MetricSink receives them through go-metrics:
// acquire and renew durations, leases granted, renewed, held and lost,
// quorum failures, messages and bytes, refusals and limit hits by reason
// (docs/metrics.md lists them). Status returns a snapshot of members,
// voters and how this node's probes find each, its voting state,
// readiness and what it waits for, and leases.
package mesh
