package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// event is one thing to report. With -json it is printed as one JSON object
// per line; otherwise as a line (or a few) of text.
//
// Events: started, ready, acquired, released, lost, holder, status, error,
// left, quit, help, info.
type event struct {
	Event    string       `json:"event"`
	Time     string       `json:"time"`
	Node     string       `json:"node"`
	Key      string       `json:"key,omitempty"`
	Token    uint64       `json:"token,omitempty"`
	Deadline string       `json:"deadline,omitempty"` // RFC 3339, this machine's clock
	Held     *bool        `json:"held,omitempty"`     // holder
	Holder   string       `json:"holder,omitempty"`   // holder; error "locked"
	Op       string       `json:"op,omitempty"`       // error: the command that failed
	Code     string       `json:"code,omitempty"`     // error: see errorCode
	Message  string       `json:"message,omitempty"`  // error, lost, info, help
	Addr     string       `json:"addr,omitempty"`     // started: gossip address
	RPC      string       `json:"rpc,omitempty"`      // started: ballot address
	Voters   []string     `json:"voters,omitempty"`   // started, ready
	Expect   int          `json:"bootstrap_expect,omitempty"`
	TTL      string       `json:"ttl,omitempty"`
	Status   *mesh.Status `json:"status,omitempty"`
	Version  uint64       `json:"version,omitempty"` // voters
	Pending  bool         `json:"pending,omitempty"` // voters
	Retired  []string     `json:"retired,omitempty"` // voters
}

// printer writes events to stdout, one at a time.
type printer struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	node string
}

func newPrinter(w io.Writer, json bool, node string) *printer {
	return &printer{w: w, json: json, node: node}
}

func (p *printer) emit(e event) {
	e.Node = p.node
	e.Time = time.Now().Format(time.RFC3339Nano)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		b, err := json.Marshal(e)
		if err != nil {
			b, _ = json.Marshal(event{Event: "error", Node: p.node, Time: e.Time, Code: "internal", Message: err.Error()})
		}
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	fmt.Fprintln(p.w, text(e))
}

// error reports a failed operation op.
func (p *printer) error(op string, err error) { p.errorOn(op, "", err) }

// errorOn reports a failed operation op on key, naming the key so that a
// script can tell which of its commands failed (a release's error comes
// after its "released" line).
func (p *printer) errorOn(op, key string, err error) {
	e := event{Event: "error", Op: op, Key: key, Code: errorCode(err), Message: err.Error()}
	var locked *mesh.LockedError
	if errors.As(err, &locked) {
		e.Key, e.Holder, e.Token = locked.Key, locked.Holder, locked.Token
	}
	p.emit(e)
}

// errorCode classifies err for scripts.
func errorCode(err error) string {
	var c codedError
	switch {
	case errors.As(err, &c):
		return c.code
	case errors.Is(err, mesh.ErrLocked):
		return "locked"
	case errors.Is(err, mesh.ErrNoQuorum):
		return "no_quorum"
	case errors.Is(err, mesh.ErrNoVoters):
		return "no_voters"
	case errors.Is(err, mesh.ErrClosed):
		return "closed"
	case errors.Is(err, mesh.ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, mesh.ErrUnknownNode):
		return "unknown_node"
	case errors.Is(err, mesh.ErrBadVoterChange):
		return "change_refused"
	case errors.Is(err, mesh.ErrInvalidOption), errors.Is(err, mesh.ErrInvalidConfig):
		return "invalid"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	return "error"
}

// codedError is an error of this program with its code.
type codedError struct {
	code string
	msg  string
}

func (e codedError) Error() string { return e.msg }

func errorf(code, format string, args ...any) error {
	return codedError{code: code, msg: fmt.Sprintf(format, args...)}
}

// text renders e for a human.
func text(e event) string {
	switch e.Event {
	case "started":
		how := fmt.Sprintf("voters %s", strings.Join(e.Voters, ","))
		switch {
		case e.Expect > 0:
			how = fmt.Sprintf("bootstrap-expect %d", e.Expect)
		case len(e.Voters) == 0:
			how = "not a voter; learns the voters from gossip"
		}
		return fmt.Sprintf("node %s: gossip %s, ballots %s, %s, lease TTL %s (type \"help\")", e.Node, e.Addr, e.RPC, how, e.TTL)
	case "ready":
		return fmt.Sprintf("ready: a majority of the voters (%s) answers; locks can be granted", strings.Join(e.Voters, ","))
	case "acquired":
		return fmt.Sprintf("acquired %q token %d, valid until %s (renewed in the background)", e.Key, e.Token, clock(e.Deadline))
	case "released":
		return fmt.Sprintf("released %q token %d", e.Key, e.Token)
	case "lost":
		return fmt.Sprintf("LOST %q token %d: %s", e.Key, e.Token, e.Message)
	case "holder":
		if *e.Held {
			return fmt.Sprintf("%q is held by %s, token %d", e.Key, e.Holder, e.Token)
		}
		if e.Token == 0 {
			return fmt.Sprintf("%q is free (never granted)", e.Key)
		}
		return fmt.Sprintf("%q is free (last token %d, granted to %s)", e.Key, e.Token, e.Holder)
	case "status":
		return statusText(e.Status)
	case "voters":
		s := fmt.Sprintf("voters %s (version %d)", strings.Join(e.Voters, ","), e.Version)
		if e.Pending {
			s += ", a change is being settled"
		}
		if len(e.Retired) > 0 {
			s += "; removed for good: " + strings.Join(e.Retired, ",")
		}
		return s
	case "error":
		return fmt.Sprintf("error: %s: %s", e.Op, e.Message)
	case "left":
		return "left the mesh"
	case "quit":
		return "stopped without leaving (leases expire on the other nodes)"
	}
	return e.Message // help, info
}

func statusText(s *mesh.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: gossip %s, ballots %s\n", s.Name, s.Addr, s.RPCAddr)
	if len(s.Voters) == 0 {
		fmt.Fprintf(&b, "  voters: not formed yet\n")
	} else {
		fmt.Fprintf(&b, "  voters: %s (config %x)\n", strings.Join(s.Voters, ","), s.ConfigID)
	}
	voting := s.VotingState.String()
	if s.VotingState == mesh.NotVoter {
		voting = "not a voter"
	}
	fmt.Fprintf(&b, "  voting: %s; leases held here: %d\n", voting, s.Leases)
	for _, m := range s.Members {
		role := ""
		if m.Voter {
			role = " voter"
		}
		fmt.Fprintf(&b, "  member %-10s %-7s gossip %s ballots %s%s\n", m.Name, m.State, m.Addr, m.RPCAddr, role)
	}
	p, a := s.Proposer, s.Acceptor
	fmt.Fprintf(&b, "  proposer: rounds %d (fast %d), granted %d, renewed %d, lost %d, conflicts %d, timeouts %d\n",
		p.Rounds, p.FastRounds, p.Granted, p.Renewed, p.Lost, p.Conflicts, p.Timeouts)
	fmt.Fprintf(&b, "  acceptor: prepares %d, accepts %d, refused %d, wrong config %d, notifies %d",
		a.Prepares, a.Accepts, a.Refused, a.WrongConfig, a.Notifies)
	return b.String()
}

// clock shows the time of day of an RFC 3339 time.
func clock(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.Format("15:04:05.000")
}
