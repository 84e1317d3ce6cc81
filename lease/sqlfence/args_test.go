package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg sqlfence.Config
		ok  bool
	}{
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL}, true},
		{sqlfence.Config{Dialect: sqlfence.MySQL, Table: "fences"}, true},
		{sqlfence.Config{Dialect: sqlfence.SQLite, Table: "main.lock_fence_2"}, true},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "_" + strings.Repeat("x", 62)}, true},
		{sqlfence.Config{}, false},
		{sqlfence.Config{Dialect: 9}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "a.b.c"}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "fence; DROP TABLE users"}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: `"Fence"`}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "1fence"}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "public."}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: "fenc\u00e9"}, false},
		{sqlfence.Config{Dialect: sqlfence.PostgreSQL, Table: strings.Repeat("x", 64)}, false},
	} {
		err := tc.cfg.Validate()
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, sqlfence.ErrInvalidConfig) {
			t.Errorf("%+v: Validate() = %v", tc.cfg, err)
		}
		f, err2 := sqlfence.New(tc.cfg)
		if (err == nil) != (err2 == nil) || (f == nil) == (err2 == nil) {
			t.Errorf("%+v: New = %v, %v; Validate = %v", tc.cfg, f, err2, err)
		}
	}
}

func TestNewDefaultTable(t *testing.T) {
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if f.Table() != sqlfence.DefaultTable || f.Dialect() != sqlfence.SQLite {
		t.Fatalf("table %q, dialect %v", f.Table(), f.Dialect())
	}
}

// TestBadArgumentsAreRefusedBeforeTheDatabase: each bad argument gets its
// error, fn does not run, and nothing is written.
func TestBadArgumentsAreRefusedBeforeTheDatabase(t *testing.T) {
	e := newEnv(t, backends[0])
	var nilDB *sql.DB
	var nilTx *sql.Tx
	ran := false
	fn := func(*sql.Tx) error { ran = true; return nil }
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"empty key", sqlfence.ErrInvalidKey, func() error { return e.fence.Do(ctx, e.db, "", 1, fn) }},
		{"long key", sqlfence.ErrInvalidKey, func() error {
			return e.fence.Do(ctx, e.db, strings.Repeat("k", sqlfence.MaxKeyLength+1), 1, fn)
		}},
		{"key not UTF-8", sqlfence.ErrInvalidKey, func() error { return e.fence.Do(ctx, e.db, "k\xff", 1, fn) }},
		{"key with NUL", sqlfence.ErrInvalidKey, func() error { return e.fence.Do(ctx, e.db, "k\x00", 1, fn) }},
		{"token 0", lease.ErrZeroToken, func() error { return e.fence.Do(ctx, e.db, "k", 0, fn) }},
		{"token above BIGINT", sqlfence.ErrTokenRange, func() error { return e.fence.Do(ctx, e.db, "k", 1<<63, fn) }},
		{"nil db", sqlfence.ErrNilDB, func() error { return e.fence.Do(ctx, nil, "k", 1, fn) }},
		{"nil *sql.DB", sqlfence.ErrNilDB, func() error { return e.fence.Do(ctx, nilDB, "k", 1, fn) }},
		{"nil fn", sqlfence.ErrNilFunc, func() error { return e.fence.Do(ctx, e.db, "k", 1, nil) }},
		{"AdmitTx nil tx", sqlfence.ErrNilDB, func() error { return e.fence.AdmitTx(ctx, nilTx, "k", 1) }},
		{"AdmitTx token 0", lease.ErrZeroToken, func() error {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			return e.fence.AdmitTx(ctx, tx, "k", 0)
		}},
		{"Highest nil db", sqlfence.ErrNilDB, func() error { _, _, err := e.fence.Highest(ctx, nilDB, "k"); return err }},
		{"Highest empty key", sqlfence.ErrInvalidKey, func() error { _, _, err := e.fence.Highest(ctx, e.db, ""); return err }},
		{"CreateTable nil db", sqlfence.ErrNilDB, func() error { return e.fence.CreateTable(ctx, nil) }},
		{"ExecFenced nil db", sqlfence.ErrNilDB, func() error { return sqlfence.ExecFenced(ctx, nilDB, "k", 1, "SELECT 1") }},
		{"ExecFenced token 0", lease.ErrZeroToken, func() error { return sqlfence.ExecFenced(ctx, e.db, "k", 0, "SELECT 1") }},
	} {
		err := tc.call()
		if !errors.Is(err, tc.err) || !strings.HasPrefix(err.Error(), "sqlfence: ") {
			t.Errorf("%s: %v, want an error wrapping %v, prefixed sqlfence:", tc.name, err, tc.err)
		}
		if errors.Is(err, lease.ErrStaleToken) {
			t.Errorf("%s: reported as a stale token: %v", tc.name, err)
		}
	}
	if ran {
		t.Error("fn ran for bad arguments")
	}
	var n int
	if err := e.db.QueryRow("SELECT count(*) FROM " + e.fence.Table()).Scan(&n); err != nil || n != 0 {
		t.Errorf("the fence table has %d rows (%v) after bad arguments only, want 0", n, err)
	}
}

// TestCanceledContextWritesNothing: a Do whose ctx has ended begins no
// transaction and runs nothing.
func TestCanceledContextWritesNothing(t *testing.T) {
	e := newEnv(t, backends[0])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := e.fence.Do(ctx, e.db, "k", 1, func(*sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do with a canceled ctx: %v (fn ran: %v)", err, ran)
	}
}
