package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// Readiness (design.md R94). A node is ready when
//
//   - it knows a voter configuration;
//   - if it is a voter, its acceptor votes: quarantine and catch-up are
//     over, and no other process with its name keeps it silent;
//   - a majority of the configuration's voters (and, while a change is
//     pending, of the voters before it) is known live.
//
// A voter is known live when it is this node with a voting acceptor, or
// when it answered this node's probe within the last liveWindow saying that
// its acceptor votes, on a configuration of this mesh. Each node probes
// every voter once per probeInterval (four round timeouts: 1s with
// DefaultConfig, 200ms with DefaultLocalConfig) with a configuration fetch,
// whose answer carries the voter's voting state. Gossip's "alive" is not
// enough: a restarted voter is alive in gossip long before it votes, and
// a rolling restart that trusted it would take down a second voter while the
// first still waits out its quarantine.
//
// So a ready voter is one whose vote counts, and which can reach a majority
// that votes: restarting voters one at a time, each only once the previous
// one is ready again, keeps a majority voting throughout.

// VotingState says whether and how this node votes.
type VotingState uint8

const (
	// NotVoter: the configuration does not name this node, or none is
	// known yet. It takes locks; it does not vote.
	NotVoter VotingState = iota
	// Quarantined: a voter that restarted without its state, waiting out
	// every lease it may have accepted in its earlier life.
	Quarantined
	// CatchingUp: a voter past its quarantine, learning the keys from the
	// other voters.
	CatchingUp
	// Live: a voter that votes.
	Live
	// Silenced: a voter that does not vote because an earlier process with
	// its name still answers (Status.Security).
	Silenced
	// DiskFailed: a voter that stopped voting for good because it could
	// not save its state to its data directory (Status.DataDir.Error);
	// restart it once the disk is fixed.
	DiskFailed
)

var votingStateNames = [...]string{"not-voter", "quarantined", "catching-up", "live", "silenced", "disk-failed"}

func (s VotingState) String() string {
	if int(s) < len(votingStateNames) {
		return votingStateNames[s]
	}
	return fmt.Sprintf("VotingState(%d)", uint8(s))
}

