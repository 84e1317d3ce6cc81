package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/quorum"
)

// Who is who. A vote counts for the name it is cast in, so a node must
// know, for every name, which process it talks to: its binding, the ballot
// address and the incarnation (a new one at every start, incarnation.go)
// in the book. Incarnations are compared for equality only: they come from
// wall clocks, and one stepped back across a restart makes the new life's
// lower. The rules (docs/security.md, "Identity"):
//
//  1. Gossip proposes, the binding disposes. The first ballot address gossip
//     shows for a name is bound. After that an alive message that changes
//     it is vetted before memberlist may apply it (checkAlive, memberlist's
//     AliveDelegate): the same incarnation at another address is refused
//     at once (a process never moves); another incarnation, lower or
//     higher, is refused while a probe runs, and later accepted only if
//     the bound process no longer answers as that name at the bound
//     address and the new one does, with its incarnation, at its address
//     (vetRebind). So while a node answers, nobody can move it, stale
//     gossip of an earlier life is refused (the bound process answers),
//     and a restarted node is rebound once its old process is gone. About
//     itself, a node lets memberlist refute an alive message from another
//     incarnation at its own ballot address, which only its previous life
//     can have used (checkAliveSelf): so a restarted node takes its name
//     back in gossip whichever way the wall clock moved.
//  2. With TLS, a ballot connection to a name is used only if the listener's
//     certificate names it (the transport's dial check), and an answer is
//     taken as the name's only if it comes over such a connection, is
//     signed with that name and with the bound incarnation (checkAnswer).
//     A request is taken only if the hello named its sender (the
//     transport, by the dialer's certificate with TLS) and its ballots are
//     of the bound incarnation of the sender (checkSender).
//  3. Two live processes with one name (a copied configuration, a pod
//     started elsewhere while the old one runs) are found by gossip (a
//     conflict of addresses, or an alive message about a node from another
//     incarnation) and confirmed by probes: both processes answer, each
//     as its own incarnation. Both log it loudly and show it in Status.
//     The one of the higher incarnation, the later one unless the wall
//     clocks disagree, does not vote while the other answers (notVoting),
//     and every other node refuses the ballots of the process it is not
//     bound to (rule 2), so one name never counts twice. (When the clocks
//     mislead, the process peers are bound to may be the one that stops
//     voting: the name's vote is lost while both run, never safety.)
//
// A probe (identify) is a catch-up request for no bucket: every node
// answers it, voter or not, with its name and incarnation, and the
// transport checks the certificate with TLS.

var (
	// errForgedGossip refuses an alive message no honest node sends.
	errForgedGossip = errors.New("mesh: forged gossip")
	// errRebind refuses, for now, an alive message that moves a node to
	// another process or address: it is being vetted, or was refused.
	errRebind = errors.New("mesh: gossip moves a node to another process; vetting it")
	// errWrongIncarnation refuses a message from another process than the
	// one bound to its sender's name.
	errWrongIncarnation = errors.New("mesh: another process than the one bound to that name")
)

// identities holds the vetting and conflict state of a book.
type identities struct {
	pushPull time.Duration // memberlist's PushPullInterval: evidence comes at least that often

	mu        sync.Mutex
	vets      map[vetKey]*vet
	inflight  int                  // probes running (vets and namesake checks)
	probed    map[string]time.Time // namesake checks and joins, by target
	conflicts map[string]*NameConflict

	down atomic.Int64 // unix nanoseconds until which this node does not vote
}

type vetKey struct {
	name string
	inc  uint64
	rpc  string
}

type vet struct {
	done, approved bool
	until          time.Time // a refusal stands until then
}

// NameConflict is a name that this node saw used by two processes at once.
type NameConflict struct {
	Name string
	// Processes are the gossip addresses, ballot addresses and
	// incarnations seen for the name ("" or 0 where not known).
	Processes []Process
	// Why says how it was found.
	Why string
	// Seen is when the evidence was last seen. A conflict is forgotten a
	// few gossip push/pull intervals after its evidence stops.
	Seen time.Time
}

// Process is one process seen with a name.
type Process struct {
	Gossip, RPC string
	Inc         uint64
}

const (
	// maxProbes bounds the probes running at once: forged gossip cannot
	// make a node dial without bound.
	maxProbes = 8
	// maxVets bounds the rebinds remembered.
	maxVets = 1024
	// retryVet is how soon a rebind whose new process did not answer may
	// be vetted again.
	retryVet = 2 * time.Second
	// vetFirstRetry is the first pause before a vet asks a new process
	// that did not answer again; it doubles up to half of retryVet.
	vetFirstRetry = 50 * time.Millisecond
)

