package quorum

import "time"

// OpKind says what a ballot operation asks of an acceptor.
type OpKind uint8

const (
	// OpPrepare asks the acceptor to promise Ballot and to report what it
	// has accepted for the key.
	OpPrepare OpKind = 1
	// OpAccept asks the acceptor to accept Value at Ballot and, when Next is
	// set, to promise Next at the same moment (the 1-RTT fast path).
	OpAccept OpKind = 2
	// OpPeek asks what the acceptor holds for the key, promising nothing.
	// A read whose peek finds a majority agreeing on one accepted ballot is
	// done without disturbing anyone's ballots.
	OpPeek OpKind = 3
	// OpUnwatch takes the sender out of the key's line of waiters at the
	// acceptor: its waiting acquire ended, or it was told of a free key it
	// no longer wants. It carries no ballot and changes no register.
	OpUnwatch OpKind = 4
	// OpForget drops the key's register if it still holds the free value
	// accepted at Ballot: every voter was seen to hold just that (see
	// acceptor_registers.go).
	OpForget OpKind = 5
)

func (k OpKind) String() string {
	switch k {
	case OpPrepare:
		return "prepare"
	case OpAccept:
		return "accept"
	case OpPeek:
		return "peek"
	case OpUnwatch:
		return "unwatch"
	case OpForget:
		return "forget"
	}
	return "op?"
}

// Op is one ballot operation on one key. A Request carries many.
type Op struct {
	// ID is chosen by the proposer and echoed in the Result.
	ID   uint64 `codec:"id"`
	Kind OpKind `codec:"k"`
	Key  string `codec:"key"`
	// Ballot is the ballot of the prepare or accept.
	Ballot Ballot `codec:"b"`
	// Inc, on an accept, is the acceptor incarnation the proposer heard from.
	// An acceptor that restarted since refuses the accept: its promises died
	// with its memory.
	Inc uint64 `codec:"inc,omitempty"`
	// Value is the value to accept.
	Value Value `codec:"v,omitempty"`
	// Next, on an accept, is the ballot the acceptor promises as it accepts.
	Next Ballot `codec:"nb,omitempty"`
	// Watch, on a prepare, marks a waiting acquire: the acceptor puts the
	// sender in the key's line of waiters, and sends it a Notify when its
	// turn comes (the key is freed with it first in line).
	Watch bool `codec:"w,omitempty"`
	// IfFree, on a prepare, asks the acceptor not to promise while a live
	// lease of another holder runs here: an acquire that will only find the
	// key locked should not cost the holder its promised ballot (and so its
	// one-round-trip renewals and release).
	IfFree bool `codec:"if,omitempty"`
	// Migrate, on an accept, marks the write-back that carries a key into
	// a new voter configuration: the acceptor times the grant for at least
	// the value's TTL, which the mover set to what is left of the lease
	// (design.md R63), so that a lease granted under the old configuration
	// stays protected by a majority of the new one.
	Migrate bool `codec:"mg,omitempty"`
	// Observe, on a peek, asks the voter to push the key's changes to the
	// sender (Notify.Changes) for this long: a change of holder, token,
	// value or freedom, and the end of the lease's timer there. A later
	// peek with Observe extends it, or with a moment ends it (see
	// observe_voter.go).
	Observe time.Duration `codec:"ob,omitempty"`
}

// Request is a batch of operations from one proposer to one acceptor. A
// proposer sends at most one per acceptor per step, whatever the number of
// keys, so renewing ten thousand leases costs one message per voter.
type Request struct {
	Config uint64 `codec:"cfg"`
	From   NodeID `codec:"f"`
	To     NodeID `codec:"to"`
	Ops    []Op   `codec:"ops"`
	// NoData, set by the driver, says that the sender's protocol cannot
	// carry Value.Data: what it writes says nothing of data it never saw
	// (see Node.refuseDataLoss). It does not travel.
	NoData bool `codec:"-"`
}

