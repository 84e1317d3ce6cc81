package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/lockmesh/lockmesh/lease/sqlfence"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, no cgo
)

// lockKey is the one lock of the demo, and the fence's key for the counter.
const lockKey = "counter"

// openStore opens the shared SQLite file in dir. Every connection waits up
// to 10s for the write lock (the processes take turns writing), and the
// file is in WAL mode so that readers do not wait for writers.
func openStore(dir string) (*sql.DB, *sqlfence.Fence, error) {
	path := filepath.Join(dir, "counter.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, err
	}
	fence, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, fence, nil
}

// createSchema makes the fence table, the counter, and the log of committed
// writes (one row per increment, written in the increment's transaction).
func createSchema(ctx context.Context, db *sql.DB, fence *sqlfence.Fence) error {
	if err := fence.CreateTable(ctx, db); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `
		CREATE TABLE counter (id integer PRIMARY KEY CHECK (id = 1), value integer NOT NULL);
		INSERT INTO counter VALUES (1, 0);
		CREATE TABLE writes (
			seq integer PRIMARY KEY AUTOINCREMENT,
			token integer NOT NULL,
			value integer NOT NULL,
			node text NOT NULL
		)`)
	return err
}

// increment adds one to the counter under token: it reads the counter and
// writes counter+1 in the transaction that admits the token, and logs the
// write there too. It returns the new value, or a *lease.StaleTokenError if
// a higher token has written.
//
// The read is inside the transaction on purpose: read before it, the value
// could be one that the previous holder's write, still in flight, was about
// to replace.
func increment(ctx context.Context, db *sql.DB, fence *sqlfence.Fence, node string, token uint64) (int64, error) {
	var v int64
	err := fence.Do(ctx, db, lockKey, token, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT value FROM counter WHERE id = 1`).Scan(&v); err != nil {
			return err
		}
		v++
		if _, err := tx.ExecContext(ctx, `UPDATE counter SET value = ? WHERE id = 1`, v); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO writes (token, value, node) VALUES (?, ?, ?)`, int64(token), v, node)
		return err
	})
	return v, err
}

// audit is what the file says at the end.
type audit struct {
	counter int64 // the counter's value
	writes  int64 // rows in the log of committed writes
	first   uint64
	last    uint64 // tokens of the first and last committed writes
	grants  int    // distinct tokens among the committed writes
}

// check reads the file and returns an error if a committed write's token is
// lower than an earlier one's (a stale write accepted), or if the logged
// values are not 1, 2, 3... in commit order (an update lost or repeated).
func check(ctx context.Context, db *sql.DB) (audit, error) {
	var a audit
	if err := db.QueryRowContext(ctx, `SELECT value FROM counter WHERE id = 1`).Scan(&a.counter); err != nil {
		return a, err
	}
	rows, err := db.QueryContext(ctx, `SELECT token, value FROM writes ORDER BY seq`)
	if err != nil {
		return a, err
	}
	defer rows.Close()
	for rows.Next() {
		var tok uint64
		var v int64
		if err := rows.Scan(&tok, &v); err != nil {
			return a, err
		}
		a.writes++
		switch {
		case tok < a.last:
			return a, fmt.Errorf("stale write accepted: write %d has token %d, after a write with token %d", a.writes, tok, a.last)
		case v != a.writes:
			return a, fmt.Errorf("lost update: write %d set the counter to %d", a.writes, v)
		}
		if a.writes == 1 {
			a.first = tok
		}
		if tok != a.last {
			a.grants++
		}
		a.last = tok
	}
	if err := rows.Err(); err != nil {
		return a, err
	}
	if a.counter != a.writes {
		return a, fmt.Errorf("lost update: the counter is %d after %d logged writes", a.counter, a.writes)
	}
	return a, nil
}