// hold is how long evidence of a conflict (or a refused rebind) stands.
func (ids *identities) hold() time.Duration {
	return max(3*ids.pushPull, 5*time.Second)
}

// probeTimeout bounds one identify.
func (m *Mesh) probeTimeout() time.Duration { return max(time.Second, 4*m.cfg.roundTimeout()) }

// identify asks the process at addr, dialed as name, who it is, and
// returns its incarnation.
func (m *Mesh) identify(ctx context.Context, name, addr string) (uint64, error) {
	var cfg uint64
	if cur := m.current.Load(); cur != nil {
		cfg = cur.ID
	}
	body, err := encode(kindCatchUp, &quorum.CatchUpRequest{Config: cfg, From: m.name, To: quorum.NodeID(name)})
	if err != nil {
		return 0, err
	}
	reply, err := m.tr.Call(ctx, name, addr, body)
	if err != nil {
		return 0, err
	}
	resp, err := m.lim.decodeCatchUpReply(reply)
	if err != nil {
		return 0, err
	}
	if string(resp.From) != name {
		return 0, fmt.Errorf("%w: %s answers as %s", errWrongIncarnation, addr, resp.From)
	}
	return resp.Inc, nil
}

func (ids *identities) endProbe() {
	ids.mu.Lock()
	ids.inflight--
	ids.mu.Unlock()
}

// checkAlive is memberlist's AliveDelegate (it runs under memberlist's
// lock: it only reads the book and starts goroutines). A non-nil error
// makes memberlist ignore the message.
func (m *Mesh) checkAlive(n *memberlist.Node) error {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		m.incr("gossip.bad_meta", 1)
		return err
	}
	if n.Name == m.cfg.Name {
		return m.checkAliveSelf(n, meta)
	}
	rpc, inc, _, ok := m.book.binding(n.Name)
	switch {
	case !ok || meta.RPC == "":
		return nil // first sight
	case meta.Inc == inc && meta.RPC == rpc:
		return nil
	case meta.Inc == inc:
		m.forged(n.Name, "a running process never changes its ballot address", gossipAddr(n), meta.RPC, rpc)
		return fmt.Errorf("%w: %s's ballot address moved from %s to %s within one incarnation", errForgedGossip, n.Name, rpc, meta.RPC)
	}
	// Another incarnation, lower or higher: vetted alike. A lower one is
	// not taken for stale, since a restart after the wall clock stepped
	// back has one; stale gossip of an earlier life is refused by the vet,
	// the bound process answering.
	key := vetKey{n.Name, meta.Inc, meta.RPC}
	now := time.Now()
	ids := &m.book.ids
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.vets == nil {
		ids.vets = make(map[vetKey]*vet)
	}
	v := ids.vets[key]
	switch {
	case v != nil && v.done && v.approved:
		// Approved once, but the binding is another process now (this
		// node's later life, say, or the rebind found it moved): vetted
		// again, as its earlier approval says nothing of today.
	case v != nil && (!v.done || now.Before(v.until)):
		return fmt.Errorf("%w: %s at %s (incarnation %d)", errRebind, n.Name, meta.RPC, meta.Inc)
	case ids.inflight >= maxProbes:
		return fmt.Errorf("%w: too many probes running", errRebind)
	}
	if len(ids.vets) >= maxVets {
		for k, x := range ids.vets {
			if x.done && now.After(x.until) {
				delete(ids.vets, k)
			}
		}
		if len(ids.vets) >= maxVets {
			return fmt.Errorf("%w: too many rebinds to vet", errRebind)
		}
	}
	ids.vets[key] = &vet{}
	ids.inflight++
	go m.vetRebind(key, rpc, inc, gossipAddr(n))
	return fmt.Errorf("%w: %s at %s (incarnation %d)", errRebind, n.Name, meta.RPC, meta.Inc)
}

