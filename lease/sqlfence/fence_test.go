package sqlfence_test

import (
	"database/sql"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// wantStale fails t unless err is a *lease.StaleTokenError for key and token
// naming highest as the fence's token.
func wantStale(t *testing.T, err error, key string, token, highest uint64) {
	t.Helper()
	var se *lease.StaleTokenError
	if !errors.As(err, &se) || !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("token %d for %q: got %v, want a stale token error", token, key, err)
	}
	if *se != (lease.StaleTokenError{Key: key, Token: token, Highest: highest}) {
		t.Fatalf("stale error %+v, want key %q, token %d, highest %d", *se, key, token, highest)
	}
}

func TestStaleTokenIsRefusedAndChangesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		for _, w := range []struct {
			token uint64
			v     int64
		}{{5, 50}, {7, 70}} {
			if err := e.setValue("k", w.token, w.v); err != nil {
				t.Fatalf("token %d: %v", w.token, err)
			}
		}
		ran := false
		err := e.fence.Do(e.ctx, e.db, "k", 6, func(tx *sql.Tx) error {
			ran = true
			return e.writeTx(tx, "k", 6, 60)
		})
		wantStale(t, err, "k", 6, 7)
		if ran {
			t.Error("fn ran for a stale token")
		}
		if v := e.value(t, "k"); v != 70 {
			t.Errorf("value %d after the stale write, want 70", v)
		}
		if h, ok, err := e.fence.Highest(e.ctx, e.db, "k"); err != nil || !ok || h != 7 {
			t.Errorf("Highest = %d, %v, %v; want 7", h, ok, err)
		}
		if got := e.loggedTokens(t, "k"); !slices.Equal(got, []int64{5, 7}) {
			t.Errorf("committed writes %v, want [5 7]", got)
		}
	})
}

func TestEqualTokenWritesAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		for v := int64(1); v <= 3; v++ { // one holder, three writes under one grant
			if err := e.setValue("k", 42, v); err != nil {
				t.Fatalf("write %d under token 42: %v", v, err)
			}
		}
		if v := e.value(t, "k"); v != 3 {
			t.Errorf("value %d, want 3", v)
		}
	})
}

func TestLargestTokenFits(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		const top = uint64(1<<63 - 1)
		if err := e.setValue("k", top, 1); err != nil {
			t.Fatal(err)
		}
		wantStale(t, e.setValue("k", top-1, 2), "k", top-1, top)
	})
}

func TestKeysAreIndependent(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		if err := e.setValue("a", 10, 1); err != nil {
			t.Fatal(err)
		}
		if err := e.setValue("b", 3, 1); err != nil {
			t.Fatalf("key b refused token 3 after key a admitted 10: %v", err)
		}
		// Keys compare byte for byte: no case folding.
		if err := e.setValue("A", 1, 1); err != nil {
			t.Fatalf("key A refused token 1 after key a admitted 10: %v", err)
		}
		wantStale(t, e.setValue("a", 9, 2), "a", 9, 10)
		if err := e.setValue("b", 4, 2); err != nil {
			t.Fatalf("key b refused token 4 after key a refused 9: %v", err)
		}
	})
}

func TestFailedWriteRecordsNoToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		if err := e.setValue("k", 3, 30); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("validation failed")
		err := e.fence.Do(e.ctx, e.db, "k", 9, func(tx *sql.Tx) error {
			if err := e.writeTx(tx, "k", 9, 90); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Fatalf("Do returned %v, want fn's error unchanged", err)
		}
		if v := e.value(t, "k"); v != 30 {
			t.Errorf("value %d after a failed write, want 30 (rolled back)", v)
		}
		if h, _, _ := e.fence.Highest(e.ctx, e.db, "k"); h != 3 {
			t.Errorf("Highest %d after a failed write with 9, want 3", h)
		}
		if err := e.setValue("k", 4, 40); err != nil {
			t.Errorf("token 4 refused after the failed 9: %v", err)
		}
	})
}

