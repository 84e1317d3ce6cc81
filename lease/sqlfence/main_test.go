package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/internal/pgtest"
	"github.com/lockmesh/lockmesh/lease/sqlfence"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, no cgo
)

// pg is the PostgreSQL server of this package's tests, started by the first
// test that needs it (see pgtest for when it skips or fails).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// testTimeout bounds each test's database work: a hung lock fails the test
// instead of the whole run.
const testTimeout = 60 * time.Second

// backend is a database the property tests run against.
type backend struct {
	name    string
	dialect sqlfence.Dialect
	open    func(testing.TB) *sql.DB
	serial  string // the column type of an auto-incremented key
}

var backends = []backend{
	{name: "sqlite", dialect: sqlfence.SQLite, open: openSQLite, serial: "integer PRIMARY KEY AUTOINCREMENT"},
	{name: "postgres", dialect: sqlfence.PostgreSQL, open: pg.DB, serial: "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"},
}

// openSQLite opens a new database file. Every connection of the pool waits
// up to 10s for the write lock instead of failing with SQLITE_BUSY, and
// writes a WAL so that readers do not wait for writers. The transactions
// begin DEFERRED (the driver's default): the fence's upsert comes first,
// which takes the write lock before anything is read.
func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "test.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// env is one backend's database with a fresh fence and the tables the
// tests write: ledger (a value per key) and writes (each committed write,
// in commit order).
type env struct {
	backend
	db    *sql.DB
	fence *sqlfence.Fence
	ctx   context.Context
}

// eachBackend runs test once per backend, as subtests.
func eachBackend(t *testing.T, test func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			test(t, newEnv(t, b))
		})
	}
}

func newEnv(t testing.TB, b backend) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	e := &env{backend: b, db: b.open(t), ctx: ctx}
	f, err := sqlfence.New(sqlfence.Config{Dialect: b.dialect})
	if err != nil {
		t.Fatal(err)
	}
	e.fence = f
	if err := f.CreateTable(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(ctx, e.db); err != nil { // IF NOT EXISTS: a second run is harmless
		t.Fatalf("CreateTable again: %v", err)
	}
	e.exec(t, "CREATE TABLE ledger (k text PRIMARY KEY, v bigint NOT NULL, token bigint NOT NULL)")
	e.exec(t, "CREATE TABLE writes (seq "+b.serial+", k text NOT NULL, token bigint NOT NULL, v bigint NOT NULL)")
	return e
}

// q rewrites ? placeholders as $1, $2... for PostgreSQL.
func (e *env) q(query string) string {
	if e.dialect != sqlfence.PostgreSQL {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (e *env) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := e.db.ExecContext(e.ctx, e.q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// value reads key's value in the ledger (-1 if it has no row).
func (e *env) value(t testing.TB, key string) int64 {
	t.Helper()
	v := int64(-1)
	err := e.db.QueryRowContext(e.ctx, e.q("SELECT v FROM ledger WHERE k = ?"), key).Scan(&v)
	if err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	return v
}

// loggedTokens returns the tokens of key's committed writes, in commit order.
func (e *env) loggedTokens(t testing.TB, key string) []int64 {
	t.Helper()
	rows, err := e.db.QueryContext(e.ctx, e.q("SELECT token FROM writes WHERE k = ? ORDER BY seq"), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// setValue is a fenced write: it sets key's value and logs the write, both
// in fn's transaction.
func (e *env) setValue(key string, token uint64, v int64) error {
	return e.fence.Do(e.ctx, e.db, key, token, func(tx *sql.Tx) error {
		return e.writeTx(tx, key, token, v)
	})
}

// writeTx writes key's value and logs it, in tx.
func (e *env) writeTx(tx *sql.Tx, key string, token uint64, v int64) error {
	_, err := tx.ExecContext(e.ctx, e.q(
		"INSERT INTO ledger (k, v, token) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v, token = excluded.token"),
		key, v, int64(token))
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(e.ctx, e.q("INSERT INTO writes (k, token, v) VALUES (?, ?, ?)"), key, int64(token), v)
	return err
}