// vetRebind decides whether name's binding moves from (oldRPC, oldInc) to
// the process of key: only if the bound process no longer answers as name
// at oldRPC, and the new one does, with its incarnation, at its address.
func (m *Mesh) vetRebind(key vetKey, oldRPC string, oldInc uint64, gossip string) {
	ids := &m.book.ids
	defer ids.endProbe()
	settle := func(approved bool, hold time.Duration) {
		ids.mu.Lock()
		if v := ids.vets[key]; v != nil {
			v.done, v.approved, v.until = true, approved, time.Now().Add(hold)
		}
		ids.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.probeTimeout())
	inc, err := m.identify(ctx, key.name, oldRPC)
	cancel()
	if err == nil && inc == oldInc {
		settle(false, ids.hold())
		m.incr("gossip.refused.rebind", 1)
		if m.bothAnswer(key, oldRPC) {
			m.noteConflict(key.name, "gossip moved it to another process while the bound one still answers",
				Process{RPC: oldRPC, Inc: oldInc}, Process{Gossip: gossip, RPC: key.rpc, Inc: key.inc})
		}
		return
	}
	// A process just started may not answer yet (it refuses a caller its
	// gossip has not seen): ask again a few times, soon, before giving
	// up for retryVet. Without this its peers refused its ballots for two
	// seconds while its readiness said it was back.
	wait := vetFirstRetry
	for {
		ctx, cancel = context.WithTimeout(context.Background(), m.probeTimeout())
		inc, err = m.identify(ctx, key.name, key.rpc)
		cancel()
		if (err == nil && inc == key.inc) || wait > retryVet/2 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-m.closed:
			t.Stop()
			settle(false, retryVet)
			return
		case <-t.C:
		}
		wait *= 2
	}
	if err != nil || inc != key.inc {
		settle(false, retryVet)
		m.incr("gossip.refused.rebind", 1)
		if m.noisy.allow("rebind " + key.name) {
			m.log.Warn("not moving a node to the ballot address gossip shows: nobody answers there as that process",
				"peer", key.name, "rpc", key.rpc, "incarnation", key.inc, "answered", inc, "error", err)
		}
		return
	}
	if m.book.rebind(key.name, oldRPC, oldInc, key.rpc, key.inc) {
		m.log.Info("a node restarted: its ballots go to its new process", "peer", key.name,
			"rpc", key.rpc, "incarnation", key.inc, "was_rpc", oldRPC, "was_incarnation", oldInc)
	}
	settle(true, 0)
}

// bothAnswer reports whether the process of key answers, as key's name
// with key's incarnation, at key's address, while the bound process of
// that name answers at boundRPC: then two processes use the name.
// Otherwise the gossip was stale (an earlier life's, whose incarnation may
// be higher than the bound one's after a wall clock stepped back) or
// forged, and no conflict is raised.
func (m *Mesh) bothAnswer(key vetKey, boundRPC string) bool {
	if key.rpc == boundRPC {
		return false // the bound process holds that address
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.probeTimeout())
	defer cancel()
	inc, err := m.identify(ctx, key.name, key.rpc)
	return err == nil && inc == key.inc
}

// checkAliveSelf vets an alive message about this node. Its own, echoed,
// passes. One of another incarnation at this node's own ballot address is
// this node's previous life, whatever the two numbers (the wall clock may
// have stepped back between them): no other process can listen there while
// this one does. It passes, and memberlist refutes it, which is how a
// restarted node takes its name back. One of the same incarnation at
// another ballot address is forged. One of another incarnation at another
// address is probed (checkNamesake): a process started with this node's
// name, an earlier life there, or a forgery. Of those, one of an earlier
// incarnation passes, to be refuted; one of a later incarnation is not:
// memberlist must not refute it (a refutation above an incarnation forged
// at 2^32-1 wraps to 0 and is ignored by everyone). (A previous life at
// another address whose number is higher only because the clock stepped
// back is therefore not refuted: peers still rebind this node, by the vet,
// and memberlist shows this life once it finds that one dead.)
func (m *Mesh) checkAliveSelf(n *memberlist.Node, meta nodeMeta) error {
	switch {
	case meta.Inc == m.inc && meta.RPC == m.tr.Addr():
		return nil
	case meta.Inc == m.inc:
		m.forged(n.Name, "gossip moves this node's ballot address", gossipAddr(n), meta.RPC, m.tr.Addr())
		return fmt.Errorf("%w: this node's ballot address moved to %s", errForgedGossip, meta.RPC)
	case meta.RPC == m.tr.Addr():
		return nil // this node's previous life: refuted
	case meta.Inc > m.inc:
		m.checkNamesake(Process{Gossip: gossipAddr(n), RPC: meta.RPC, Inc: meta.Inc}, "an alive message about this node from a later incarnation")
		return fmt.Errorf("%w: this node is incarnation %d, not %d", errRebind, m.inc, meta.Inc)
	}
	m.checkNamesake(Process{Gossip: gossipAddr(n), RPC: meta.RPC, Inc: meta.Inc}, "an alive message about this node from an earlier incarnation")
	return nil
}