// Status is an acceptor's verdict on a whole message.
type Status uint8

const (
	// StatusOK: the operations were handled; see each Result.
	StatusOK Status = 0
	// StatusWrongConfig: the message was of another voter configuration;
	// Response.Config is the acceptor's.
	StatusWrongConfig Status = 1
	// StatusRecovering: the acceptor restarted without its state and is in
	// quarantine or catching up; it votes on nothing yet.
	StatusRecovering Status = 2
	// StatusNotVoter: the addressee is not a voter of the configuration.
	StatusNotVoter Status = 3
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusWrongConfig:
		return "wrong configuration"
	case StatusRecovering:
		return "recovering"
	case StatusNotVoter:
		return "not a voter"
	}
	return "status?"
}

// Reason says why an acceptor refused one operation.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonPromised: a higher ballot was promised; Result.Promised names it.
	ReasonPromised
	// ReasonIncarnation: the accept was addressed to an earlier incarnation.
	ReasonIncarnation
	// ReasonInvalid: the operation itself was malformed.
	ReasonInvalid
	// ReasonHeld: an IfFree prepare found a live lease of another holder;
	// nothing was promised.
	ReasonHeld
	// ReasonHandoff: a new grant was refused because the key was just
	// handed to the next waiter in line.
	ReasonHandoff
	// ReasonNoVote: the acceptor votes on nothing now (see Status).
	ReasonNoVote
	// ReasonNoDisk: a voter change was refused because the acceptor keeps
	// no durable state: it could forget the configuration it accepted.
	ReasonNoDisk
)

// Response answers a Request, operation by operation.
type Response struct {
	Config uint64 `codec:"cfg"`
	From   NodeID `codec:"f"`
	// To is the request's sender. It does not travel: a response goes
	// back on the request's call.
	To      NodeID   `codec:"-"`
	Inc     uint64   `codec:"inc"`
	Status  Status   `codec:"s,omitempty"`
	Results []Result `codec:"r"`
	// Members is the acceptor's configuration, when it is not the
	// request's (StatusWrongConfig, StatusNotVoter): a proposer behind
	// adopts it, one ahead pushes its own (ConfigPush).
	Members *Membership `codec:"m,omitempty"`
	// Lives, with a promise, are the lives of voters this acceptor heard
	// from before it first promised anything, and so may have told that
	// it never voted: each may have gone live on a new disk without the
	// promises of its earlier lives, which then count for nothing
	// (design.md R55).
	Lives []Life `codec:"lv,omitempty"`
}

// Life is one life of a node: its name and incarnation.
type Life struct {
	Node NodeID `codec:"n"`
	Inc  uint64 `codec:"i"`
}

// NoAcceptorResponse answers a request on behalf of a node that has no
// acceptor (it is not a voter, or has not yet learned that it is one),
// telling the sender the configuration the node knows of.
func NoAcceptorResponse(m Membership, id NodeID, inc uint64, req *Request) *Response {
	resp := &Response{Config: m.ID, From: id, Inc: inc, Status: StatusWrongConfig}
	if req.Config == m.ID {
		resp.Status = StatusNotVoter
	}
	c := m.clone()
	resp.Members = &c
	return resp
}

// NoAcceptorCatchUp answers a catch-up or key listing on behalf of a node
// that has no acceptor, like NoAcceptorResponse.
func NoAcceptorCatchUp(m Membership, id NodeID, inc uint64, req *CatchUpRequest) *CatchUpResponse {
	resp := &CatchUpResponse{Config: m.ID, From: id, To: req.From, Inc: inc, Bucket: req.Bucket,
		List: req.List, Status: StatusWrongConfig}
	if req.Config == m.ID {
		resp.Status = StatusNotVoter
	}
	c := m.clone()
	resp.Members = &c
	return resp
}

// ConfigPush brings an acceptor that missed a configuration change up to
// date. It adopts the configuration only if it is of its cluster and newer.
type ConfigPush struct {
	From    NodeID     `codec:"f"`
	To      NodeID     `codec:"to"`
	Members Membership `codec:"m"`
}

