// Package control is the line protocol between the fault suite (package
// faulttest) and the node processes it starts (cmd/faultnode): one JSON
// object per line, requests on the node's stdin, replies and events on its
// stdout. Times are nanoseconds of the machine's monotonic clock (Now), the
// same in every process of the machine, so the suite can compare a node's
// grant and deadline with its own observations and with other nodes'.
package control

// Operations a node serves (Request.Op).
const (
	OpAcquire = "acquire" // wait for Key up to TimeoutMS
	OpTry     = "try"     // take Key only if free now
	OpRelease = "release" // release this process's lease on Key
	OpHolder  = "holder"  // ask a majority who holds Key
	OpWrite   = "write"   // write to the fenced resource under this process's lease on Key
	OpStatus  = "status"  // the node's view: voting state, members, leases
	OpJoin    = "join"    // join Seeds
	OpLeave   = "leave"   // release every lease, leave the mesh, exit 0

	// Voter changes, run through the node (Mesh.AddVoter, RemoveVoter,
	// Voters); a change waits up to TimeoutMS.
	OpAddVoter    = "add_voter"    // make Node a voter
	OpRemoveVoter = "remove_voter" // remove Node from the voters
	OpVoters      = "voters"       // the voter configuration the node knows: Config

	// The proxy (faultnode proxy) serves these.
	OpShape = "shape" // set DelayMS, JitterMS, Loss
	OpStats = "stats" // what it forwarded, dropped and delayed
)

// Error codes (Reply.Err).
const (
	ErrLocked      = "locked"       // Holder and Token name the holder
	ErrNoQuorum    = "no_quorum"    // too few voters answered
	ErrTimeout     = "timeout"      // TimeoutMS passed first
	ErrClosed      = "closed"       // the mesh is shutting down
	ErrNoVoters    = "no_voters"    // no voter configuration yet
	ErrNotHeld     = "not_held"     // release or write without a lease on Key
	ErrBusy        = "busy"         // this process already holds (or is taking) Key
	ErrInvalid     = "invalid"      // a malformed or unknown request
	ErrUnknownNode = "unknown_node" // add_voter: Node is not alive in the node's gossip
	ErrBadChange   = "bad_change"   // a voter change the mesh does not allow
	ErrOther       = "error"        // anything else; Msg says what
)

// Events (Reply.Event, with ID 0).
const (
	EventStarted = "started" // the node listens: Addr, RPC, Pid
	EventEnded   = "ended"   // a lease ended: Key, Token, Reason, Deadline, At
)

// Reasons a lease ended (Reply.Reason of EventEnded).
const (
	EndReleased = "released"
	EndLost     = "lost"
	EndClosed   = "closed"
)

// Request is one line written to a node's stdin.
type Request struct {
	ID        uint64   `json:"id"`
	Op        string   `json:"op"`
	Key       string   `json:"key,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	Seeds     []string `json:"seeds,omitempty"`
	// Node is the node a voter change is about.
	Node string `json:"node,omitempty"`
	// Stale makes a write use the last token this process held for Key
	// even if that lease has ended: the write a process had already
	// decided on when it was paused.
	Stale bool `json:"stale,omitempty"`

	// Shape (proxy): one-way delay and jitter added to every packet and
	// stream chunk, and the loss rate (UDP packets dropped; a "lost" TCP
	// chunk waits out a retransmission timeout instead).
	DelayMS  int64   `json:"delay_ms,omitempty"`
	JitterMS int64   `json:"jitter_ms,omitempty"`
	Loss     float64 `json:"loss,omitempty"`
}

// Reply is one line a node writes to stdout: the answer to the request
// with the same ID, or, with ID 0, an event.
type Reply struct {
	ID    uint64 `json:"id,omitempty"`
	Event string `json:"event,omitempty"`
	Err   string `json:"err,omitempty"`
	Msg   string `json:"msg,omitempty"`

	Key    string `json:"key,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	Holder string `json:"holder,omitempty"`
	Held   bool   `json:"held,omitempty"`
	// At is when it happened on the node: the grant (acquire, try), the
	// release, the write, the end of a lease.
	At int64 `json:"at,omitempty"`
	// Deadline is until when the holder may act: at a grant, and, for an
	// ended lease, its last deadline (the release moment when released).
	Deadline int64 `json:"deadline,omitempty"`
	// Released and Before are, for a lease this process released, when it
	// called Release and the deadline the lease had just before: the
	// holder acted until the earlier of the two, whatever Deadline says
	// after the release.
	Released int64  `json:"released,omitempty"`
	Before   int64  `json:"before,omitempty"`
	Reason   string `json:"reason,omitempty"`

	Status *Status        `json:"status,omitempty"`
	Stats  *Stats         `json:"stats,omitempty"`
	Config *Configuration `json:"config,omitempty"`

	Addr string `json:"addr,omitempty"`
	RPC  string `json:"rpc,omitempty"`
	Pid  int    `json:"pid,omitempty"`
}

// Status is a node's view of the mesh.
type Status struct {
	// Voting is "" (not a voter), "quarantined", "catching up", "live",
	// "silenced" or "disk-failed" (the last two from this release on).
	Voting string `json:"voting"`
	// Members maps every node gossip knows to "alive", "dead" or "left".
	Members map[string]string `json:"members"`
	Voters  []string          `json:"voters"`
	Leases  int               `json:"leases"`
}

// Configuration is a voter configuration as a node knows it (the node's
// Mesh.Voters).
type Configuration struct {
	ID      uint64   `json:"id"`
	Version uint64   `json:"version"`
	Voters  []string `json:"voters"`
	// Pending: a change is being settled; Previous are the voters before
	// it.
	Pending  bool     `json:"pending,omitempty"`
	Previous []string `json:"previous,omitempty"`
	Retired  []string `json:"retired,omitempty"`
}

// Stats counts what the proxy did.
type Stats struct {
	UDPForwarded int64 `json:"udp_forwarded"`
	UDPDropped   int64 `json:"udp_dropped"`
	TCPConns     int64 `json:"tcp_conns"`
	TCPChunks    int64 `json:"tcp_chunks"`
	TCPStalled   int64 `json:"tcp_stalled"` // chunks held back a retransmission timeout
}
