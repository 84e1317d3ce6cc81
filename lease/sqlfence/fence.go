package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/lockmesh/lockmesh/lease"
)

// DefaultTable is the fence table's name when Config.Table is empty.
const DefaultTable = "lockmesh_fence"

// MaxKeyLength is the longest key a Fence accepts, in bytes: the mesh's
// default MaxKeyLength, and the width of MySQL's key column. A mesh set up
// for longer keys can fence a hash of each key instead.
const MaxKeyLength = 512

// Config says which database a Fence talks to and where it keeps its table.
// Use keyed fields: more may come.
type Config struct {
	// Dialect is the SQL the database speaks. Required; zero is invalid.
	Dialect Dialect
	// Table names the fence table: an identifier or schema.identifier of
	// ASCII letters, digits and underscores, used unquoted (so PostgreSQL
	// folds it to lower case). Empty means DefaultTable.
	Table string
}

// Validate reports what is wrong with c, if anything, as an error wrapping
// ErrInvalidConfig. It neither changes c nor panics.
func (c Config) Validate() error {
	switch c.Dialect {
	case PostgreSQL, MySQL, SQLite:
	default:
		return fmt.Errorf("%w: unknown dialect %s", ErrInvalidConfig, c.Dialect)
	}
	if c.Table == "" {
		return nil
	}
	if err := validTable(c.Table); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, err)
	}
	return nil
}

// Fence keeps, in a table of the database, the highest fencing token admitted
// for each key, and runs writes only for tokens at least that high. It holds
// no connection and no state besides its statements: one Fence serves any
// number of goroutines, processes and databases of its dialect.
type Fence struct {
	dialect Dialect
	table   string
	q       queries
}

// New returns a Fence for cfg, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Fence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	return &Fence{dialect: cfg.Dialect, table: table, q: queriesFor(cfg.Dialect, table)}, nil
}

// Dialect returns the SQL dialect the Fence speaks.
func (f *Fence) Dialect() Dialect { return f.dialect }

// Table returns the fence table's name, as it appears in the statements.
func (f *Fence) Table() string { return f.table }

// DDL returns the CREATE TABLE IF NOT EXISTS statement of the fence table,
// for schema migration tools. CreateTable runs the same statement.
func (f *Fence) DDL() string { return f.q.create }

// A Beginner starts transactions: *sql.DB and *sql.Conn are Beginners.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// An Execer runs a statement: *sql.DB, *sql.Conn and *sql.Tx are Execers.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// A Queryer reads a row: *sql.DB, *sql.Conn and *sql.Tx are Queryers.
type Queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CreateTable creates the fence table if it does not exist yet (see DDL).
func (f *Fence) CreateTable(ctx context.Context, db Execer) error {
	if isNil(db) {
		return fmt.Errorf("%w: CreateTable", ErrNilDB)
	}
	if _, err := db.ExecContext(ctx, f.q.create); err != nil {
		return fmt.Errorf("sqlfence: creating table %s: %w", f.table, err)
	}
	return nil
}

// Do runs fn in a transaction of db that first admits token for key, and
// commits only if fn returns nil. The fence row stays locked until the
// transaction ends, so for one key the check, fn's reads and writes and the
// recording of the token are one step: a writer with a higher token waits
// for it, and one with a lower token is refused after it.
//
// fn must do the reads its writes depend on through tx, inside this call:
// a value read before Do may already be overwritten by a newer holder (see
// the package documentation). It must not commit or roll back tx; to undo
// its writes, it returns an error.
//
// Do returns a *lease.StaleTokenError (errors.Is(err, lease.ErrStaleToken))
// when a higher token has been admitted for key: fn did not run and nothing
// changed. It returns fn's error unchanged after rolling back; errors
// wrapping ErrInvalidKey, ErrTokenRange, lease.ErrZeroToken, ErrNilDB or
// ErrNilFunc for bad arguments, before touching the database; and the
// database's errors, wrapped and prefixed with "sqlfence:". A commit that
// fails leaves the outcome unknown, as with any transaction. If fn panics,
// the transaction is rolled back and the panic goes on up.
func (f *Fence) Do(ctx context.Context, db Beginner, key string, token uint64, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return fmt.Errorf("%w (key %q)", ErrNilFunc, key)
	}
	if isNil(db) {
		return fmt.Errorf("%w: Do (key %q)", ErrNilDB, key)
	}
	tok, err := checkArgs(key, token)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: beginning a transaction for %q: %w", key, err)
	}
	// After Commit, Rollback does nothing; before it (an error, a panic
	// in fn), it undoes fn's writes and frees the fence row.
	defer tx.Rollback()
	if err := f.admit(ctx, tx, key, token, tok); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: committing token %d for %q: %w", token, key, err)
	}
	return nil
}

