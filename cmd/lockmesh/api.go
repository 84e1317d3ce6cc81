package main

import (
	"github.com/lockmesh/lockmesh/mesh"
)

// The agent's local API: newline-delimited JSON over a unix socket.
//
// On accept the agent writes a hello line ({"event":"hello","v":1,...});
// a client that does not speak that version hangs up. Every request line
// carries "v" (the version the client speaks) and an "id"; the answer
// carries the same id. Lines with id 0 are events the agent pushes: "lost"
// (the lease of this connection ended without a release) and "leader" (an
// observed election changed hands). Requests run concurrently; answers may
// come out of order.
//
// A connection holds at most one lease (or one candidacy). When the
// connection ends, for whatever reason, the agent releases it: the lease
// lives exactly as long as the client's connection. Durations travel as
// integer nanoseconds, never as timestamps: "remaining_ns" is the time the
// lease had left when the agent read it, which lies after the client sent
// its request, so request time + remaining_ns is never later than the
// lease's deadline.
//
// Version 1 is the first. A change that an old peer would misread gets a
// new version, and the agent refuses versions it does not speak with error
// code "version" (naming the versions it does).
const apiVersion = 1

// maxLine bounds one request line; a longer one ends the connection.
const maxLine = 64 << 10

// The operations.
const (
	opAcquire     = "acquire"      // key, ttl_ns, timeout_ns, n → key (a semaphore's slot when n > 1), token, remaining_ns, ttl_ns, notice_ns
	opLease       = "lease"        // → token, remaining_ns (the connection's lease)
	opRelease     = "release"      // → {} (the connection's lease)
	opHolder      = "holder"       // key, timeout_ns → holder
	opStatus      = "status"       // → status
	opVoters      = "voters"       // → config
	opAddVoter    = "add-voter"    // name, timeout_ns → config
	opRemoveVoter = "remove-voter" // name, timeout_ns → config
	opLocks       = "locks"        // key (a prefix), timeout_ns → locks
	opCampaign    = "campaign"     // name, value, ttl_ns, timeout_ns → leader (this node)
	opResign      = "resign"       // → {} (the connection's candidacy)
	opObserve     = "observe"      // name → {} then "leader" events
	opHeartbeat   = "heartbeat"    // → {} (any request is one: see below)
)

// A connection that holds a lease or a candidacy must send a request at
// least once per heartbeat window (the request's heartbeat_ns, or the
// lease's TTL): otherwise the agent releases it and sends "lost". Any
// request counts; "heartbeat" is one that does nothing else.

// request is one line from a client.
type request struct {
	V       int    `json:"v"`
	ID      uint64 `json:"id"`
	Op      string `json:"op"`
	Key     string `json:"key,omitempty"`        // acquire, holder; locks: the prefix
	Name    string `json:"name,omitempty"`       // add-voter, remove-voter: a node; campaign, observe: an election
	Value   string `json:"value,omitempty"`      // campaign
	TTL     int64  `json:"ttl_ns,omitempty"`     // acquire, campaign: 0 is the agent's default
	Timeout int64  `json:"timeout_ns,omitempty"` // 0: acquire and campaign wait for ever, others use the agent's default
	N       int    `json:"n,omitempty"`          // acquire: holders at once; 0 and 1 mean a mutex
	// Heartbeat: acquire, campaign: the window within which the client
	// sends its next request, or loses the lease (0: the lease's TTL).
	Heartbeat int64 `json:"heartbeat_ns,omitempty"`
}

// reply is one line from the agent: an answer (ID set) or an event.
type reply struct {
	ID    uint64    `json:"id,omitempty"`
	Event string    `json:"event,omitempty"` // hello, lost, leader
	Error *apiError `json:"error,omitempty"`

	V        int   `json:"v,omitempty"`        // hello: the version the agent speaks
	Versions []int `json:"versions,omitempty"` // hello, error "version": every version it speaks

	Node      string `json:"node,omitempty"` // hello: the agent's node name
	Key       string `json:"key,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Remaining int64  `json:"remaining_ns,omitempty"` // acquire, lease
	TTL       int64  `json:"ttl_ns,omitempty"`       // acquire, campaign: the lease's TTL
	Notice    int64  `json:"notice_ns,omitempty"`    // acquire: how long before its deadline a failing lease is reported lost
	Message   string `json:"message,omitempty"`      // lost: why

	Holder *mesh.Holder        `json:"holder,omitempty"`
	Status *mesh.Status        `json:"status,omitempty"`
	Config *mesh.Configuration `json:"config,omitempty"`
	Locks  []mesh.Holder       `json:"locks,omitempty"`
	Leader *leaderInfo         `json:"leader,omitempty"`
}

// apiError is a failed request. Code is one of the codes below.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Holder  string `json:"holder,omitempty"` // timeout, locked: who held the key
	Token   uint64 `json:"token,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

// Error codes.
const (
	codeUsage       = "usage"            // a malformed or out-of-place request
	codeVersion     = "version"          // a protocol version the agent does not speak
	codeUnsupported = "unsupported"      // an operation this agent, or its mesh, cannot do (yet: an upgrade in progress)
	codeBusy        = "busy"             // too many requests in flight on the connection
	codeInvalidKey  = "invalid_key"      // empty, too long, not UTF-8
	codeInvalidOpt  = "invalid_option"   // a TTL out of range
	codeTimeout     = "timeout"          // the wait ended while the key (election) was held
	codeNoQuorum    = "no_quorum"        // no majority of the voters answered
	codeNoVoters    = "no_voters"        // the voter configuration has not formed yet
	codeClosed      = "closed"           // the agent is shutting down
	codeNotHeld     = "not_held"         // lease, release, resign without one
	codeLost        = "lost"             // lease: it ended without a release
	codeUnknownNode = "unknown_node"     // add-voter of a node gossip does not show
	codeBadChange   = "bad_voter_change" // a voter change that is not allowed
	codeError       = "error"            // anything else
)