// MarshalText spells the state as String does.
func (s VotingState) MarshalText() ([]byte, error) {
	if int(s) >= len(votingStateNames) {
		return nil, fmt.Errorf("mesh: unknown voting state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads what MarshalText wrote.
func (s *VotingState) UnmarshalText(b []byte) error {
	i := slices.Index(votingStateNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("mesh: unknown voting state %q", b)
	}
	*s = VotingState(i)
	return nil
}

// votingStateOf is the state of a node whose quorum.Node says v (nil: no
// configuration yet).
func votingStateOf(v *quorum.VotingState, silenced bool) VotingState {
	switch {
	case v == nil || !v.Voter:
		return NotVoter
	case v.DiskFailed:
		return DiskFailed
	case v.Silenced || silenced:
		return Silenced
	case v.Acceptor == quorum.Quarantined:
		return Quarantined
	case v.Acceptor == quorum.CatchingUp:
		return CatchingUp
	case v.Acceptor == quorum.Live:
		return Live
	}
	return NotVoter
}

// votingState is this node's voting state now.
func (m *Mesh) votingState() VotingState {
	return votingStateOf(m.voting.Load(), m.notVoting())
}

// Waiting says what keeps a node from being ready (Status.Waiting). Every
// field is zero on a ready node, except Mismatches and NewMeshRefused,
// which are shown whether or not they keep it from being ready.
type Waiting struct {
	// Configuration: no voter configuration is known yet (BootstrapExpect
	// still waiting for its voters, or a node without Voters that has
	// not heard from a voter).
	Configuration bool `json:",omitempty"`
	// Quarantine is how long this restarted voter still refuses to vote
	// for the leases it may have accepted before (zero once they have
	// ended): its own quarantine, or, while it catches up after that, a
	// longer lease it heard of (another voter's horizon, or a holder's
	// word in gossip during a rolling restart that lowers MaxTTL).
	Quarantine time.Duration `json:",omitempty"`
	// CatchUp are the voters that have not yet answered this voter's
	// catch-up in full; Recovering those that answered that they are
	// recovering too.
	CatchUp    []string `json:",omitempty"`
	Recovering []string `json:",omitempty"`
	// NeverVoted: this voter, on a new data directory, waits for these
	// voters to say whether they ever voted: it votes at once if enough
	// of them never did (a brand-new mesh; see Config.NewMesh), and after
	// a quarantine as soon as one says it did.
	NeverVoted []string `json:",omitempty"`
	// NewMeshRefused names the voter that said it voted while this one
	// was started with Config.NewMesh: the mesh is not new, and this
	// voter recovered as one whose data directory was lost. Remove
	// NewMesh. It is shown whether or not the node is ready.
	NewMeshRefused string `json:",omitempty"`
	// NewerConfig: this voter, restarted without its data directory or
	// on a new one, waits for the voters' configuration of this version,
	// which some voters accepted and which may have been chosen, to be
	// adopted or ruled out (a voter change settles it, such as removing
	// this voter from another node).
	NewerConfig uint64 `json:",omitempty"`
	// Silenced: this voter does not vote, because an earlier process with
	// its name still answers.
	Silenced bool `json:",omitempty"`
	// Voters are the voters not known live, and why, when they are too
	// many for a majority (see Status.LiveVoters).
	Voters []VoterWait `json:",omitempty"`
	// Mismatches are the peers whose voter configuration or settings
	// differ from this node's, seen within the last ten minutes (the last
	// few per peer). A voter among them is not known live.
	Mismatches []Mismatch `json:",omitempty"`
}

// VoterWait is a voter that is not known live, and why.
type VoterWait struct {
	Name string
	// Why: "not seen in gossip", "no answer", "quarantined",
	// "catching-up", "silenced", "another mesh", ...
	Why string
}

// Mismatch is a difference between this node and a peer that keeps them
// from working together: another voter configuration (another mesh, or
// founded by other voters), or (once nodes exchange them) settings that
// safety depends on.
type Mismatch struct {
	Peer string
	// What differs: "founding voters", "voter configuration", or a
	// setting's name.
	What string
	// Ours and Theirs are the two values, as text.
	Ours, Theirs string
	// At is when it was last seen.
	At time.Time
}

// newerConfig says what a NewerConfig wait is.
func (w Waiting) newerConfig() string {
	return fmt.Sprintf("waiting for voter configuration version %d, which some voters accepted, to be adopted or ruled out (a voter change settles it: removing this voter, from another node, is one the mesh allows)", w.NewerConfig)
}

// String is the reasons in a few words each, "; " between them.
func (w Waiting) String() string {
	var r []string
	if w.Configuration {
		r = append(r, "no voter configuration yet")
	}
	if w.Silenced {
		r = append(r, "silenced: an earlier process with this node's name still answers")
	}
	if w.Quarantine > 0 {
		r = append(r, fmt.Sprintf("quarantined for %v more", w.Quarantine.Round(time.Millisecond)))
	}
	if len(w.CatchUp) > 0 || len(w.Recovering) > 0 {
		s := "catching up"
		if len(w.CatchUp) > 0 {
			s += ", waiting for " + strings.Join(w.CatchUp, ", ")
		}
		if len(w.Recovering) > 0 {
			s += ", recovering too: " + strings.Join(w.Recovering, ", ")
		}
		r = append(r, s)
	}
	if len(w.NeverVoted) > 0 {
		r = append(r, "new data directory: waiting for "+strings.Join(w.NeverVoted, ", ")+" to say whether they ever voted")
	}
	if w.NewMeshRefused != "" {
		r = append(r, "NewMesh refused: "+w.NewMeshRefused+" has voted (remove NewMesh)")
	}
	if w.NewerConfig != 0 {
		r = append(r, w.newerConfig())
	}
	if len(w.Voters) > 0 {
		parts := make([]string, len(w.Voters))
		for i, v := range w.Voters {
			parts[i] = v.Name + " (" + v.Why + ")"
		}
		r = append(r, "no majority of voters known live: "+strings.Join(parts, ", "))
	}
	for _, mm := range w.Mismatches {
		r = append(r, fmt.Sprintf("%s differs from %s's: ours %s, theirs %s", mm.What, mm.Peer, mm.Ours, mm.Theirs))
	}
	return strings.Join(r, "; ")
}

// MarshalJSON writes Quarantine as a duration string ("1.5s").
func (w Waiting) MarshalJSON() ([]byte, error) {
	type plain Waiting
	out := struct {
		plain
		Quarantine string `json:",omitempty"`
	}{plain: plain(w)}
	if w.Quarantine != 0 {
		out.Quarantine = w.Quarantine.String()
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (w *Waiting) UnmarshalJSON(b []byte) error {
	type plain Waiting
	in := struct {
		*plain
		Quarantine string `json:",omitempty"`
	}{plain: (*plain)(w)}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	w.Quarantine = 0
	if in.Quarantine != "" {
		d, err := time.ParseDuration(in.Quarantine)
		if err != nil {
			return fmt.Errorf("mesh: Waiting.Quarantine: %w", err)
		}
		w.Quarantine = d
	}
	return nil
}

// readyState is what readiness keeps: the level, the channel Ready hands
// out, what the probes heard, and the mismatches seen.
type readyState struct {
	mu         sync.Mutex
	ready      bool
	ch         chan struct{} // closed while ready
	heard      map[string]heard
	failed     map[string]probeFailure // since the last answer
	probing    map[string]bool
	mismatches map[string][]Mismatch
	kick       chan struct{}
}

// probeFailure is why a voter's last probe failed, and when.
type probeFailure struct {
	at  time.Duration // on the mesh clock
	err string
}

// heard is a voter's last answer to a probe.
type heard struct {
	at      time.Duration // on the mesh clock
	state   string        // its VotingState's text; "" from a node too old to say
	cluster uint64        // its configuration's cluster
}

func (r *readyState) init() {
	r.ch = make(chan struct{})
	r.heard = make(map[string]heard)
	r.failed = make(map[string]probeFailure)
	r.probing = make(map[string]bool)
	r.mismatches = make(map[string][]Mismatch)
	r.kick = make(chan struct{}, 1)
}

// Ready returns a channel that is closed when this node is ready (see
// Status.Ready): at once if it is ready now, otherwise when it next
// becomes ready. A channel once closed stays closed; when the node stops
// being ready, later calls return a new channel, so that
//
//	<-m.Ready()
//
// always waits for the node to be ready now. The level is updated as the
// node's state changes and at least once per probe interval (four round
// timeouts); Status and HTTPHandler's /readyz read the current level.
func (m *Mesh) Ready() <-chan struct{} {
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	return m.rs.ch
}

// WaitReady waits until this node is ready (see Ready), or ctx ends: it then
// returns an error wrapping ErrNotReady and ctx's error that says what the
// node was still waiting for. It returns ErrClosed once the mesh is shut
// down.
func (m *Mesh) WaitReady(ctx context.Context) error {
	for {
		select {
		case <-m.Ready():
			return nil
		case <-m.closed:
			return ErrClosed
		case <-ctx.Done():
			if m.isClosed() {
				return ErrClosed
			}
			st := m.Status()
			if st.Ready {
				return nil
			}
			return fmt.Errorf("%w: %s: %w", ErrNotReady, st.Waiting, ctx.Err())
		}
	}
}

// probeInterval is how often each voter is probed; liveWindow how long an
// answer counts.
func (m *Mesh) probeInterval() time.Duration { return 4 * m.cfg.roundTimeout() }
func (m *Mesh) liveWindow() time.Duration    { return 3 * m.probeInterval() }

// kickReady makes the readiness loop probe and evaluate now. It never
// blocks (votingChanged calls it under nodeMu).
func (m *Mesh) kickReady() {
	select {
	case m.rs.kick <- struct{}{}:
	default:
	}
}

// readyLoop probes the voters and keeps the readiness level current.
func (m *Mesh) readyLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.probeInterval())
	defer t.Stop()
	for {
		m.probeVoters()
		m.evalReady()
		select {
		case <-m.closed:
			return
		case <-t.C:
		case <-m.rs.kick:
		}
	}
}

// probeVoters asks every other voter of the configuration (and of the one
// before it while a change is pending) for its configuration and voting
// state, one probe per voter at a time.
func (m *Mesh) probeVoters() {
	cur := m.current.Load()
	if cur == nil {
		return
	}
	for _, v := range slices.Concat(cur.Voters, cur.Prev) {
		name := string(v)
		if v == m.name {
			continue
		}
		m.rs.mu.Lock()
		busy := m.rs.probing[name]
		m.rs.probing[name] = true
		m.rs.mu.Unlock()
		if busy {
			continue
		}
		m.wg.Add(1) // while readyLoop, itself counted, runs
		go m.probe(name)
	}
}

func (m *Mesh) probe(name string) {
	defer m.wg.Done()
	defer func() {
		m.rs.mu.Lock()
		delete(m.rs.probing, name)
		m.rs.mu.Unlock()
	}()
	// A slow answer still counts when it comes: the next probe to this
	// voter waits for it, within the window an answer counts for.
	ctx, cancel := context.WithTimeout(context.Background(), m.liveWindow())
	defer cancel()
	info, err := m.fetchInfo(ctx, name)
	if err != nil {
		// Not heard: its last answer ages out. Status says so now.
		m.rs.mu.Lock()
		m.rs.failed[name] = probeFailure{at: m.clock.Now(), err: err.Error()}
		m.rs.mu.Unlock()
		return
	}
	m.rs.mu.Lock()
	m.rs.heard[name] = heard{at: m.clock.Now(), state: info.Voting, cluster: info.Cluster()}
	delete(m.rs.failed, name)
	m.rs.mu.Unlock()
	if cur := m.current.Load(); cur != nil && cur.Cluster() == info.Cluster() {
		// Of this mesh now (restarted with the right Voters, say).
		m.clearMismatch(name, "founding voters")
		m.clearMismatch(name, "voters")
	}
	m.learnFounders(info)
	m.evalReady()
}

// evalReady updates the readiness level and Ready's channel.
func (m *Mesh) evalReady() bool {
	ok := m.readiness(nil).ready
	m.setReady(ok)
	return ok
}

func (m *Mesh) setReady(ok bool) {
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	switch {
	case ok && !m.rs.ready:
		close(m.rs.ch)
	case !ok && m.rs.ready:
		m.rs.ch = make(chan struct{})
	}
	m.rs.ready = ok
}

// readiness is the node's readiness now: whether it is ready, what it
// waits for, and the voters known live. rec, when given, is the
// acceptor's recovery, for Waiting's details.
type readinessNow struct {
	ready   bool
	waiting Waiting
	live    []string
}

func (m *Mesh) readiness(rec *quorum.Recovery) readinessNow {
	var r readinessNow
	now := m.clock.Now()
	r.waiting.Mismatches = m.recentMismatches()
	cur := m.current.Load()
	if cur == nil {
		r.waiting.Configuration = true
		return r
	}
	own := m.votingState()
	selfLive := own == Live
	switch own {
	case Silenced:
		r.waiting.Silenced = true
	case Quarantined:
		if rec != nil {
			r.waiting.Quarantine = max(rec.LiveFrom-now, time.Millisecond)
		}
	case CatchingUp:
		if rec != nil {
			if rec.LiveFrom > now {
				// Past its own quarantine, it waits out a longer
				// lease it heard of (a horizon, or a holder's word).
				r.waiting.Quarantine = rec.LiveFrom - now
			}
			if rec.NeverVoted {
				r.waiting.NeverVoted = names(rec.Waiting)
			} else {
				r.waiting.CatchUp = names(rec.Waiting)
			}
			r.waiting.Recovering = names(rec.Recovering)
			r.waiting.NewerConfig = rec.NewerConfig
		}
	}
	if rec != nil {
		r.waiting.NewMeshRefused = string(rec.NewMeshRefused)
	}
	why := func(v quorum.NodeID) string {
		if v == m.name {
			if selfLive {
				return ""
			}
			return own.String()
		}
		return m.liveness(string(v), cur.Cluster(), now)
	}
	quorumOK := true
	seen := map[quorum.NodeID]bool{}
	groups := [][]quorum.NodeID{cur.Voters}
	if cur.Pending {
		groups = append(groups, cur.Prev)
	}
	for _, group := range groups {
		live := 0
		for _, v := range group {
			if why(v) == "" {
				live++
			}
		}
		if live < len(group)/2+1 {
			quorumOK = false
		}
	}
	for _, group := range groups {
		for _, v := range group {
			if seen[v] {
				continue
			}
			seen[v] = true
			if w := why(v); w == "" {
				r.live = append(r.live, string(v))
			} else if !quorumOK {
				r.waiting.Voters = append(r.waiting.Voters, VoterWait{Name: string(v), Why: w})
			}
		}
	}
	ownOK := own == NotVoter || selfLive
	r.ready = ownOK && quorumOK
	return r
}

// liveness says why voter name is not known live ("" when it is).
func (m *Mesh) liveness(name string, cluster uint64, now time.Duration) string {
	m.rs.mu.Lock()
	h, ok := m.rs.heard[name]
	m.rs.mu.Unlock()
	switch {
	case !ok || now-h.at > m.liveWindow():
		if _, known := m.book.rpcAddr(name); !known {
			return "not seen in gossip"
		}
		if !ok {
			return "no answer yet"
		}
		return fmt.Sprintf("no answer for %v", (now - h.at).Round(time.Millisecond))
	case h.cluster != cluster:
		return "another mesh"
	case h.state != "" && h.state != Live.String():
		return h.state
	}
	// (State "": a node of a version that does not report its state; it
	// answered, which is all such a node can tell.)
	if mm := m.mismatchWith(name); mm != "" {
		return "mismatch: " + mm
	}
	return ""
}

// voterHealth is every voter of the configuration (and of the one before
// it while a change is pending) as the probes find it (Status.VoterHealth).
func (m *Mesh) voterHealth() []VoterHealth {
	cur := m.current.Load()
	if cur == nil {
		return nil
	}
	now := m.clock.Now()
	own := m.votingState()
	var out []VoterHealth
	for _, v := range slices.Concat(cur.Voters, cur.Prev) {
		name := string(v)
		if slices.ContainsFunc(out, func(h VoterHealth) bool { return h.Name == name }) {
			continue
		}
		h := VoterHealth{Name: name}
		if v == m.name {
			h.Self, h.State, h.Live = true, own.String(), own == Live
			if !h.Live {
				h.Why = own.String()
			}
			out = append(out, h)
			continue
		}
		h.Why = m.liveness(name, cur.Cluster(), now)
		h.Live = h.Why == ""
		m.rs.mu.Lock()
		if last, ok := m.rs.heard[name]; ok {
			h.State, h.Answered = last.state, max(now-last.at, time.Nanosecond)
		}
		if f, ok := m.rs.failed[name]; ok {
			h.ProbeError = f.err
		}
		m.rs.mu.Unlock()
		out = append(out, h)
	}
	return out
}

func names(ids []quorum.NodeID) []string {
	if len(ids) == 0 {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// Mismatches are kept for mismatchMemory, at most mismatchesPerPeer per
// peer (one per What) and mismatchPeers peers.
const (
	mismatchMemory    = 10 * time.Minute
	mismatchesPerPeer = 4
	mismatchPeers     = 64
)

// noteMismatch records a difference with a peer for Status (Waiting.
// Mismatches). A mismatch of the same What with the same peer replaces the
// earlier one. Until it is cleared (clearMismatch) or ten minutes pass
// without it being noted again, a voter with a mismatch is not known live.
// Whatever finds that a peer's settings differ in a way that keeps the two
// from voting together notes it here, and clears it once they agree.
func (m *Mesh) noteMismatch(mm Mismatch) {
	if mm.At.IsZero() {
		mm.At = time.Now()
	}
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	list := slices.DeleteFunc(m.rs.mismatches[mm.Peer], func(o Mismatch) bool { return o.What == mm.What })
	list = append(list, mm)
	if len(list) > mismatchesPerPeer {
		list = list[len(list)-mismatchesPerPeer:]
	}
	if _, ok := m.rs.mismatches[mm.Peer]; !ok && len(m.rs.mismatches) >= mismatchPeers {
		m.pruneMismatches(time.Now())
		if len(m.rs.mismatches) >= mismatchPeers {
			return
		}
	}
	m.rs.mismatches[mm.Peer] = list
}

// clearMismatch forgets the mismatch of What with peer, once resolved.
func (m *Mesh) clearMismatch(peer, what string) {
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	list := slices.DeleteFunc(m.rs.mismatches[peer], func(o Mismatch) bool { return o.What == what })
	if len(list) == 0 {
		delete(m.rs.mismatches, peer)
	} else {
		m.rs.mismatches[peer] = list
	}
}

// mismatchWith names what differs with peer, if anything ("" if nothing
// recent).
func (m *Mesh) mismatchWith(peer string) string {
	whats := m.settingsMismatchesWith(peer)
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	for _, o := range m.rs.mismatches[peer] {
		if time.Since(o.At) <= mismatchMemory {
			whats = append(whats, o.What)
		}
	}
	return strings.Join(whats, ", ")
}

// recentMismatches lists the mismatches of the last mismatchMemory, by
// peer and then time.
func (m *Mesh) recentMismatches() []Mismatch {
	var out []Mismatch
	// Settings that safety depends on (settings.go): with such a peer this
	// node neither votes nor asks for votes.
	for _, sm := range m.SettingsMismatches() {
		out = append(out, Mismatch{Peer: sm.Peer, What: sm.What, Ours: sm.Ours, Theirs: sm.Theirs, At: sm.Seen})
	}
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	m.pruneMismatches(time.Now())
	for _, list := range m.rs.mismatches {
		out = append(out, list...)
	}
	slices.SortFunc(out, func(a, b Mismatch) int {
		if c := strings.Compare(a.Peer, b.Peer); c != 0 {
			return c
		}
		return a.At.Compare(b.At)
	})
	return out
}

func (m *Mesh) pruneMismatches(now time.Time) {
	for peer, list := range m.rs.mismatches {
		list = slices.DeleteFunc(list, func(o Mismatch) bool { return now.Sub(o.At) > mismatchMemory })
		if len(list) == 0 {
			delete(m.rs.mismatches, peer)
		} else {
			m.rs.mismatches[peer] = list
		}
	}
}