// AdmitTx admits token for key in tx, a transaction the caller runs: it
// records token for key unless a higher token has been admitted, and locks
// key's fence row until tx ends. Call it before anything else in tx, then do
// the reads and writes the token guards, then commit. Do is this, with the
// transaction managed for you; use AdmitTx for transaction options Do does
// not set (an isolation level, a *sql.Conn with its own begin statement) or
// to fence a transaction that middleware opened.
//
// It returns a *lease.StaleTokenError when a higher token has been admitted
// for key: tx then holds no change of the fence, and the caller must roll it
// back rather than write. Errors for bad arguments are those of Do.
func (f *Fence) AdmitTx(ctx context.Context, tx *sql.Tx, key string, token uint64) error {
	if tx == nil {
		return fmt.Errorf("%w: AdmitTx (key %q)", ErrNilDB, key)
	}
	tok, err := checkArgs(key, token)
	if err != nil {
		return err
	}
	return f.admit(ctx, tx, key, token, tok)
}

// admit runs the dialect's admission statements in tx for arguments that
// have been checked; tok is token as the column holds it.
func (f *Fence) admit(ctx context.Context, tx *sql.Tx, key string, token uint64, tok int64) error {
	upsert := f.upsertThenRead
	if f.q.returns {
		upsert = f.upsertReturning
	}
	highest, err := upsert(ctx, tx, key, token, tok)
	if err != nil || highest <= tok {
		return err
	}
	return &lease.StaleTokenError{Key: key, Token: token, Highest: uint64(highest)}
}

// upsertReturning admits in one round trip where the upsert returns the
// token it wrote (PostgreSQL, SQLite), and returns the key's token.
func (f *Fence) upsertReturning(ctx context.Context, tx *sql.Tx, key string, token uint64, tok int64) (int64, error) {
	var highest int64
	err := tx.QueryRowContext(ctx, f.q.admit, key, tok).Scan(&highest)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return highest, wrapAdmit(err, key, token)
	}
	// No row: the fence holds a higher token. The upsert locked the row
	// all the same, so this read sees the newest token.
	if err := tx.QueryRowContext(ctx, f.q.highest, key).Scan(&highest); err != nil {
		return 0, fmt.Errorf("sqlfence: reading the fence of %q after refusing token %d: %w", key, token, err)
	}
	return highest, nil
}

// upsertThenRead admits where the upsert returns nothing (MySQL): it keeps
// the greater token, and a locking read says which one that was.
func (f *Fence) upsertThenRead(ctx context.Context, tx *sql.Tx, key string, token uint64, tok int64) (int64, error) {
	if _, err := tx.ExecContext(ctx, f.q.admit, key, tok, tok); err != nil {
		return 0, wrapAdmit(err, key, token)
	}
	var highest int64
	if err := tx.QueryRowContext(ctx, f.q.locked, key).Scan(&highest); err != nil {
		return 0, fmt.Errorf("sqlfence: reading the fence of %q after admitting token %d: %w", key, token, err)
	}
	return highest, nil
}

// wrapAdmit wraps an error of the admission statement; nil stays nil.
func wrapAdmit(err error, key string, token uint64) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlfence: admitting token %d for %q: %w", token, key, err)
}

// Highest returns the highest token admitted for key, and false if none has
// been. It takes no lock: a Do in progress on key may be about to raise it.
func (f *Fence) Highest(ctx context.Context, db Queryer, key string) (uint64, bool, error) {
	if isNil(db) {
		return 0, false, fmt.Errorf("%w: Highest (key %q)", ErrNilDB, key)
	}
	if err := checkKey(key); err != nil {
		return 0, false, err
	}
	var h int64
	err := db.QueryRowContext(ctx, f.q.highest, key).Scan(&h)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("sqlfence: reading the fence of %q: %w", key, err)
	}
	return uint64(h), true, nil
}

// checkArgs checks a key and a token, and returns the token as the BIGINT
// column holds it.
func checkArgs(key string, token uint64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if token == 0 {
		return 0, fmt.Errorf("sqlfence: %w (key %q)", lease.ErrZeroToken, key)
	}
	if token > math.MaxInt64 {
		return 0, fmt.Errorf("%w: token %d (key %q)", ErrTokenRange, token, key)
	}
	return int64(token), nil
}

// checkKey reports what is wrong with a key, if anything.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("%w: %d bytes, longer than MaxKeyLength (%d)", ErrInvalidKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w %q: not UTF-8", ErrInvalidKey, key)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w %q: holds a NUL byte", ErrInvalidKey, key)
	}
	return nil
}

// isNil reports whether a database handle is nil, an interface holding a
// nil pointer included: its methods would panic.
func isNil(h any) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
