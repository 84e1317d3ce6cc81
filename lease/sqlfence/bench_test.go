package sqlfence_test

import (
	"database/sql"
	"testing"
)

// BenchmarkWrite measures what the fence adds to a write transaction: one
// UPDATE of a row in a transaction of its own (unfenced), against the same
// UPDATE through Do (fenced: the upsert of the fence row comes first, one
// more statement and round trip in the same transaction). One goroutine,
// one key, the token unchanged, as for a holder writing under one grant.
//
//	go test -run '^$' -bench Write -count 3 ./lease/sqlfence
func BenchmarkWrite(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			e := newEnv(b, be)
			e.exec(b, "INSERT INTO ledger (k, v, token) VALUES ('k', 0, 0)")
			update := e.q("UPDATE ledger SET v = v + 1 WHERE k = ?")
			b.Run("unfenced", func(b *testing.B) {
				for b.Loop() {
					tx, err := e.db.BeginTx(e.ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.ExecContext(e.ctx, update, "k"); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("fenced", func(b *testing.B) {
				for b.Loop() {
					err := e.fence.Do(e.ctx, e.db, "k", 1, func(tx *sql.Tx) error {
						_, err := tx.ExecContext(e.ctx, update, "k")
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
