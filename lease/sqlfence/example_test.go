package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// exampleDB opens a SQLite database in a new temporary directory; the
// returned function closes it and removes the directory.
func exampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "sqlfence-example-")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Two holders of the lock "counter" increment a counter, reading it inside
// the fenced transaction. The first one was paused past its lease; the
// second, granted a higher token, wrote meanwhile; the first one's late
// write is refused and changes nothing.
func ExampleFence_Do() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()

	fence, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	if err != nil {
		panic(err)
	}
	if err := fence.CreateTable(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE counter (id integer PRIMARY KEY, n integer NOT NULL);
		INSERT INTO counter VALUES (1, 0)`); err != nil {
		panic(err)
	}

	increment := func(token uint64) error {
		return fence.Do(ctx, db, "counter", token, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE counter SET n = ? WHERE id = 1`, n+1)
			return err
		})
	}
	fmt.Println(increment(41)) // the first holder
	fmt.Println(increment(42)) // its lease ran out; the next holder
	err = increment(41)        // the first holder wakes up
	fmt.Println(err)
	fmt.Println(errors.Is(err, lease.ErrStaleToken))

	var n int
	db.QueryRow(`SELECT n FROM counter`).Scan(&n)
	fmt.Println("counter:", n)
	// Output:
	// <nil>
	// <nil>
	// lease: stale token 41 for "counter": highest seen is 42
	// true
	// counter: 2
}

// The one-statement form, for a table that keeps the token in its own row:
// the UPDATE checks it, and zero rows affected means a higher token wrote.
func ExampleExecFenced() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE invoices (id integer PRIMARY KEY, total integer NOT NULL, fence integer NOT NULL DEFAULT 0);
		INSERT INTO invoices (id, total) VALUES (7, 0)`); err != nil {
		panic(err)
	}

	setTotal := func(token uint64, total int) error {
		return sqlfence.ExecFenced(ctx, db, "invoice/7", token,
			`UPDATE invoices SET total = ?1, fence = ?2 WHERE id = 7 AND fence <= ?2`, total, int64(token))
	}
	fmt.Println(setTotal(8, 100))
	fmt.Println(setTotal(9, 120))
	fmt.Println(setTotal(8, 999))

	var total int
	db.QueryRow(`SELECT total FROM invoices WHERE id = 7`).Scan(&total)
	fmt.Println("total:", total)
	// Output:
	// <nil>
	// <nil>
	// lease: stale token 8 for "invoice/7": a higher token was seen
	// total: 120
}

// A migration tool takes the fence table's DDL as text.
func ExampleFence_DDL() {
	fence, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "locks.fence"})
	if err != nil {
		panic(err)
	}
	fmt.Println(fence.DDL() + ";")
	// Output:
	// CREATE TABLE IF NOT EXISTS locks.fence (
	// 	lock_key text PRIMARY KEY,
	// 	token bigint NOT NULL CHECK (token > 0)
	// );
}
