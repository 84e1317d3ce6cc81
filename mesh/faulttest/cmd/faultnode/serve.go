package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// maxLine bounds one request line; longer ones are refused.
const maxLine = 64 << 10

// server answers the suite's requests for one mesh node.
type server struct {
	m *mesh.Mesh

	outMu sync.Mutex
	enc   *json.Encoder

	mu     sync.Mutex
	leases map[string]*mesh.Lease // held now, by key
	taking map[string]bool        // an acquire in progress, by key
	last   map[string]uint64      // the last token held, by key (stale writes)
	// releasing notes, for each lease this process releases, when it
	// called Release and the deadline the lease had just before.
	releasing map[*mesh.Lease]releaseNote
	ends      sync.WaitGroup // lease watchers
}

func newServer(m *mesh.Mesh, out io.Writer) *server {
	return &server{
		m:         m,
		enc:       json.NewEncoder(out),
		leases:    make(map[string]*mesh.Lease),
		taking:    make(map[string]bool),
		last:      make(map[string]uint64),
		releasing: make(map[*mesh.Lease]releaseNote),
	}
}

type releaseNote struct {
	at     int64     // control.Now() just before Release
	before time.Time // Deadline() then
}

// noteRelease records when a release of l begins, and l's deadline then:
// the holder acts until the earlier of the two.
func (s *server) noteRelease(l *mesh.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.releasing[l]; !ok {
		s.releasing[l] = releaseNote{at: control.Now(), before: l.Deadline()}
	}
}

// reply writes one line; lines of concurrent requests never interleave.
func (s *server) reply(r control.Reply) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if err := s.enc.Encode(r); err != nil {
		fmt.Fprintf(os.Stderr, "faultnode: writing a reply: %v\n", err)
	}
}

// serve reads requests until stdin ends, "leave", or ctx ends (a signal),
// running each in its own goroutine, and returns the exit status.
func (s *server) serve(ctx context.Context, in io.Reader) int {
	st := s.m.Status()
	s.reply(control.Reply{Event: control.EventStarted, Addr: st.Addr, RPC: st.RPCAddr, Pid: os.Getpid()})
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 4096), maxLine)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "faultnode: reading requests: %v\n", err)
		}
	}()
	// Requests run under reqCtx: leaving cancels them first, as an
	// application stops its work before it leaves.
	reqCtx, cancelRequests := context.WithCancel(ctx)
	defer cancelRequests()
	var wg sync.WaitGroup
	defer wg.Wait()
	stopRequests := func() {
		cancelRequests()
		wg.Wait()
	}
	for {
		var line []byte
		var ok bool
		select {
		case <-ctx.Done():
			stopRequests()
			return s.leave(0)
		case line, ok = <-lines:
		}
		if !ok {
			// The suite is done with this node, or gone: stop at once,
			// without releasing (like a crash), after telling how each
			// lease ended.
			s.m.Shutdown()
			wg.Wait()
			s.ends.Wait()
			return 0
		}
		var req control.Request
		if err := json.Unmarshal(line, &req); err != nil {
			s.reply(control.Reply{Err: control.ErrInvalid, Msg: fmt.Sprintf("bad request line: %v", err)})
			continue
		}
		if req.Op == control.OpLeave {
			stopRequests()
			return s.leave(req.ID)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, then := s.handle(reqCtx, req)
			r.ID = req.ID
			s.reply(r)
			if then != nil {
				then()
			}
		}()
	}
}

// leave releases every lease, leaves the mesh and shuts down; every lease's
// end is reported before the reply. (Mesh.Leave releases the leases held
// when it starts; one granted to an Acquire still running would be renewed
// until the mesh shuts down, and stay granted a TTL longer: the requests
// are cancelled first.)
func (s *server) leave(id uint64) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	held := make([]*mesh.Lease, 0, len(s.leases))
	for _, l := range s.leases {
		held = append(held, l)
	}
	s.mu.Unlock()
	for _, l := range held {
		s.noteRelease(l)
	}
	err := s.m.Leave(ctx)
	s.ends.Wait()
	r := control.Reply{ID: id, At: control.Now()}
	if err != nil && !errors.Is(err, mesh.ErrClosed) {
		r.Err, r.Msg = code(err), err.Error()
	}
	if id != 0 {
		s.reply(r)
	}
	return 0
}

// handle serves one request. It returns the reply, and what to do once the
// reply is written, if anything.
func (s *server) handle(ctx context.Context, req control.Request) (control.Reply, func()) {
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch req.Op {
	case control.OpAcquire, control.OpTry:
		return s.acquire(ctx, req.Key, req.Op == control.OpAcquire)
	case control.OpRelease:
		return s.release(ctx, req.Key), nil
	case control.OpHolder:
		h, err := s.m.Holder(ctx, req.Key)
		if err != nil {
			return failed(err), nil
		}
		return control.Reply{Key: h.Key, Held: h.Held, Holder: h.Node, Token: h.Token, At: control.Now()}, nil
	case control.OpWrite:
		return s.write(req.Key, req.Stale), nil
	case control.OpStatus:
		return control.Reply{Status: s.status()}, nil
	case control.OpJoin:
		if _, err := s.m.Join(req.Seeds...); err != nil {
			return failed(err), nil
		}
		return control.Reply{}, nil
	case control.OpAddVoter:
		return s.addVoter(ctx, req.Node), nil
	case control.OpRemoveVoter:
		return s.removeVoter(ctx, req.Node), nil
	case control.OpVoters:
		return s.voters(), nil
	}
	return control.Reply{Err: control.ErrInvalid, Msg: fmt.Sprintf("unknown op %q", req.Op)}, nil
}

