package httpfence

import (
	"context"
	"database/sql"
	"reflect"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// A Fence keeps the highest token admitted per key, where the service keeps
// its data, and runs writes under it.
type Fence interface {
	// Apply runs write only if token is at least the highest token
	// admitted for key, and records token only if write returns nil. For a
	// key, the check, write and the record are one step: another Apply on
	// the same key waits, or is refused after it. It returns a
	// *lease.StaleTokenError (write not run) for a lower token, write's
	// error unchanged, or the fence's own error. write gets a context
	// derived from ctx, which may carry what it must write through (see
	// Tx).
	Apply(ctx context.Context, key string, token uint64, write func(ctx context.Context) error) error
}

// Memory returns a Fence kept in this process by f: for a service whose
// single process is the only writer of its data. The tokens are forgotten
// when the process ends; a service that restarts must persist them (SQL).
// Memory(nil) is nil, which Config.Validate refuses.
func Memory(f *lease.Fence) Fence {
	if f == nil {
		return nil
	}
	return memoryFence{f}
}

type memoryFence struct{ f *lease.Fence }

func (m memoryFence) Apply(ctx context.Context, key string, token uint64, write func(context.Context) error) error {
	return m.f.Apply(key, token, func() error { return write(ctx) })
}

// SQL returns a Fence kept by f in db: write runs in a transaction whose
// first statement admits the token (sqlfence.Fence.Do), and must make its
// reads and writes through that transaction, which Tx returns from write's
// context. The transaction commits if write returns nil. With a nil f or
// db, SQL is nil, which Config.Validate refuses.
func SQL(f *sqlfence.Fence, db sqlfence.Beginner) Fence {
	if f == nil || isNil(db) {
		return nil
	}
	return sqlFence{f, db}
}

type sqlFence struct {
	f  *sqlfence.Fence
	db sqlfence.Beginner
}

func (s sqlFence) Apply(ctx context.Context, key string, token uint64, write func(context.Context) error) error {
	return s.f.Do(ctx, s.db, key, token, func(tx *sql.Tx) error {
		return write(context.WithValue(ctx, txKey{}, tx))
	})
}

type txKey struct{}

// Tx returns the transaction that a SQL fence opened for the request whose
// context is ctx, and false under another fence or outside the middleware.
// Everything the handler reads and writes in the fenced database goes
// through it; the middleware commits it after the handler returns.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

type tokenKey struct{}

type fenced struct {
	key   string
	token uint64
}

// Token returns the key and the token under which the middleware runs the
// request whose context is ctx, and false outside the middleware. A handler
// that also keeps the token in its rows reads it here.
func Token(ctx context.Context) (key string, token uint64, ok bool) {
	f, ok := ctx.Value(tokenKey{}).(fenced)
	return f.key, f.token, ok
}

// isNil reports whether v is nil, an interface holding a nil pointer
// included: its methods would panic.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