// Result answers one Op.
type Result struct {
	ID     uint64 `codec:"id"`
	OK     bool   `codec:"ok,omitempty"`
	Reason Reason `codec:"why,omitempty"`
	// Promised is the acceptor's promise after the operation.
	Promised Ballot `codec:"p,omitempty"`
	// Accepted and Value are what the acceptor holds (prepare only).
	Accepted Ballot `codec:"a,omitempty"`
	Value    Value  `codec:"v,omitempty"`
	// Remaining is how long the acceptor's exclusion timer for Value still
	// runs on its own clock; zero when the lease is not live there.
	Remaining time.Duration `codec:"rem,omitempty"`
	// MaxEpoch is the highest epoch the acceptor knows for the key.
	MaxEpoch uint64 `codec:"me,omitempty"`
	// Copy: the acceptor holds Value at Accepted because it copied it in
	// a catch-up, not because it accepted it in a round. A copy ranks as
	// its ballot does (it may stand for a vote this acceptor cast and
	// forgot), but is no vote: replies that agree on a ballot show a
	// chosen value only if none of them is a copy.
	Copy bool `codec:"cp,omitempty"`
}

// Notify tells a proposer that keys it watches are no longer held by a live
// lease at this acceptor. It is a hint that wakes waiters; it grants nothing.
type Notify struct {
	Config uint64   `codec:"cfg"`
	From   NodeID   `codec:"f"`
	To     NodeID   `codec:"to"`
	Keys   []string `codec:"k"`
	// Promised holds, for each key, the ballot counter the acceptor had
	// promised (the releaser's next ballot, usually): a waiter that goes
	// above it wins its first round.
	Promised []uint64 `codec:"p,omitempty"`
	// Changes are what the voter holds now for keys the addressee
	// observes (Op.Observe): hints, like Keys, that an observer confirms
	// by agreement of a majority (proposer_observe.go).
	Changes []Change `codec:"ch,omitempty"`
}

// Change is a voter's report of one key to a node observing it: the
// register's accepted ballot and value, and how long the lease's timer
// still runs there (zero: none runs).
type Change struct {
	Key       string        `codec:"k"`
	Accepted  Ballot        `codec:"a,omitempty"`
	Value     Value         `codec:"v,omitempty"`
	Remaining time.Duration `codec:"rem,omitempty"`
	Copy      bool          `codec:"cp,omitempty"` // as Result.Copy
}

// CatchUpRequest asks a voter for its registers in one bucket of the key
// space. An acceptor that restarted without state sends these after its
// quarantine.
type CatchUpRequest struct {
	Config  uint64 `codec:"cfg"`
	From    NodeID `codec:"f"`
	To      NodeID `codec:"to"`
	Bucket  uint32 `codec:"b"`
	Buckets uint32 `codec:"n"`
	// List asks only for the keys that have an accepted value (a proposer
	// moving every key into a new configuration), not the registers.
	List bool `codec:"l,omitempty"`
	// Holders, with List, asks for the held keys that start with Prefix,
	// each with its accepted ballot, value and time left (a listing of
	// the locks held: Node.ListHolders answers it).
	Holders bool   `codec:"hd,omitempty"`
	Prefix  string `codec:"px,omitempty"`
	// Inc is the asking acceptor's incarnation (see
	// CatchUpResponse.LostWith).
	Inc uint64 `codec:"inc,omitempty"`
	// Quiet are the asker's earlier incarnations, from its disk, since
	// its last life that voted (Durable.Quiet): a voter that went live
	// counting one of them as restarted with it answers LostWith to this
	// life too. An older responder skips the field and answers as before.
	Quiet []uint64 `codec:"qt,omitempty"`
}

