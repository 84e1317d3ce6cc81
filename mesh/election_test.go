package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Candidates on three nodes lead in turn; an observer on a fourth sees
// every leader, in order, with growing tokens and the leader's value, and
// nobody leading between two; Leader agrees at each step.
//
// Before a leader shows, the observer may see what its campaign did on
// the way: a round whose answers came too late (under load) leaves a grant
// to the candidate that the campaign takes over with a new token, or
// frees. Those states are the candidate's own, with tokens between the
// last leader's and its own, in order (CI saw both: a free state, and the
// candidate holding under a lower token).
func TestObserveSeesEveryLeaderInOrder(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 1})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaders, err := c.nodes[3].Observe(ctx, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := next(t, leaders, 5*time.Second, "the first state", func(l Leader) bool { return !l.Held })
	var (
		tokens []uint64
		prev   = first.Token // the last leader's token
	)
	for i := range 6 {
		m := c.nodes[i%3]
		addr := fmt.Sprintf("%s:%d", m.Name(), 8000+i)
		lead, err := m.Campaign(ctx, "scheduler", []byte(addr))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(tokens); n > 0 && lead.Token() <= tokens[n-1] {
			t.Fatalf("leadership %d has token %d after %d", i, lead.Token(), tokens[n-1])
		}
		tokens = append(tokens, lead.Token())
		_, seen := next(t, leaders, 5*time.Second, "leader "+addr, func(l Leader) bool {
			return l.Held && l.Node == m.Name() && l.Token == lead.Token() && string(l.Value) == addr
		})
		for j, l := range seen {
			if l.Token < prev || l.Token > lead.Token() || (j > 0 && l.Token < seen[j-1].Token) ||
				(l.Held && (l.Node != m.Name() || string(l.Value) != addr)) ||
				(!l.Held && l.Token == prev) {
				t.Fatalf("leadership %d: observed %+v on the way to %s with token %d and value %q (the last token %d)",
					i, seen, m.Name(), lead.Token(), addr, prev)
			}
		}
		if len(seen) > 1 {
			t.Logf("leadership %d: the observer saw the campaign on its way: %+v", i, seen)
		}
		prev = lead.Token()
		if got, err := c.nodes[(i+1)%3].Leader(ctx, "scheduler"); err != nil || got.Node != m.Name() || got.Token != lead.Token() {
			t.Fatalf("Leader elsewhere: %+v, %v", got, err)
		}
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		l, seen := next(t, leaders, 5*time.Second, "no leader", func(l Leader) bool { return true })
		if len(seen) != 1 || l.Held || l.Token != lead.Token() {
			t.Fatalf("after leadership %d resigned: observed %+v", i, seen)
		}
	}
	if _, err := c.nodes[0].Leader(ctx, "scheduler"); !errors.Is(err, ErrNoLeader) {
		t.Errorf("Leader with nobody leading: %v", err)
	}
	t.Logf("six leaders in turn, tokens %v", tokens)
}

// RunElection's leader context ends before another node can lead: a
// leader cut off from the voters stops (its ctx ends) before the next
// leader's OnStartedLeading starts, and every leader's token is higher
// than the one before.
func TestRunElectionEndsLeadershipBeforeTheNext(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, proposers: 2})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type leadership struct {
		node  string
		token uint64
		ctx   context.Context
	}
	var (
		mu      sync.Mutex
		history []leadership
		overlap []string
		started = make(chan leadership, 16)
		stopped = make(chan string, 16)
		newest  = make(chan Leader, 64)
	)
	run := func(m *Mesh, rctx context.Context) {
		m.RunElection(rctx, ElectionConfig{
			Name: "leader", Value: []byte(m.Name()),
			OnStartedLeading: func(lctx context.Context) {
				h, _ := m.Holder(context.Background(), "leader")
				mu.Lock()
				for _, p := range history {
					if p.ctx.Err() == nil {
						overlap = append(overlap, fmt.Sprintf("%s started leading while %s's leader context was still live", m.Name(), p.node))
					}
				}
				me := leadership{m.Name(), h.Token, lctx}
				history = append(history, me)
				mu.Unlock()
				started <- me
				<-lctx.Done()
			},
			OnStoppedLeading: func() { stopped <- m.Name() },
			OnNewLeader: func(l Leader) {
				select {
				case newest <- l:
				default:
				}
			},
		})
	}
	a, b := c.nodes[3], c.nodes[4]
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	go run(a, actx)
	first := <-started
	if first.node != "node3" {
		t.Fatalf("first leader %s", first.node)
	}
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	go run(b, bctx)
	// Cut the leader off from every voter: it cannot renew.
	c.net.Partition([]string{"node3"}, []string{"node0", "node1", "node2", "node4"})
	var second leadership
	select {
	case second = <-started:
	case <-ctx.Done():
		t.Fatal("nobody took over from a leader cut off from the voters")
	}
	if second.node != "node4" || second.token <= first.token {
		t.Fatalf("second leader %s with token %d after %d", second.node, second.token, first.token)
	}
	if name := <-stopped; name != "node3" {
		t.Errorf("OnStoppedLeading ran on %s", name)
	}
	// node4's OnNewLeader reports its own leadership. Observe runs on
	// RunElection's ctx, so wait for the report before ending that ctx.
	var seen []string
	for !slices.Contains(seen, "node4") {
		select {
		case l := <-newest:
			if l.Held {
				seen = append(seen, l.Node)
			}
		case <-ctx.Done():
			t.Fatalf("OnNewLeader never reported node4: %v", seen)
		}
	}
	c.net.Heal()
	// Ending RunElection's ctx ends the leadership, which another takes.
	bcancel()
	var third leadership
	select {
	case third = <-started:
	case <-ctx.Done():
		t.Fatal("the leader whose ctx ended did not hand over")
	}
	if third.node != "node3" || third.token <= second.token {
		t.Fatalf("third leader %s with token %d after %d", third.node, third.token, second.token)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, o := range overlap {
		t.Error(o)
	}
	acancel()
}
