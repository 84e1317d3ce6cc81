package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
)

// listBuckets is how many pieces a listing asks each voter for, so that
// no answer carries every key at once.
const listBuckets = 16

// Locks lists the locks held now whose keys start with prefix (all of
// them for ""), sorted by key: holder, token, value, and about how long
// each lease had left (TimeLeft, on the voters' clocks). It asks every
// voter for its registers (listBuckets calls each, in parallel) and
// merges the answers of a majority: a key is listed when they settle it
// as held by a live lease (as Watch settles a state), and read first
// (as Holder reads) when they do not. So each listed lock was held at
// some moment during the call; a lock taken or released while the call
// runs may or may not be listed. It costs a voter one pass over its
// registers per call: an operator's tool, not a hot path. It returns
// ErrNoQuorum when fewer than a majority of the voters answered, and
// ErrUpgradeRequired while a node of an earlier protocol version is in
// the mesh.
func (m *Mesh) Locks(ctx context.Context, prefix string) ([]Holder, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	if len(prefix) > wire.MaxPrefixLen || !utf8.ValidString(prefix) {
		return nil, fmt.Errorf("%w: a prefix of %d bytes, or not UTF-8", ErrInvalidKey, len(prefix))
	}
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := m.valuesAllowed(); err != nil {
		return nil, err
	}
	cfg := m.current.Load()
	if cfg == nil {
		return nil, ErrNoVoters
	}
	var (
		mu      sync.Mutex
		answers = make(map[quorum.NodeID][]quorum.Entry)
		wg      sync.WaitGroup
	)
	for _, v := range cfg.Voters {
		wg.Go(func() {
			entries, err := m.listFrom(ctx, *cfg, prefix, v)
			if err != nil {
				m.log.Debug("listing locks", "voter", v, "error", err)
				return
			}
			mu.Lock()
			answers[v] = entries
			mu.Unlock()
		})
	}
	wg.Wait()
	held, unsettled, ok := quorum.MergeListing(*cfg, answers)
	if !ok {
		m.incr("quorum.failures", 1)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("listing locks: %w (%w)", ErrNoQuorum, err)
		}
		return nil, fmt.Errorf("listing locks: %w: %d of %d voters answered", ErrNoQuorum, len(answers), len(cfg.Voters))
	}
	out := make([]Holder, 0, len(held)+len(unsettled))
	for _, l := range held {
		out = append(out, shown(holderOf(l.Key, l.Value, true, l.Remaining)))
	}
	for _, key := range unsettled {
		h, err := m.Holder(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("listing locks: reading %s: %w", quoteKey(key), err)
		}
		if h.Held {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Holder) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// listFrom asks voter v for every bucket of its registers under prefix.
func (m *Mesh) listFrom(ctx context.Context, cfg quorum.Membership, prefix string, v quorum.NodeID) ([]quorum.Entry, error) {
	var entries []quorum.Entry
	for b := uint32(0); b < listBuckets; b++ {
		req := &quorum.CatchUpRequest{Config: cfg.ID, From: m.name, To: v, Bucket: b, Buckets: listBuckets,
			List: true, Holders: true, Prefix: prefix}
		resp, err := m.listBucket(ctx, req)
		if err != nil {
			return nil, err
		}
		if resp.Status != quorum.StatusOK || resp.Config != cfg.ID {
			return nil, fmt.Errorf("voter %s answered %v (configuration %d)", v, resp.Status, resp.Config)
		}
		entries = append(entries, resp.Entries...)
	}
	return entries, nil
}

// listBucket sends one listing request: to this node's own voter
// directly, to another over the ballot transport.
func (m *Mesh) listBucket(ctx context.Context, req *quorum.CatchUpRequest) (*quorum.CatchUpResponse, error) {
	if req.To == m.name {
		var resp *quorum.CatchUpResponse
		m.drive(func(n *quorum.Node) { resp = n.ListHolders(req) })
		if resp == nil {
			return nil, ErrClosed
		}
		return resp, nil
	}
	addr, ok := m.book.rpcAddr(string(req.To))
	if !ok {
		return nil, fmt.Errorf("voter %s: no address yet", req.To)
	}
	if m.peerVersion(string(req.To)) < wire.Version3 {
		return nil, fmt.Errorf("voter %s: %w", req.To, ErrUpgradeRequired)
	}
	body, err := encode(kindCatchUp, req)
	if err != nil {
		return nil, err
	}
	reply, err := m.tr.Call(ctx, string(req.To), addr, body)
	if err != nil {
		return nil, err
	}
	resp, err := m.lim.decodeCatchUpReply(reply)
	if err == nil {
		err = m.checkAnswer(req.To, addr, resp.From, resp.Inc)
	}
	if err != nil {
		m.incr("rpc.malformed", 1)
		return nil, err
	}
	return resp, nil
}

// answerListing answers another node's listing (Locks) with this voter's
// registers.
func (m *Mesh) answerListing(req *quorum.CatchUpRequest) ([]byte, error) {
	var resp *quorum.CatchUpResponse
	m.drive(func(n *quorum.Node) { resp = n.ListHolders(req) })
	if resp == nil {
		return nil, fmt.Errorf("mesh: %s has no voter configuration yet", m.name)
	}
	return encode(kindCatchUpReply, resp)
}
