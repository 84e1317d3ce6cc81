package sqlfence_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lockmesh/lockmesh/lease"
)

// What PostgreSQL's locking adds, shown with two transactions at once.

// waitForLockWaiters waits until n sessions of db wait for a lock, so that
// a test knows a Do is queued behind a transaction before it ends that
// transaction.
func waitForLockWaiters(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var waiting int
		err := e.db.QueryRowContext(e.ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after %v, want %d", waiting, testTimeout, n)
		}
		select {
		case <-e.ctx.Done():
			t.Fatal(e.ctx.Err())
		case <-time.After(5 * time.Millisecond): // polling pg_stat_activity: PostgreSQL has no lock-wait notification
		}
	}
}

// TestPostgresQueuesWritersOnTheFenceRow: while a transaction holds key's
// fence row with token 10, a lower token's Do and a higher token's Do both
// wait; once it commits, the lower one is refused and the higher one is
// admitted (READ COMMITTED re-reads the row after the wait).
func TestPostgresQueuesWritersOnTheFenceRow(t *testing.T) {
	e := newEnv(t, backends[1])
	if err := e.setValue("k", 5, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := e.fence.AdmitTx(e.ctx, tx, "k", 10); err != nil {
		t.Fatal(err)
	}

	lower, higher := make(chan error, 1), make(chan error, 1)
	go func() { lower <- e.setValue("k", 9, 9) }()
	waitForLockWaiters(t, e, 1)
	go func() { higher <- e.setValue("k", 11, 11) }()
	waitForLockWaiters(t, e, 2)

	if err := e.writeTx(tx, "k", 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The lower token may wake before or after the higher one has
	// committed: PostgreSQL retries an upsert whose row changed while it
	// waited, and the higher one can take the row in between.
	var se *lease.StaleTokenError
	if err := <-lower; !errors.As(err, &se) || se.Highest != 10 && se.Highest != 11 {
		t.Fatalf("token 9 after 10 committed: %v, want it refused naming 10 or 11", err)
	}
	if err := <-higher; err != nil {
		t.Fatalf("token 11 after 10 committed: %v", err)
	}
	if got := e.loggedTokens(t, "k"); len(got) != 3 || got[0] != 5 || got[1] != 10 || got[2] != 11 {
		t.Fatalf("committed writes %v, want [5 10 11]", got)
	}
}

// TestPostgresRepeatableReadFailsToSerialize: under REPEATABLE READ, a
// transaction whose fence row was changed after its snapshot cannot admit
// even a higher token: PostgreSQL reports a serialization failure (40001),
// which the caller retries. The package documentation says so.
func TestPostgresRepeatableReadFailsToSerialize(t *testing.T) {
	e := newEnv(t, backends[1])
	if err := e.setValue("k", 5, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.BeginTx(e.ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var v int64
	if err := tx.QueryRowContext(e.ctx, "SELECT v FROM ledger WHERE k = 'k'").Scan(&v); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	if err := e.setValue("k", 6, 2); err != nil {
		t.Fatal(err)
	}
	err = e.fence.AdmitTx(e.ctx, tx, "k", 7)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("AdmitTx after a concurrent admission, under REPEATABLE READ: %v, want SQLSTATE 40001", err)
	}
	if errors.Is(err, lease.ErrStaleToken) {
		t.Fatal("a serialization failure reported as a stale token")
	}
}

// TestPostgresIdleTimeoutEndsAFrozenHolder: a holder stalls inside Do,
// holding the fence row, while a newer holder waits for the row. With
// idle_in_transaction_session_timeout set, PostgreSQL ends the stalled
// session: the newer holder writes, and the stalled one's Do fails with
// nothing of it committed.
func TestPostgresIdleTimeoutEndsAFrozenHolder(t *testing.T) {
	e := newEnv(t, backends[1])
	conn, err := e.db.Conn(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(e.ctx, "SET idle_in_transaction_session_timeout = '200ms'"); err != nil {
		t.Fatal(err)
	}
	newer := make(chan error, 1)
	err = e.fence.Do(e.ctx, conn, "k", 5, func(tx *sql.Tx) error {
		if err := e.writeTx(tx, "k", 5, 5); err != nil {
			return err
		}
		go func() { newer <- e.setValue("k", 6, 6) }() // waits for our row lock
		if err := <-newer; err != nil {                // the "pause": until the newer holder is through
			t.Errorf("the newer holder: %v", err)
		}
		return nil
	})
	if err == nil {
		t.Fatal("the stalled holder's Do succeeded after its session was ended")
	}
	if got := e.loggedTokens(t, "k"); len(got) != 1 || got[0] != 6 {
		t.Fatalf("committed writes %v, want only the newer holder's [6]", got)
	}
	t.Logf("the stalled holder's Do: %v", err)
}
