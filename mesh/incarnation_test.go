package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// clockBack sets a node's wall clock an hour back (a clock stepped back
// across a restart), and its MaxTTL to twice its TTL: a setting of the new
// process that its peers learn only from its own gossip.
func clockBack(cfg *Config) {
	cfg.WallClock = func() time.Time { return time.Now().Add(-time.Hour) }
	cfg.MaxTTL = 2 * cfg.Timing.TTL
}

// waitRebound waits until every other live node of c binds m's name to m's
// incarnation and has heard m's own gossip (its MaxTTL: m took its name
// back), and returns how long that took.
func waitRebound(t *testing.T, c *cluster, m *Mesh) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, 10*time.Second, m.Name()+"'s peers to bind it to its new process and hear its gossip", func() bool {
		for _, p := range c.live() {
			if p == m {
				continue
			}
			_, inc, _, ok := p.book.binding(m.Name())
			meta, _ := p.book.peerMeta(m.Name())
			theirs, _ := meta.Settings()
			if !ok || inc != m.inc || theirs.MaxTTL != m.cfg.MaxTTL {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// noConflicts fails the test if a live node of c shows a name conflict.
func noConflicts(t *testing.T, c *cluster) {
	t.Helper()
	for _, m := range c.live() {
		if cs := m.Status().Security.NameConflicts; len(cs) > 0 {
			t.Errorf("%s shows name conflicts: %+v", m.Name(), cs)
		}
	}
}

// A voter restarts, without a data directory, with its wall clock an hour
// back: its new incarnation is lower than its old one. Its peers rebind it
// at once (its old process is gone: nobody answers as it), it takes its
// name back in gossip, it takes a lock (its peers take its ballots), and
// nobody sees a name conflict. Gossip of its earlier life that comes late,
// whose incarnation is the higher, is refused, again without a conflict.
// Before, peers refused the new life's gossip as older than the live one
// and the node would not refute its earlier life's: bound to the old
// process, they refused its ballots.
func TestRestartWithWallClockBackIsRebound(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	old := c.nodes[2]
	old.metaMu.Lock()
	oldMeta, err := old.meta.encode()
	old.metaMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	oldNode := *old.ml.LocalNode()
	m := c.restartNodeWith(2, false, clockBack)
	if m.inc >= old.inc {
		t.Fatalf("with the clock an hour back, incarnation %d after %d", m.inc, old.inc)
	}
	took := waitRebound(t, c, m)
	t.Logf("rebound everywhere %v after the restart", took.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := m.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("the restarted node takes a lock: %v", err)
	}
	l.Release(ctx)

	// Its earlier life's gossip, late.
	peer := c.nodes[0]
	stale := &memberlist.Node{Name: "node2", Addr: oldNode.Addr, Port: oldNode.Port, Meta: oldMeta}
	if err := peer.checkAlive(stale); !errors.Is(err, errRebind) {
		t.Fatalf("the earlier life's gossip: %v, want it refused while vetted", err)
	}
	key := vetKey{"node2", old.inc, old.tr.Addr()}
	waitFor(t, 10*time.Second, "the vet of the earlier life's gossip", func() bool {
		ids := &peer.book.ids
		ids.mu.Lock()
		defer ids.mu.Unlock()
		v := ids.vets[key]
		return v != nil && v.done
	})
	if _, bound, _, _ := peer.book.binding("node2"); bound != m.inc {
		t.Errorf("the earlier life's gossip moved node2's binding to %d", bound)
	}
	noConflicts(t, c)
}

// With a data directory, a restart's incarnation is above the earlier
// life's even with the wall clock an hour back, and the directory's state
// file is left in the format an earlier release reads.
func TestDataDirIncarnationAboveEarlierLives(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3, dataDirs: true})
	c.waitVoting()
	old := c.nodes[1].inc
	m := c.restartNodeWith(1, false, clockBack)
	if m.inc <= old {
		t.Fatalf("with a data directory and the clock an hour back, incarnation %d after %d", m.inc, old)
	}
	waitRebound(t, c, m)
	noConflicts(t, c)
	b, err := os.ReadFile(filepath.Join(c.dataDir("node1"), incarnationFile))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := decodeIncarnation(b); err != nil || s.Incarnation != m.inc || s.Node != "node1" {
		t.Errorf("the incarnation file holds %+v, %v; want node1's %d", s, err, m.inc)
	}
	if b, err := os.ReadFile(filepath.Join(c.dataDir("node1"), stateFile)); err != nil || !bytes.HasPrefix(b, []byte("lockmesh-state 1 ")) {
		t.Errorf("the state file: %v, %.40q", err, b)
	}
}

// The incarnation file: each life's incarnation is the wall clock's, or
// one above the last if the clock is behind; a later release's fields are
// skipped; a corrupt file, one of another node or of a newer format is
// refused and left as it was. The state file is not written (a release
// that does not know the incarnation file reads the directory as before).
func TestIncarnationFile(t *testing.T) {
	dir := t.TempDir()
	d, _, err := openDataDir(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	for _, step := range []struct{ wall, want uint64 }{{100, 100}, {50, 101}, {101, 102}, {1000, 1000}} {
		if got, err := d.nextIncarnation(step.wall); err != nil || got != step.want {
			t.Fatalf("wall clock at %d: incarnation %d, %v; want %d", step.wall, got, err, step.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a state file was written: %v", err)
	}

	name := filepath.Join(dir, incarnationFile)
	later, _ := encodeIncarnation(&savedIncarnation{Node: "a", Incarnation: 2000})
	later = bytes.Replace(later, []byte(`"node"`), []byte(`"later": [1, 2],`+"\n  "+`"node"`), 1)
	later = fixSum(t, later)
	if err := os.WriteFile(name, later, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := d.nextIncarnation(5); err != nil || got != 2001 {
		t.Errorf("after a later release's file: %d, %v; want 2001", got, err)
	}

	good, _ := os.ReadFile(name)
	other, _ := encodeIncarnation(&savedIncarnation{Node: "b", Incarnation: 7})
	newer := bytes.Replace(good, []byte(incarnationFile+" 1 "), []byte(incarnationFile+" 9 "), 1)
	for what, b := range map[string][]byte{
		"edited": flip(good), "torn": good[:len(good)/2], "of node b": other, "of a newer format": newer,
		"of incarnation 0": fixSum(t, bytes.Replace(good, []byte("2001"), []byte("0"), 1)),
	} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := d.nextIncarnation(5)
		if !errors.Is(err, ErrDataDir) {
			t.Errorf("%s: %v, want ErrDataDir", what, err)
		}
		if now, _ := os.ReadFile(name); !bytes.Equal(now, b) {
			t.Errorf("%s: the file was changed", what)
		}
		if what == "of node b" && !strings.Contains(fmtErr(err), `"b"`) {
			t.Errorf("%s: the error does not name the node: %v", what, err)
		}
	}
}

// fixSum rewrites b's header with the checksum of its body, as an edit
// that keeps the file consistent would.
func fixSum(t *testing.T, b []byte) []byte {
	t.Helper()
	line, body, _ := bytes.Cut(b, []byte("\n"))
	var format int
	var sum uint32
	if _, err := fmt.Sscanf(string(line), incarnationFile+" %d %08x", &format, &sum); err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("%s %d %08x\n", incarnationFile, format, crc32.ChecksumIEEE(body))
	return append([]byte(head), body...)
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
