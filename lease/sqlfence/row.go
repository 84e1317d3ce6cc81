package sqlfence

import (
	"context"
	"fmt"

	"github.com/lockmesh/lockmesh/lease"
)

// ExecFenced runs query, one statement that carries its own fence: it
// writes a row only where the row's token column is at most token, and sets
// that column to token. It returns nil if the statement changed at least one
// row, and a *lease.StaleTokenError with Highest 0 (unknown) if it changed
// none. token is only checked and reported here: pass it among args too.
//
//	err := sqlfence.ExecFenced(ctx, db, "invoice/7", l.Token(),
//		`UPDATE invoices SET total = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
//		total, int64(l.Token()), 7)
//
// Zero rows also means that no row matched at all: an UPDATE of a row that
// does not exist looks stale. Write the row first, or use an upsert whose
// update is conditional (PostgreSQL and SQLite:
// INSERT ... ON CONFLICT (id) DO UPDATE SET ..., fence = excluded.fence
// WHERE t.fence <= excluded.fence), for which zero rows can only mean a
// higher token.
//
// MySQL counts rows changed, not rows matched, unless the connection sets
// CLIENT_FOUND_ROWS (clientFoundRows=true with go-sql-driver/mysql): without
// it, writing the values a row already holds under the same token changes
// nothing and looks stale. With it, an INSERT ... ON DUPLICATE KEY UPDATE
// counts a row left alone as found, so a stale upsert would look admitted:
// on MySQL, use this for UPDATE only, and Fence.Do for upserts.
//
// Bad arguments get the errors of Fence.Do; the statement's error is wrapped.
func ExecFenced(ctx context.Context, db Execer, key string, token uint64, query string, args ...any) error {
	if isNil(db) {
		return fmt.Errorf("%w: ExecFenced (key %q)", ErrNilDB, key)
	}
	if _, err := checkArgs(key, token); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("sqlfence: fenced write of %q with token %d: %w", key, token, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlfence: rows affected by the fenced write of %q: %w", key, err)
	}
	if n == 0 {
		return &lease.StaleTokenError{Key: key, Token: token}
	}
	return nil
}