// acquire takes key. A grant is reported before its end can be: the lease's
// watcher starts once the reply is written.
func (s *server) acquire(ctx context.Context, key string, wait bool) (control.Reply, func()) {
	s.mu.Lock()
	if s.leases[key] != nil || s.taking[key] {
		s.mu.Unlock()
		return control.Reply{Err: control.ErrBusy, Msg: fmt.Sprintf("%q is held or being taken by this process", key)}, nil
	}
	s.taking[key] = true
	s.mu.Unlock()
	var l *mesh.Lease
	var err error
	if wait {
		l, err = s.m.Acquire(ctx, key)
	} else {
		l, err = s.m.TryAcquire(ctx, key)
	}
	at := control.Now()
	s.mu.Lock()
	delete(s.taking, key)
	if err == nil {
		s.leases[key] = l
		s.last[key] = l.Token()
	}
	s.mu.Unlock()
	if err != nil {
		return failed(err), nil
	}
	s.ends.Add(1)
	return control.Reply{Key: key, Token: l.Token(), At: at, Deadline: monoOf(l.Deadline())}, func() { go s.watch(l) }
}

// watch reports the end of a lease: why, and its last deadline.
func (s *server) watch(l *mesh.Lease) {
	defer s.ends.Done()
	<-l.Done()
	at := control.Now()
	deadline := l.Deadline()
	s.mu.Lock()
	if s.leases[l.Key()] == l {
		delete(s.leases, l.Key())
	}
	note, released := s.releasing[l]
	delete(s.releasing, l)
	s.mu.Unlock()
	reason := control.EndClosed
	switch err := l.Err(); {
	case errors.Is(err, mesh.ErrReleased):
		reason = control.EndReleased
	case errors.Is(err, mesh.ErrLeaseLost):
		reason = control.EndLost
	}
	r := control.Reply{Event: control.EventEnded, Key: l.Key(), Token: l.Token(), Reason: reason,
		Deadline: monoOf(deadline), At: at, Msg: fmt.Sprint(l.Err())}
	if released {
		r.Released, r.Before = note.at, monoOf(note.before)
	}
	s.reply(r)
}

func (s *server) release(ctx context.Context, key string) control.Reply {
	s.mu.Lock()
	l := s.leases[key]
	s.mu.Unlock()
	if l == nil {
		return control.Reply{Err: control.ErrNotHeld, Msg: fmt.Sprintf("%q is not held by this process", key)}
	}
	s.noteRelease(l)
	err := l.Release(ctx)
	r := control.Reply{Key: key, Token: l.Token(), At: monoOf(l.Deadline())}
	if err != nil {
		f := failed(err)
		r.Err, r.Msg = f.Err, f.Msg
	}
	return r
}

// write stands for a write to the fenced resource, which lives in the
// suite: the reply carries the token the write is made under, and the suite
// applies it to its fence. A write needs a lease this process holds and has
// not seen end, unless stale.
func (s *server) write(key string, stale bool) control.Reply {
	s.mu.Lock()
	l, token := s.leases[key], s.last[key]
	s.mu.Unlock()
	switch {
	case stale && token != 0:
		return control.Reply{Key: key, Token: token, At: control.Now()}
	case l == nil:
		return control.Reply{Err: control.ErrNotHeld, Msg: fmt.Sprintf("%q is not held by this process", key)}
	}
	select {
	case <-l.Done():
		return control.Reply{Err: control.ErrNotHeld, Msg: fmt.Sprintf("the lease on %q ended: %v", key, l.Err())}
	default:
	}
	return control.Reply{Key: key, Token: l.Token(), At: control.Now()}
}

func (s *server) status() *control.Status {
	st := s.m.Status()
	out := &control.Status{Voting: legacyVoting(st.VotingState), Members: make(map[string]string), Voters: st.Voters, Leases: st.Leases}
	for _, mem := range st.Members {
		out.Members[mem.Name] = mem.State
	}
	return out
}

// monoOf turns a time.Time of this process into the machine's monotonic
// clock (time.Until reads the monotonic reading t carries).
func monoOf(t time.Time) int64 {
	return control.Now() + int64(time.Until(t))
}

// failed turns an error of the mesh into a reply.
func failed(err error) control.Reply {
	r := control.Reply{Err: code(err), Msg: err.Error()}
	var locked *mesh.LockedError
	if errors.As(err, &locked) {
		r.Holder, r.Token = locked.Holder, locked.Token
	}
	return r
}

func code(err error) string {
	switch {
	case errors.Is(err, mesh.ErrClosed):
		return control.ErrClosed
	case errors.Is(err, mesh.ErrUnknownNode):
		return control.ErrUnknownNode
	case errors.Is(err, mesh.ErrBadVoterChange):
		return control.ErrBadChange
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return control.ErrTimeout
	case errors.Is(err, mesh.ErrLocked):
		return control.ErrLocked
	case errors.Is(err, mesh.ErrNoQuorum):
		return control.ErrNoQuorum
	case errors.Is(err, mesh.ErrNoVoters):
		return control.ErrNoVoters
	case errors.Is(err, mesh.ErrInvalidKey), errors.Is(err, mesh.ErrInvalidOption):
		return control.ErrInvalid
	}
	return control.ErrOther
}

// legacyVoting spells a voting state as control.Status.Voting does, which
// nodes of earlier releases (the upgrade scenario) send too: "" for a node
// that does not vote, "catching up" with a space.
func legacyVoting(v mesh.VotingState) string {
	switch v {
	case mesh.NotVoter:
		return ""
	case mesh.CatchingUp:
		return "catching up"
	}
	return v.String()
}