// nameConflict is memberlist's ConflictDelegate: another process gossips
// existing's name from another address (under memberlist's lock).
func (m *Mesh) nameConflict(existing, other *memberlist.Node) {
	meta, _ := decodeMeta(other.Meta)
	p := Process{Gossip: gossipAddr(other), RPC: meta.RPC, Inc: meta.Inc}
	if existing.Name == m.cfg.Name {
		m.checkNamesake(p, "another gossip address claims this node's name")
		return
	}
	m.incr("gossip.name_conflict", 1)
	known := Process{Gossip: gossipAddr(existing)}
	if rpc, inc, _, ok := m.book.binding(existing.Name); ok {
		known.RPC, known.Inc = rpc, inc
	}
	m.noteConflict(existing.Name, "two gossip addresses claim it", known, p)
}

// checkNamesake probes a process that gossip says uses this node's name
// (at most one probe per address per second). If it answers as this node
// with its own incarnation, two processes share the name: both say so, and
// the one of the higher incarnation stops voting while the other answers.
// That is the later one unless the wall clocks disagree: nothing cheaper
// orders two processes on two machines without a clock (their ages would
// need a field in the probe's answer), and a wrong order costs the name's
// vote while both run (peers stay bound to one process and refuse the
// other's ballots, rule 3), never safety. Each makes sure the other knows,
// by a gossip push/pull with it.
func (m *Mesh) checkNamesake(p Process, why string) {
	if p.RPC == "" || p.RPC == m.tr.Addr() {
		return
	}
	ids := &m.book.ids
	now := time.Now()
	ids.mu.Lock()
	if ids.probed == nil {
		ids.probed = make(map[string]time.Time)
	}
	if t, ok := ids.probed[p.RPC]; (ok && now.Sub(t) < time.Second) || ids.inflight >= maxProbes || len(ids.probed) >= maxVets {
		ids.mu.Unlock()
		return
	}
	ids.probed[p.RPC] = now
	ids.inflight++
	ids.mu.Unlock()
	go func() {
		defer ids.endProbe()
		defer func() {
			ids.mu.Lock()
			for k, t := range ids.probed {
				if time.Since(t) > time.Minute {
					delete(ids.probed, k)
				}
			}
			ids.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), m.probeTimeout())
		inc, err := m.identify(ctx, m.cfg.Name, p.RPC)
		cancel()
		if err != nil || inc != p.Inc || inc == m.inc {
			if p.Inc > m.inc {
				m.forged(m.cfg.Name, "gossip names a later process of this node that does not answer", p.Gossip, p.RPC, m.tr.Addr())
			}
			return
		}
		me := Process{Gossip: m.addr, RPC: m.tr.Addr(), Inc: m.inc}
		m.noteConflict(m.cfg.Name, why, me, p)
		if inc < m.inc {
			until := time.Now().Add(ids.hold())
			if ids.down.Swap(until.UnixNano()) < time.Now().UnixNano() {
				m.log.Error("NOT VOTING: another process with this node's name, of a lower incarnation (started before this one, "+
					"unless the wall clocks disagree), is running; this one will not vote while it answers. Stop one of them", "other_rpc", p.RPC, "other_gossip", p.Gossip,
					"other_incarnation", inc, "incarnation", m.inc)
			}
			m.incr("identity.not_voting", 1)
		}
		if p.Gossip != "" && m.ml != nil && !m.isClosed() {
			ids.mu.Lock()
			last, ok := ids.probed["join "+p.Gossip]
			if !ok || time.Since(last) > ids.hold()/2 {
				ids.probed["join "+p.Gossip] = time.Now()
				ids.mu.Unlock()
				m.ml.Join([]string{p.Gossip})
				return
			}
			ids.mu.Unlock()
		}
	}()
}

// noteConflict records (and logs, loudly, once a minute per name) that
// name is used by two processes.
func (m *Mesh) noteConflict(name, why string, ps ...Process) {
	ids := &m.book.ids
	now := time.Now()
	ids.mu.Lock()
	if ids.conflicts == nil {
		ids.conflicts = make(map[string]*NameConflict)
	}
	c := ids.conflicts[name]
	if c == nil {
		if len(ids.conflicts) >= maxVets {
			ids.mu.Unlock()
			return
		}
		c = &NameConflict{Name: name}
		ids.conflicts[name] = c
	}
	c.Why, c.Seen = why, now
	for _, p := range ps {
		if i := slices.IndexFunc(c.Processes, func(q Process) bool {
			return (p.RPC != "" && q.RPC == p.RPC) || (p.Gossip != "" && q.Gossip == p.Gossip)
		}); i >= 0 {
			c.Processes[i] = mergeProcess(c.Processes[i], p)
		} else if len(c.Processes) < 8 {
			c.Processes = append(c.Processes, p)
		}
	}
	procs := slices.Clone(c.Processes)
	ids.mu.Unlock()
	m.incr("identity.conflict", 1)
	if m.noisy.allow("name conflict " + name) {
		m.log.Error("TWO PROCESSES USE ONE NODE NAME (a copied configuration, a node started twice, or a forgery); "+
			"a name votes once: the later process does not vote while the earlier one answers", "name", name, "why", why,
			"processes", fmt.Sprint(procs))
	}
}