// CatchUpResponse carries one bucket of a voter's registers.
type CatchUpResponse struct {
	Config  uint64  `codec:"cfg"`
	From    NodeID  `codec:"f"`
	To      NodeID  `codec:"to"`
	Inc     uint64  `codec:"inc"`
	Status  Status  `codec:"s,omitempty"`
	Bucket  uint32  `codec:"b"`
	Entries []Entry `codec:"e"`
	List    bool    `codec:"l,omitempty"`
	// Members is the responder's configuration when it is not the
	// request's (StatusWrongConfig).
	Members *Membership `codec:"m,omitempty"`
	// Horizon is the longest lease the responder may be protecting, or
	// knows another voter may be: its MaxTTL, or longer if it learned of
	// longer leases when it last caught up. A recovering acceptor stays out
	// of the vote until the longest horizon it hears of has passed since
	// its start, whatever its own, perhaps lowered, MaxTTL says.
	Horizon time.Duration `codec:"h,omitempty"`
	// PromiseFloor and EpochFloor stand for the registers the responder
	// dropped (see acceptor_registers.go): the recovering acceptor, or the
	// proposer moving keys into new voters, takes them over.
	PromiseFloor Ballot `codec:"pf,omitempty"`
	EpochFloor   uint64 `codec:"ef,omitempty"`
	// What a voter that keeps its state on disk (Durable) says of itself.
	// Durable: recovering, it knows its earlier life from its disk (one
	// it restarted from, not a new one), and EpochFloor is its epoch mark
	// (at least every epoch it accepted).
	// Fresh: it has a disk and has never voted. NewerConfig is the version
	// of a configuration it accepted and has not adopted (0: none).
	Durable     bool   `codec:"d,omitempty"`
	Fresh       bool   `codec:"fr,omitempty"`
	NewerConfig uint64 `codec:"nc,omitempty"`
	// NewerBallot and NewerMembers are, with NewerConfig, the ballot at
	// which the responder accepted that configuration and the
	// configuration itself. A recovering voter that sees majorities of
	// its voters (and of those before a pending change) accept it at one
	// ballot knows it was chosen, and adopts it: its proposer may have
	// stopped before telling anyone, and the change cannot be finished by
	// voters that wait to catch up in the configuration it replaced.
	NewerBallot  *Ballot     `codec:"nb,omitempty"`
	NewerMembers *Membership `codec:"nm,omitempty"`
	// LostWith: the responder restarted (from its disk, or concluding a
	// full restart) and went live on the word of voters that had lost
	// their registers too, the asker (in this incarnation) among them. It
	// holds nothing from before the asker's restart, so the asker may count
	// it as restarted with it.
	LostWith bool `codec:"lw,omitempty"`
	// Forgot: the responder is recovering without the state of its
	// earlier lives (it has no disk, or a new one that replaced one it
	// voted on): NewerConfig speaks for this life only, and it may have
	// accepted a newer configuration before. The asker counts it as a
	// voter it has not heard from.
	Forgot bool `codec:"fg,omitempty"`
}

// Entry is one register as a catch-up carries it.
type Entry struct {
	Key      string `codec:"k"`
	Promise  Ballot `codec:"p,omitempty"`
	Accepted Ballot `codec:"a,omitempty"`
	Value    Value  `codec:"v,omitempty"`
	MaxEpoch uint64 `codec:"me,omitempty"`
	// Remaining is how long the responder's exclusion timer for Value
	// still runs, on its own clock (zero: none runs). The recovering
	// acceptor times the grant itself for as long, stretched for the
	// worst clock-rate difference.
	Remaining time.Duration `codec:"rem,omitempty"`
	// Copy, in a listing's answer (Node.ListHolders), is Result.Copy:
	// the responder holds Value at Accepted because it copied it in a
	// catch-up, and the entry is no vote (MergeListing). A catch-up does
	// not set it: what a recovering acceptor merges is a copy there
	// whatever it was at the responder. An older responder never sets it
	// (its copies then count as votes, as they did).
	Copy bool `codec:"cp,omitempty"`
}
