package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/transport"
)

// addNode starts one more node in c: with founding voters (the same list as
// the others) or, when founding is nil, with none (it learns the current
// configuration from the mesh).
func (c *cluster) addNode(name string, founding []string, tweak func(*Config)) *Mesh {
	c.t.Helper()
	cfg := DefaultLocalConfig()
	cfg.Name = name
	cfg.Voters = founding
	cfg.Seed = int64(len(c.nodes) + 1)
	cfg.DataDir = c.dataDir(name)
	if testing.Verbose() {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Name: name})
	}
	cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
		return c.net.Listen(name, h)
	}
	var addrs []string
	for _, m := range c.live() {
		addrs = append(addrs, m.Addr())
	}
	cfg.Seeds = addrs
	if tweak != nil {
		tweak(cfg)
	}
	m, err := New(cfg)
	if err != nil {
		c.t.Fatalf("starting %s: %v", name, err)
	}
	m.Join(addrs...)
	c.nodes = append(c.nodes, m)
	c.names = append(c.names, name)
	return m
}

// waitConfig waits until m knows a configuration with exactly these voters,
// settled.
func waitConfig(t testing.TB, m *Mesh, voters ...string) Configuration {
	t.Helper()
	slices.Sort(voters)
	var got Configuration
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to know voters %v", m.Name(), voters), func() bool {
		var err error
		got, err = m.Voters()
		return err == nil && !got.Pending && slices.Equal(got.Voters, voters)
	})
	return got
}

// Every voter of a 3-voter mesh is replaced, one by one, by a new machine,
// while workers on every node keep taking a few keys and incrementing a
// counter behind a fence. Each old voter is shut down for good once it is
// removed. No update may be lost, the resource must see strictly increasing
// tokens per key, and the mesh must end on the new machines alone, still
// granting.
func TestReplaceEveryVoter(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, dataDirs: true})
	c.waitVoting()
	founders := slices.Clone(c.names)
	var fresh []*Mesh
	for i := 0; i < 3; i++ {
		// New machines know nothing of the voters: they learn them.
		fresh = append(fresh, c.addNode(fmt.Sprintf("new%d", i), nil, nil))
	}
	c.waitMembers()
	for _, m := range fresh {
		waitConfig(t, m, founders...)
	}

	keys := []string{"a", "b", "c"}
	fence := lease.NewFence()
	var mu sync.Mutex
	counters := make(map[string]int)
	lastToken := make(map[string]uint64)
	var done, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	worker := func(m *Mesh, w int) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := keys[(w+i)%len(keys)]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := m.Acquire(ctx, key, WaitBehindOwnLease()) // workers of one node take turns too
			if err != nil {
				cancel()
				if errors.Is(err, ErrClosed) {
					return // this machine is gone
				}
				failed.Add(1)
				errs <- fmt.Errorf("%s acquire %s: %w", m.Name(), key, err)
				continue
			}
			err = fence.Apply(key, l.Token(), func() error {
				mu.Lock()
				defer mu.Unlock()
				if l.Token() <= lastToken[key] {
					return fmt.Errorf("token %d after %d on %q", l.Token(), lastToken[key], key)
				}
				lastToken[key] = l.Token()
				counters[key]++
				return nil
			})
			if err != nil && !errors.Is(l.Err(), ErrClosed) {
				errs <- fmt.Errorf("%s write under a live lease: %w", m.Name(), err)
			} else if err == nil {
				done.Add(1)
			}
			if err := l.Release(ctx); err != nil && !errors.Is(err, ErrClosed) {
				errs <- fmt.Errorf("%s release: %w", m.Name(), err)
			}
			cancel()
		}
	}
	for _, m := range c.nodes {
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go worker(m, w)
		}
	}
	// Let the workers get going on the founders' configuration.
	waitFor(t, 20*time.Second, "work under the founding voters", func() bool { return done.Load() >= 20 })

	voters := slices.Clone(founders)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		caller := fresh[(i+1)%3] // a non-voter, or a new voter, asks
		start := time.Now()
		if err := caller.AddVoter(ctx, fresh[i].Name()); err != nil {
			t.Fatalf("adding %s: %v", fresh[i].Name(), err)
		}
		added := time.Since(start)
		voters = append(voters, fresh[i].Name())
		if got := waitConfig(t, caller, voters...); !slices.Contains(got.Voters, fresh[i].Name()) {
			t.Fatalf("after adding %s: %v", fresh[i].Name(), got.Voters)
		}
		start = time.Now()
		old := c.nodes[i]
		if err := caller.RemoveVoter(ctx, old.Name()); err != nil {
			t.Fatalf("removing %s: %v", old.Name(), err)
		}
		removed := time.Since(start)
		cancel()
		voters = slices.DeleteFunc(voters, func(v string) bool { return v == old.Name() })
		waitConfig(t, caller, voters...)
		t.Logf("replaced %s by %s: add %v, remove %v; %d increments so far", old.Name(), fresh[i].Name(),
			added.Round(time.Millisecond), removed.Round(time.Millisecond), done.Load())
		old.Shutdown() // the old machine is gone for good
		before := done.Load()
		waitFor(t, 20*time.Second, "more work after the change", func() bool { return done.Load() >= before+10 })
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	final := waitConfig(t, fresh[0], "new0", "new1", "new2")
	for _, f := range founders {
		if !slices.Contains(final.Retired, f) {
			t.Errorf("founder %s is not listed as retired: %v", f, final.Retired)
		}
	}
	for _, m := range fresh {
		if st := m.Status(); st.VotingState != Live {
			t.Errorf("%s is %v, want live", m.Name(), st.VotingState)
		}
	}
	total := 0
	for _, k := range keys {
		total += counters[k]
	}
	if int64(total) != done.Load() {
		t.Fatalf("counted %d increments, %d were made: an update was lost", total, done.Load())
	}
	// The new machines alone grant, with tokens above every earlier one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range keys {
		l, err := fresh[2].Acquire(ctx, k)
		if err != nil {
			t.Fatalf("acquire %s on the new voters alone: %v", k, err)
		}
		if l.Token() <= lastToken[k] {
			t.Fatalf("%s: token %d after %d", k, l.Token(), lastToken[k])
		}
		l.Release(ctx)
	}
	t.Logf("%d increments, %d failed acquires, config version %d", total, failed.Load(), final.Version)
}