// TestPanicRollsBackAndFreesTheKey: a panicking fn neither writes nor
// records its token, and leaves the fence row unlocked (a leaked
// transaction would make the next write wait forever).
func TestPanicRollsBackAndFreesTheKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic to go on up", r)
				}
			}()
			e.fence.Do(e.ctx, e.db, "k", 5, func(tx *sql.Tx) error {
				if err := e.writeTx(tx, "k", 5, 50); err != nil {
					t.Fatal(err)
				}
				panic("boom")
			})
		}()
		if _, ok, _ := e.fence.Highest(e.ctx, e.db, "k"); ok {
			t.Error("the panicking write's token was recorded")
		}
		if err := e.setValue("k", 1, 10); err != nil {
			t.Fatalf("the next write: %v", err)
		}
		if v := e.value(t, "k"); v != 10 {
			t.Errorf("value %d, want 10", v)
		}
	})
}

// TestConcurrentWritersNeverOverwriteNewer starts writers with tokens 1..n
// at once, in shuffled order, each writing its token to one key. Whatever
// the interleaving, the committed writes' tokens never go down, the highest
// token is never refused and is the value left, and every refusal names a
// higher token than the one refused.
func TestConcurrentWritersNeverOverwriteNewer(t *testing.T) {
	const writers, rounds = 12, 4
	eachBackend(t, func(t *testing.T, e *env) {
		rng := rand.New(rand.NewPCG(1, 2))
		for round := range rounds {
			key := string(rune('a' + round))
			tokens := rng.Perm(writers)
			var (
				start   = make(chan struct{})
				wg      sync.WaitGroup
				mu      sync.Mutex
				refused []uint64
			)
			for _, p := range tokens {
				token := uint64(p + 1)
				wg.Go(func() {
					<-start
					err := e.setValue(key, token, int64(token))
					var se *lease.StaleTokenError
					switch {
					case errors.As(err, &se):
						if se.Highest <= token {
							t.Errorf("token %d refused with highest %d", token, se.Highest)
						}
						mu.Lock()
						refused = append(refused, token)
						mu.Unlock()
					case err != nil:
						t.Errorf("token %d: %v", token, err)
					}
				})
			}
			close(start)
			wg.Wait()
			got := e.loggedTokens(t, key)
			if !slices.IsSorted(got) {
				t.Fatalf("round %d: a lower token's write landed after a higher one's: committed %v", round, got)
			}
			if len(got) == 0 || got[len(got)-1] != writers {
				t.Fatalf("round %d: committed %v, want the last to be token %d", round, got, writers)
			}
			if v := e.value(t, key); v != writers {
				t.Fatalf("round %d: value %d, want %d", round, v, writers)
			}
			if len(got)+len(refused) != writers {
				t.Fatalf("round %d: %d committed + %d refused, want %d", round, len(got), len(refused), writers)
			}
			t.Logf("round %d: committed %v, refused %d", round, got, len(refused))
		}
	})
}