func mergeProcess(a, b Process) Process {
	if a.Gossip == "" {
		a.Gossip = b.Gossip
	}
	if a.RPC == "" {
		a.RPC = b.RPC
	}
	if a.Inc == 0 {
		a.Inc = b.Inc
	}
	return a
}

// forged counts and logs (rate-limited) an alive message refused as
// forged.
func (m *Mesh) forged(name, why, gossip, claimed, bound string) {
	m.incr("gossip.refused.forged", 1)
	if m.noisy.allow("forged gossip " + name) {
		m.log.Warn("refusing forged gossip: "+why+" (someone with the gossip key, or on the network of a mesh without one, is trying to move a node)",
			"peer", name, "gossip", gossip, "claimed_rpc", claimed, "bound_rpc", bound)
	}
}

// notVoting reports whether this node, having found an earlier process
// with its name still running, answers ballots as a node that does not
// vote.
func (m *Mesh) notVoting() bool {
	return time.Now().UnixNano() < m.book.ids.down.Load()
}

// checkSender refuses a request whose ballots are of another incarnation
// than the one bound to its sender's name: a second process with that
// name (rule 3), whose votes would otherwise count as the first's.
func (m *Mesh) checkSender(req *quorum.Request) error {
	_, want, _, ok := m.book.binding(string(req.From))
	if !ok || want == 0 {
		return nil
	}
	for i := range req.Ops {
		b := &req.Ops[i].Ballot
		if b.Node == req.From && b.Incarnation != 0 && b.Incarnation != want {
			m.incr("rpc.wrong_incarnation", 1)
			m.logRefusal("wrong incarnation "+string(req.From),
				"refusing ballots from another process than the one this node knows by that name (a restart not yet seen, or a second process with its name)",
				"peer", req.From, "incarnation", b.Incarnation, "known", want)
			return fmt.Errorf("%w: %s's ballots are of incarnation %d; %s knows it as incarnation %d",
				errWrongIncarnation, req.From, b.Incarnation, m.name, want)
		}
	}
	return nil
}

// checkAnswer takes an answer from the voter dialed as to at addr only if
// it is signed to and by the incarnation bound to to. One of another
// incarnation at the bound address is a restart there: it is vetted as a
// rebind, and counted once the old process is found gone.
func (m *Mesh) checkAnswer(to quorum.NodeID, addr string, from quorum.NodeID, inc uint64) error {
	if from != to {
		return fmt.Errorf("%w: the answer of %s at %s is signed %s", errMalformed, to, addr, from)
	}
	rpc, want, _, ok := m.book.binding(string(to))
	if !ok || want == 0 || inc == want || inc == 0 {
		return nil
	}
	m.incr("rpc.wrong_incarnation", 1)
	if rpc == addr {
		m.maybeVet(string(to), rpc, want, inc)
	}
	return fmt.Errorf("%w: %s at %s answers as incarnation %d, bound to %d", errWrongIncarnation, to, addr, inc, want)
}

// maybeVet vets the process now at name's bound address as a rebind.
func (m *Mesh) maybeVet(name, rpc string, oldInc, inc uint64) {
	key := vetKey{name, inc, rpc}
	ids := &m.book.ids
	ids.mu.Lock()
	if ids.vets == nil {
		ids.vets = make(map[vetKey]*vet)
	}
	if v := ids.vets[key]; (v != nil && (!v.done || time.Now().Before(v.until))) || ids.inflight >= maxProbes || len(ids.vets) >= maxVets {
		ids.mu.Unlock()
		return
	}
	ids.vets[key] = &vet{}
	ids.inflight++
	ids.mu.Unlock()
	go m.vetRebind(key, rpc, oldInc, "")
}

// recent returns the name conflicts with recent evidence, by name.
func (ids *identities) recent() []NameConflict {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	var out []NameConflict
	for name, c := range ids.conflicts {
		if time.Since(c.Seen) > ids.hold() {
			delete(ids.conflicts, name)
			continue
		}
		cp := *c
		cp.Processes = slices.Clone(c.Processes)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b NameConflict) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func gossipAddr(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}
