package mesh

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// AutopilotConfig makes the mesh look after its voters, as Consul's
// autopilot does: a voter that gossip has shown dead for DeadAfter is
// replaced by a healthy node that does not vote yet (added first, then the
// dead one removed, so that a majority stays alive throughout), or, when no
// such node exists, removed as long as Min voters remain; and while there
// are fewer voters than Target, healthy nodes are added.
//
// Gossip only suggests: every change is a decision of a majority of the
// voters (AddVoter, RemoveVoter), taken by one node at a time (the alive
// voter with the lowest name; if two think they are it, their changes are
// ordered by the quorum and the second finds its work done). A healthy
// voter is never removed.
type AutopilotConfig struct {
	// DeadAfter is how long a voter must stay dead (or left) in gossip
	// before it is replaced. Zero means 30s. Keep it well above
	// memberlist's suspicion time, so that a slow node is not replaced.
	DeadAfter time.Duration
	// Target is the number of voters to keep: 3 or 5 usually. Zero means
	// 3.
	Target int
	// Min is the fewest voters to shrink to when a dead voter cannot be
	// replaced. Zero means a majority of Target.
	Min int
	// Interval is how often the autopilot looks. Zero means 1s.
	Interval time.Duration
}

func (a *AutopilotConfig) validate() error {
	if a == nil {
		return nil
	}
	c := a.withDefaults()
	switch {
	case a.DeadAfter < 0 || a.Interval < 0:
		return fmt.Errorf("%w: Autopilot: negative duration", ErrInvalidConfig)
	case c.Target < 1 || c.Target > maxVoters:
		return fmt.Errorf("%w: Autopilot.Target %d outside [1, %d]", ErrInvalidConfig, c.Target, maxVoters)
	case c.Min < 1 || c.Min > c.Target:
		return fmt.Errorf("%w: Autopilot.Min %d outside [1, Target %d]", ErrInvalidConfig, c.Min, c.Target)
	}
	return nil
}

func (a AutopilotConfig) withDefaults() AutopilotConfig {
	if a.DeadAfter == 0 {
		a.DeadAfter = 30 * time.Second
	}
	if a.Target == 0 {
		a.Target = 3
	}
	if a.Min == 0 {
		a.Min = a.Target/2 + 1
	}
	if a.Interval == 0 {
		a.Interval = time.Second
	}
	return a
}

func (m *Mesh) autopilotLoop() {
	defer m.wg.Done()
	if m.cfg.Autopilot == nil {
		return
	}
	ap := m.cfg.Autopilot.withDefaults()
	t := time.NewTicker(ap.Interval)
	defer t.Stop()
	deadSince := make(map[string]time.Time)
	for {
		select {
		case <-m.closed:
			return
		case <-t.C:
		}
		m.autopilotStep(ap, deadSince, time.Now())
	}
}

// autopilotStep makes at most one change.
func (m *Mesh) autopilotStep(ap AutopilotConfig, deadSince map[string]time.Time, now time.Time) {
	cur := m.current.Load()
	if cur == nil {
		return
	}
	peers := make(map[string]namedPeer)
	for _, p := range m.book.snapshot() {
		peers[p.name] = p
	}
	alive := func(name string) bool {
		if name == m.cfg.Name {
			return true
		}
		p, ok := peers[name]
		return ok && p.state == "alive"
	}
	var dead []string
	pilot := ""
	for _, v := range cur.Voters {
		name := string(v)
		if alive(name) {
			delete(deadSince, name)
			if pilot == "" {
				pilot = name // voters are sorted: the lowest alive name
			}
			continue
		}
		if _, seen := peers[name]; !seen {
			continue // never seen in gossip: not known to be dead
		}
		if _, ok := deadSince[name]; !ok {
			deadSince[name] = now
		}
		if now.Sub(deadSince[name]) >= ap.DeadAfter {
			dead = append(dead, name)
		}
	}
	for name := range deadSince {
		if !cur.IsVoter(quorum.NodeID(name)) {
			delete(deadSince, name)
		}
	}
	if pilot != m.cfg.Name {
		return
	}
	if v := m.voting.Load(); v == nil || !v.Voter || v.Acceptor != quorum.Live {
		return // a pilot that cannot vote yet leaves it to the next look
	}
	var candidates []string
	for _, p := range peers {
		if p.state == "alive" && !p.meta.NoVote && p.meta.RPC != "" && p.meta.Config == cur.ID &&
			!cur.IsVoter(quorum.NodeID(p.name)) && !slices.Contains(cur.Retired, quorum.NodeID(p.name)) {
			candidates = append(candidates, p.name)
		}
	}
	slices.Sort(candidates)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := len(cur.Voters)
	var err error
	var what string
	switch {
	case cur.Pending:
		// A change left half made (its node died): finish it.
		what = "finishing an unfinished voter change"
		err = m.changeVoters(ctx, quorum.NodeID(m.cfg.Name), m.inc, "")
	case len(dead) > 0 && len(candidates) > 0 && n <= ap.Target:
		what = fmt.Sprintf("adding %s to replace dead voter %s", candidates[0], dead[0])
		err = m.AddVoter(ctx, candidates[0])
	case len(dead) > 0 && n > ap.Min:
		what = fmt.Sprintf("removing voter %s, dead for %v", dead[0], now.Sub(deadSince[dead[0]]).Round(time.Second))
		err = m.RemoveVoter(ctx, dead[0])
	case n < ap.Target && len(candidates) > 0:
		what = fmt.Sprintf("adding %s (%d voters, target %d)", candidates[0], n, ap.Target)
		err = m.AddVoter(ctx, candidates[0])
	default:
		return
	}
	if err != nil {
		m.log.Warn("autopilot: change failed; trying again later", "change", what, "error", err)
		m.incr("autopilot.failures", 1)
		return
	}
	m.log.Info("autopilot", "change", what)
	m.incr("autopilot.changes", 1)
}