// A removed voter restarted with the founding list, and a current voter
// restarted the same way, learn the current configuration from the mesh:
// the first votes no more (it still takes locks), the second votes again
// after its quarantine and catch-up. Neither grants on the old
// configuration.
func TestRestartWithOldConfiguration(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, dataDirs: true})
	c.waitVoting()
	founders := slices.Clone(c.names)
	n3 := c.addNode("node3", founders, nil)
	c.waitMembers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.nodes[1].AddVoter(ctx, "node3"); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].RemoveVoter(ctx, "node0"); err != nil {
		t.Fatal(err)
	}
	current := waitConfig(t, n3, "node1", "node2", "node3")
	l, err := n3.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	// node0 (removed) and node2 (a voter) restart with the founding list.
	c.nodes[0].Shutdown()
	c.nodes[2].Shutdown()
	r0 := c.addNode("node0", founders, nil)
	r2 := c.addNode("node2", founders, nil)
	for _, m := range []*Mesh{r0, r2} {
		got := waitConfig(t, m, "node1", "node2", "node3")
		if got.ID != current.ID {
			t.Fatalf("%s learned configuration %d, want %d", m.Name(), got.ID, current.ID)
		}
	}
	waitFor(t, 30*time.Second, "node2 to vote again", func() bool { return r2.Status().VotingState == Live })
	if st := r0.Status(); st.VotingState != NotVoter {
		t.Fatalf("removed node0 votes (%v)", st.VotingState)
	}
	// The held lease is still held: no node granted k on the old voters.
	if _, err := r0.TryAcquire(ctx, "k"); !errors.Is(err, ErrLocked) {
		t.Fatalf("try-acquire of a held key on the restarted node0: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := r0.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("the removed node takes locks as a non-voter: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	l2.Release(ctx)
}

// The changes that are not allowed fail with clear errors and change
// nothing.
func TestVoterChangeErrors(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 1, proposers: 1, dataDirs: true})
	c.waitVoting()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[0].AddVoter(ctx, "nobody"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("adding a node that never joined: %v", err)
	}
	if err := c.nodes[1].RemoveVoter(ctx, "node0"); !errors.Is(err, ErrBadVoterChange) {
		t.Fatalf("removing the only voter: %v", err)
	}
	if err := c.nodes[1].AddVoter(ctx, "node0"); err != nil {
		t.Fatalf("adding a voter again should do nothing: %v", err)
	}
	if err := c.nodes[0].AddVoter(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[0].RemoveVoter(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	err := c.nodes[0].AddVoter(ctx, "node1")
	if !errors.Is(err, ErrBadVoterChange) {
		t.Fatalf("adding a removed voter back: %v", err)
	}
	t.Logf("refused: %v", err)
	got := waitConfig(t, c.nodes[1], "node0")
	if got.Version != 5 { // two changes, each written pending and settled
		t.Fatalf("configuration version %d, want 5", got.Version)
	}
	if _, err := c.nodes[0].Acquire(ctx, "\x00voters"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("acquiring the configuration register: %v", err)
	}
}

// failingCalls wraps a transport so that a test can make its calls fail
// and know when none is in flight.
type failingCalls struct {
	transport.Transport
	fail     atomic.Bool
	inFlight atomic.Int64
	failed   atomic.Int64
}

func (f *failingCalls) Call(ctx context.Context, node, addr string, body []byte) ([]byte, error) {
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	if f.fail.Load() {
		f.failed.Add(1)
		return nil, fmt.Errorf("%w: the test refuses calls", transport.ErrConnClosed)
	}
	return f.Transport.Call(ctx, node, addr, body)
}

func (f *failingCalls) Go(node, addr string, body []byte, timeout time.Duration, done func([]byte, error)) error {
	if f.fail.Load() {
		f.failed.Add(1)
		return fmt.Errorf("%w: the test refuses calls", transport.ErrConnClosed)
	}
	f.inFlight.Add(1)
	err := transport.Go(f.Transport, node, addr, body, timeout, func(reply []byte, err error) {
		defer f.inFlight.Add(-1)
		done(reply, err)
	})
	if err != nil {
		f.inFlight.Add(-1)
	}
	return err
}

// A node that starts knowing no voters asks a voter that gossip shows for
// the configuration. When those first fetches fail and the mesh is quiet
// afterwards, no gossip update comes to trigger another: the node must try
// again on its own, and learn the configuration once calls go through.
func TestConfigFetchRetriedInQuietMesh(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	var tr *failingCalls
	late := c.addNode("late", nil, func(cfg *Config) {
		cfg.Transport = func(name string, h transport.Handler) (transport.Transport, error) {
			mt, err := c.net.Listen(name, h)
			if err != nil {
				return nil, err
			}
			tr = &failingCalls{Transport: mt}
			tr.fail.Store(true)
			return tr, nil
		}
	})
	c.waitMembers()
	// Every fetch that gossip's join notices started has failed.
	waitFor(t, 10*time.Second, "late's fetches to fail", func() bool {
		return tr.failed.Load() > 0 && tr.inFlight.Load() == 0
	})
	if _, err := late.Voters(); err == nil {
		t.Fatal("late knows a configuration although every fetch failed")
	}
	failed := tr.failed.Load()
	tr.fail.Store(false)
	waitConfig(t, late, c.names[:3]...)
	t.Logf("late learned the configuration after %d failed fetches", failed)
}

// A node publishes its gossip metadata from several places at once (a
// configuration adopted at start, another learned from a peer a moment
// later). memberlist's UpdateNode is not safe for concurrent calls, so the
// node's calls take turns; under -race this test fails when they do not.
func TestConcurrentMetadataPublishing(t *testing.T) {
	// One node: with nobody to gossip to, UpdateNode does not wait for
	// its broadcast, and the calls overlap as much as they can.
	c := newCluster(t, clusterOpts{voters: 1})
	c.waitVoting()
	m := c.nodes[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				m.publishMeta()
			}
		})
	}
	wg.Wait()
	// And what gossip now carries for the node is its metadata.
	got, err := decodeMeta(m.ml.LocalNode().Meta)
	m.metaMu.Lock()
	want := m.meta
	m.metaMu.Unlock()
	if err != nil || got != want {
		t.Fatalf("gossip carries %+v (%v), want %+v", got, err, want)
	}
}
