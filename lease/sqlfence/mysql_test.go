package sqlfence_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// No MySQL server runs in these tests: the MySQL dialect is checked by the
// text of its statements and by the order and arguments in which Do sends
// them, through a recording driver that answers the locking read with a
// scripted token. PostgreSQL and SQLite run for real in the other tests.

func TestMySQLStatements(t *testing.T) {
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.MySQL, Table: "app.fences"})
	if err != nil {
		t.Fatal(err)
	}
	wantDDL := "CREATE TABLE IF NOT EXISTS app.fences (\n" +
		"\tlock_key varbinary(512) NOT NULL PRIMARY KEY,\n" +
		"\ttoken bigint NOT NULL,\n" +
		"\tCHECK (token > 0)\n) ENGINE=InnoDB"
	if f.DDL() != wantDDL {
		t.Errorf("DDL:\n%s\nwant:\n%s", f.DDL(), wantDDL)
	}

	d := &recorder{token: 7}
	err = f.Do(context.Background(), sql.OpenDB(d), "invoices/7", 7, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE invoices SET total = ? WHERE id = ?", 120, 7)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"BEGIN",
		"INSERT INTO app.fences (lock_key, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, ?) [invoices/7 7 7]",
		"SELECT token FROM app.fences WHERE lock_key = ? FOR UPDATE [invoices/7]",
		"UPDATE invoices SET total = ? WHERE id = ? [120 7]",
		"COMMIT",
	}
	if got := d.statements(); !slices.Equal(got, want) {
		t.Errorf("statements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMySQLStaleTokenIsReadUnderTheLock: the locking read finds a higher
// token than the upsert offered: Do reports it, runs nothing, rolls back.
func TestMySQLStaleTokenIsReadUnderTheLock(t *testing.T) {
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	d := &recorder{token: 9}
	ran := false
	err = f.Do(context.Background(), sql.OpenDB(d), "k", 7, func(*sql.Tx) error { ran = true; return nil })
	wantStale(t, err, "k", 7, 9)
	if ran {
		t.Error("fn ran for a stale token")
	}
	if got := d.statements(); got[len(got)-1] != "ROLLBACK" {
		t.Errorf("last statement %q, want ROLLBACK", got[len(got)-1])
	}
}

func TestPostgreSQLAndSQLiteStatements(t *testing.T) {
	for _, tc := range []struct {
		d           sqlfence.Dialect
		ddl, admits string
	}{
		{sqlfence.PostgreSQL,
			"CREATE TABLE IF NOT EXISTS lockmesh_fence (\n\tlock_key text PRIMARY KEY,\n\ttoken bigint NOT NULL CHECK (token > 0)\n)",
			"INSERT INTO lockmesh_fence AS f (lock_key, token) VALUES ($1, $2) ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token RETURNING f.token [k 7]"},
		{sqlfence.SQLite,
			"CREATE TABLE IF NOT EXISTS lockmesh_fence (\n\tlock_key text NOT NULL PRIMARY KEY,\n\ttoken integer NOT NULL CHECK (token > 0)\n) WITHOUT ROWID",
			"INSERT INTO lockmesh_fence AS f (lock_key, token) VALUES (?, ?) ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token RETURNING token [k 7]"},
	} {
		f, err := sqlfence.New(sqlfence.Config{Dialect: tc.d})
		if err != nil {
			t.Fatal(err)
		}
		if f.DDL() != tc.ddl {
			t.Errorf("%v DDL:\n%s\nwant:\n%s", tc.d, f.DDL(), tc.ddl)
		}
		d := &recorder{token: 7}
		if err := f.Do(context.Background(), sql.OpenDB(d), "k", 7, func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := d.statements(); len(got) != 3 || got[1] != tc.admits {
			t.Errorf("%v statements:\n%s\nwant the admission:\n%s", tc.d, strings.Join(got, "\n"), tc.admits)
		}
	}
}

func TestDialectString(t *testing.T) {
	for d, want := range map[sqlfence.Dialect]string{
		sqlfence.PostgreSQL: "PostgreSQL", sqlfence.MySQL: "MySQL", sqlfence.SQLite: "SQLite", 0: "Dialect(0)",
	} {
		if d.String() != want {
			t.Errorf("%d: %q, want %q", d, d.String(), want)
		}
	}
}

// recorder is a database/sql driver that records each statement with its
// arguments and answers every query with one row holding token.
type recorder struct {
	token int64
	mu    sync.Mutex
	log   []string
}

func (r *recorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recorder) note(query string, args []driver.NamedValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(args) > 0 {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.Value
		}
		query += " " + fmt.Sprint(vals)
	}
	r.log = append(r.log, query)
}

func (r *recorder) Connect(context.Context) (driver.Conn, error) { return &recConn{r}, nil }
func (r *recorder) Driver() driver.Driver                        { return nil }

type recConn struct{ r *recorder }

func (c *recConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (c *recConn) Close() error                        { return nil }
func (c *recConn) Begin() (driver.Tx, error) {
	c.r.note("BEGIN", nil)
	return recTx{c.r}, nil
}
func (c *recConn) ExecContext(_ context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.r.note(q, args)
	return driver.RowsAffected(1), nil
}
func (c *recConn) QueryContext(_ context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.note(q, args)
	return &recRows{token: c.r.token}, nil
}

type recTx struct{ r *recorder }

func (t recTx) Commit() error   { t.r.note("COMMIT", nil); return nil }
func (t recTx) Rollback() error { t.r.note("ROLLBACK", nil); return nil }

type recRows struct {
	token int64
	done  bool
}

func (r *recRows) Columns() []string { return []string{"token"} }
func (r *recRows) Close() error      { return nil }
func (r *recRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = r.token
	return nil
}
