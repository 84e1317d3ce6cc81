package quorum

import (
	"slices"
	"strings"
	"time"
)

// Listing the keys held mesh-wide: every voter answers, bucket by bucket,
// with its registers of the keys that start with a prefix (ListHolders),
// and the lister merges the answers of a majority (MergeListing). A key's
// state is settled by the answers as an observer settles it
// (proposer_observe.go): a majority reports one accepted ballot, and the
// highest any reports shows the same holder, token and value; or every
// voter that reports the key, a majority of them, shows one. A register a
// voter copied in a catch-up (Entry.Copy) is no vote: the value it copied
// may never have been chosen (an accept that reached one voter, copied by
// a voter that restarted), so it counts toward neither majority, though
// it ranks as its ballot does and, held, keeps the key unsettled. A key
// the answers do not settle is to be read (Read) before it is listed.

// ListHolders answers a listing (CatchUpRequest with List and Holders):
// the registers of the bucket's keys that start with req.Prefix and hold
// an accepted value, each with its accepted ballot, value and time left,
// and whether it is a copy. A node that does not vote answers as to a
// catch-up.
func (n *Node) ListHolders(req *CatchUpRequest) *CatchUpResponse {
	if n.acc == nil || n.quiet {
		return NoAcceptorCatchUp(n.m, n.id, n.inc, req)
	}
	return n.acc.listHolders(req)
}

func (a *Acceptor) listHolders(req *CatchUpRequest) *CatchUpResponse {
	resp := &CatchUpResponse{Config: a.m.ID, From: a.cfg.ID, To: req.From, Inc: a.cfg.Incarnation,
		Bucket: req.Bucket, List: true}
	switch {
	case req.Config != a.m.ID:
		resp.Status = StatusWrongConfig
		m := a.m.clone()
		resp.Members = &m
		return resp
	case a.state != Live:
		resp.Status = StatusRecovering
		return resp
	case req.Buckets == 0 || req.Bucket >= req.Buckets:
		return resp
	}
	now := a.clock.Now()
	for key, r := range a.regs {
		if key == ConfigKey || r.accepted.IsZero() || !strings.HasPrefix(key, req.Prefix) || bucketOf(key, req.Buckets) != req.Bucket {
			continue
		}
		resp.Entries = append(resp.Entries, Entry{Key: key, Accepted: r.accepted, Value: r.value, Remaining: r.remaining(now),
			Copy: a.rules.listsCopy(a, r)})
	}
	slices.SortFunc(resp.Entries, func(x, y Entry) int { return strings.Compare(x.Key, y.Key) })
	return resp
}

// Listed is a key held, as a listing found it.
type Listed struct {
	Key   string
	Value Value
	// Remaining is the longest time a voter's timer of the grant had to
	// run when it answered, on its own clock.
	Remaining time.Duration
}

// MergeListing merges the listing answers of the voters of m (by voter:
// the entries of every bucket it answered, each voter counted only if it
// answered every bucket). It returns the keys the answers settle as held
// by a live lease, sorted, and the keys they leave unsettled (a read
// decides those); ok is false when fewer than a majority answered.
func MergeListing(m Membership, answers map[NodeID][]Entry) (held []Listed, unsettled []string, ok bool) {
	voters := 0
	byKey := make(map[string][]Entry)
	for _, id := range m.Voters {
		entries, answered := answers[id]
		if !answered {
			continue
		}
		voters++
		for _, e := range entries {
			byKey[e.Key] = append(byKey[e.Key], e)
		}
	}
	q := m.Majority()
	if voters < q {
		return nil, nil, false
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		es := byKey[k]
		hi := es[0]
		votes := 0
		count := make(map[Ballot]int, len(es))
		for _, e := range es {
			if hi.Accepted.Less(e.Accepted) {
				hi = e
			}
			if !e.Copy {
				count[e.Accepted]++
				votes++
			}
		}
		settled := false
		for _, e := range es {
			if !e.Copy && count[e.Accepted] >= q && sameContent(e.Value, hi.Value) {
				settled = true
			}
		}
		if !settled && votes >= q {
			settled = !slices.ContainsFunc(es, func(e Entry) bool { return !sameContent(e.Value, hi.Value) })
		}
		switch {
		case !settled:
			if slices.ContainsFunc(es, func(e Entry) bool { return e.Value.Held }) {
				unsettled = append(unsettled, k)
			}
		case hi.Value.Held:
			l := Listed{Key: k, Value: hi.Value}
			for _, e := range es {
				if e.Value.sameGrant(hi.Value) {
					l.Remaining = max(l.Remaining, e.Remaining)
				}
			}
			if l.Remaining > 0 {
				held = append(held, l)
			}
		}
	}
	return held, unsettled, true
}