// TestReadModifyWriteLosesNoUpdate: goroutines increment one counter by
// reading it and writing it back plus one, inside the fenced transaction.
// With one token for all (one holder's workers), every increment lands;
// with a new, higher token for each increment (grants racing one another),
// some are refused, and the counter equals the increments that were not.
func TestReadModifyWriteLosesNoUpdate(t *testing.T) {
	const workers, each = 6, 15
	for _, tc := range []struct {
		name      string
		nextToken func(*atomic.Uint64) uint64
	}{
		{"one token", func(*atomic.Uint64) uint64 { return 7 }},
		{"rising tokens", func(c *atomic.Uint64) uint64 { return c.Add(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				var (
					tokens    atomic.Uint64
					committed atomic.Int64
					wg        sync.WaitGroup
				)
				for range workers {
					wg.Go(func() {
						for range each {
							err := e.fence.Do(e.ctx, e.db, "counter", tc.nextToken(&tokens), func(tx *sql.Tx) error {
								return increment(e, tx, "counter")
							})
							switch {
							case err == nil:
								committed.Add(1)
							case !errors.Is(err, lease.ErrStaleToken):
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				n := committed.Load()
				if v := e.value(t, "counter"); v != n {
					t.Fatalf("counter %d after %d committed increments: updates lost", v, n)
				}
				if tc.name == "one token" && n != workers*each {
					t.Fatalf("%d of %d increments committed under one token", n, workers*each)
				}
				t.Logf("%d of %d increments committed", n, workers*each)
			})
		})
	}
}

// increment reads key's value (0 when absent) and writes it back plus one.
func increment(e *env, tx *sql.Tx, key string) error {
	var v int64
	err := tx.QueryRowContext(e.ctx, e.q("SELECT v FROM ledger WHERE k = ?"), key).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	_, err = tx.ExecContext(e.ctx, e.q(
		"INSERT INTO ledger (k, v, token) VALUES (?, ?, 0) ON CONFLICT (k) DO UPDATE SET v = excluded.v"), key, v+1)
	return err
}

func TestHighest(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		if h, ok, err := e.fence.Highest(e.ctx, e.db, "k"); err != nil || ok || h != 0 {
			t.Fatalf("Highest of a new key = %d, %v, %v; want 0, false, nil", h, ok, err)
		}
		for _, tok := range []uint64{4, 9, 9} {
			if err := e.setValue("k", tok, 1); err != nil {
				t.Fatal(err)
			}
			if h, ok, err := e.fence.Highest(e.ctx, e.db, "k"); err != nil || !ok || h != tok {
				t.Fatalf("Highest = %d, %v, %v; want %d", h, ok, err, tok)
			}
		}
	})
}

// TestAdmitTxInTheCallersTransaction: a stale AdmitTx leaves nothing of the
// fence changed even if the caller commits anyway; an admitted one records
// its token when the caller commits, and not before.
func TestAdmitTxInTheCallersTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		if err := e.setValue("k", 10, 1); err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStale(t, e.fence.AdmitTx(e.ctx, tx, "k", 8), "k", 8, 10)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if h, _, _ := e.fence.Highest(e.ctx, e.db, "k"); h != 10 {
			t.Fatalf("Highest %d after a stale AdmitTx committed, want 10", h)
		}

		tx, err = e.db.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.fence.AdmitTx(e.ctx, tx, "k", 11); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if h, _, _ := e.fence.Highest(e.ctx, e.db, "k"); h != 10 {
			t.Fatalf("Highest %d after an AdmitTx rolled back, want 10", h)
		}
	})
}

func TestExecFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.exec(t, "CREATE TABLE invoices (id bigint PRIMARY KEY, total bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)")
		e.exec(t, "INSERT INTO invoices (id, total) VALUES (7, 0)")
		update := e.q("UPDATE invoices SET total = ?, fence = ? WHERE id = ? AND fence <= ?")
		write := func(token uint64, total int64) error {
			return sqlfence.ExecFenced(e.ctx, e.db, "invoice/7", token, update, total, int64(token), 7, int64(token))
		}
		for _, w := range []struct {
			token uint64
			total int64
		}{{5, 100}, {5, 110}, {6, 120}} {
			if err := write(w.token, w.total); err != nil {
				t.Fatalf("token %d: %v", w.token, err)
			}
		}
		wantStale(t, write(5, 999), "invoice/7", 5, 0)
		var total int64
		if err := e.db.QueryRowContext(e.ctx, "SELECT total FROM invoices WHERE id = 7").Scan(&total); err != nil || total != 120 {
			t.Fatalf("total %d (%v) after the stale write, want 120", total, err)
		}

		// The upsert form writes a row that is not there yet and refuses
		// a stale token for one that is.
		upsert := e.q("INSERT INTO invoices AS i (id, total, fence) VALUES (?, ?, ?)" +
			" ON CONFLICT (id) DO UPDATE SET total = excluded.total, fence = excluded.fence WHERE i.fence <= excluded.fence")
		if err := sqlfence.ExecFenced(e.ctx, e.db, "invoice/8", 3, upsert, 8, 300, 3); err != nil {
			t.Fatalf("upsert of a new row: %v", err)
		}
		wantStale(t, sqlfence.ExecFenced(e.ctx, e.db, "invoice/8", 2, upsert, 8, 200, 2), "invoice/8", 2, 0)
	})
}
