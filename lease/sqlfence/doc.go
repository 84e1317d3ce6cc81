// Package sqlfence fences writes to a SQL database with lockmesh's fencing
// tokens, through database/sql. It is lease.Fence for a resource that many
// processes write: the highest token admitted for each key lives in a table
// of the database itself, and the check, the caller's writes and the
// recording of the token commit in one transaction.
//
//	fence, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.PostgreSQL})
//	err = fence.CreateTable(ctx, db) // once, or run fence.DDL() in a migration
//
//	l, err := m.Acquire(ctx, "invoice/7")
//	err = fence.Do(ctx, db, l.Key(), l.Token(), func(tx *sql.Tx) error {
//		var total int64
//		if err := tx.QueryRowContext(ctx, `SELECT total FROM invoices WHERE id = 7`).Scan(&total); err != nil {
//			return err
//		}
//		_, err := tx.ExecContext(ctx, `UPDATE invoices SET total = $1 WHERE id = 7`, total+10)
//		return err
//	})
//	if errors.Is(err, lease.ErrStaleToken) {
//		// our lease ended and a newer holder has written: stop
//	}
//
// # What Do does
//
// Do begins a transaction and, as its first statement, upserts the key's
// row of the fence table: the row takes our token unless it holds a higher
// one. The statement locks the row until the transaction ends. If the row
// held a higher token, Do rolls back and returns a *lease.StaleTokenError
// naming it; fn never runs. Otherwise fn runs in the same transaction, and Do
// commits. A writer with a higher token that comes meanwhile waits for the
// commit and then goes ahead; one with a lower token waits and is then
// refused. So, for one key, no write under a lower token can commit after a
// write under a higher one, and a transaction that fails records nothing.
// Keys are independent: each has its own row and its own lock.
//
// The fence protects what is written through it. Every writer of the data
// a key guards must go through Do (or AdmitTx) with that key; a process that
// writes the same rows without it is not fenced.
//
// # Read inside the transaction
//
// Data the write depends on must be read through tx, inside fn. A value read
// before Do may change before Do begins: the previous holder's fenced write,
// admitted before our grant, may still be in flight and commit after our
// read; another goroutine may write under the same token. Writing counter+1
// from a counter read outside would then undo that write, and the fence would
// admit it, since our token is the highest. Inside fn, the fence row is
// locked by us, every earlier fenced writer of the key has committed or
// rolled back, and no later one can commit until we do.
//
// # Isolation levels
//
// PostgreSQL, READ COMMITTED (its default): each statement sees what was
// committed before it began, and fn's statements begin after the fence's
// upsert has waited for every earlier writer of the key. The upsert's row
// lock does the work of SELECT ... FOR UPDATE in one round trip. Under
// REPEATABLE READ or SERIALIZABLE (through AdmitTx), the snapshot is taken by
// the transaction's first statement, before any wait: if another writer of
// the key commits meanwhile, the upsert fails with a serialization failure
// (SQLSTATE 40001) rather than proceed on an old snapshot. Retry the whole
// transaction then, as with any serialization failure.
//
// MySQL (InnoDB, REPEATABLE READ by default): the upsert and a locking read
// (SELECT ... FOR UPDATE) take the row; a plain SELECT in fn then takes its
// snapshot at fn's first read, after the lock, so it sees earlier writers'
// commits. Two transactions creating the same key's row at once can be
// chosen as a deadlock victim (error 1213), once per key at most: retry.
// Nothing here reads rows affected, so CLIENT_FOUND_ROWS does not matter to
// Do; it matters to ExecFenced.
//
// SQLite has one writer at a time. A DEFERRED transaction (database/sql's
// BeginTx with the usual drivers) that reads first and writes later can fail
// with SQLITE_BUSY at its first write, when another connection wrote
// meanwhile: the busy timeout does not help there. Do's first statement is
// the fence's upsert, a write, so the transaction takes the write lock before
// it reads anything, as BEGIN IMMEDIATE would, and fn's reads see the last
// commit. Set a busy timeout on every connection (modernc.org/sqlite:
// _pragma=busy_timeout(10000) in the DSN; mattn/go-sqlite3: _busy_timeout),
// so that writers wait for each other instead of failing, and consider WAL
// mode (_pragma=journal_mode(WAL)) so readers do not wait for writers. With
// AdmitTx, call it before any read of the transaction for the same reason.
//
// # A holder frozen inside Do
//
// A pause that comes after the upsert and before the commit freezes a
// transaction that holds the key's fence row: fencing still holds (nothing
// of it commits if a newer holder wrote first, and a newer holder waits
// rather than write under it), but the key's newer holders wait for as long
// as the pause lasts. Bound that wait on the server: PostgreSQL's
// idle_in_transaction_session_timeout ends the frozen session and rolls its
// transaction back (the woken holder then finds its connection closed), and
// lock_timeout bounds each waiter; MariaDB has idle_transaction_timeout,
// MySQL only innodb_lock_wait_timeout for the waiters. SQLite's write lock
// belongs to the frozen process, and every writer of the file waits for it
// (SQLITE_BUSY after the busy timeout) until it resumes or dies.
//
// # The fence table
//
// One row per key: lock_key (the key, compared byte for byte) and token (a
// BIGINT). DDL gives the statement for the dialect; for PostgreSQL:
//
//	CREATE TABLE IF NOT EXISTS lockmesh_fence (
//		lock_key text PRIMARY KEY,
//		token bigint NOT NULL CHECK (token > 0)
//	)
//
// MySQL uses varbinary(512), so that no collation folds case, and SQLite a
// WITHOUT ROWID table. A row is never deleted: forgetting a key would let an
// old token in again. Tokens fit: lockmesh issues them from a count of
// microseconds since 1970 (about 2⁵¹), far below 2⁶³.
//
// # One statement, with the token in your own row
//
// A table that keeps its own fence column needs no fence table: the write
// checks the token in its WHERE clause, and zero rows affected means refused.
// ExecFenced runs such a statement and reports zero rows as stale:
//
//	ALTER TABLE invoices ADD COLUMN fence bigint NOT NULL DEFAULT 0;
//
//	err := sqlfence.ExecFenced(ctx, db, "invoice/7", l.Token(),
//		`UPDATE invoices SET total = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
//		total, int64(l.Token()), 7)
//
// This fences one row per statement, and the new value must not depend on
// an earlier read (total must not be computed from a total read before):
// for read-modify-write, use Do. MySQL reports rows changed rather than rows
// matched unless the client sets CLIENT_FOUND_ROWS (see ExecFenced).
package sqlfence
