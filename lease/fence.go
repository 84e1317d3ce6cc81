package lease

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// fenceShards is the number of independently locked maps a Fence spreads its
// keys over. Shard locks are held only to find or add a key, so 64 is plenty
// to keep goroutines on different keys from queueing behind one another.
const fenceShards = 64

// shardSeed is chosen once per process, so that one program cannot pick keys
// that all land in one shard of another program's fence.
var shardSeed = maphash.MakeSeed()

// Fence is the resource-side token check: it remembers, for each key, the
// highest fencing token it has admitted and refuses lower ones. Put one in
// front of whatever a lease protects (a table, a file, an outbound API) and
// route every write through Apply.
//
// Equal tokens are admitted, because a holder writes many times under one
// grant and a renewal keeps the token. Token 0 is refused: grants start at 1.
//
// The zero value is an empty fence ready to use; NewFence is equivalent. A
// Fence is safe for concurrent use and must not be copied after first use.
// It remembers every key it has seen for its whole life (about 50 bytes per
// key plus the key's bytes): forgetting a key would let an old token in again.
//
// # In a SQL database
//
// A Fence guards what one process writes. A database that several processes
// write must keep the tokens itself, and check them in the transaction that
// writes. Package sqlfence does it for database/sql (PostgreSQL, MySQL,
// SQLite): a fence table holds the highest token per key, and Do runs the
// caller's reads and writes in the transaction that admits the token:
//
//	fence, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.PostgreSQL})
//	err := fence.Do(ctx, db, l.Key(), l.Token(), func(tx *sql.Tx) error {
//		// read what the write depends on, and write, through tx
//	})
//	if errors.Is(err, lease.ErrStaleToken) { /* a newer holder has written: stop */ }
//
// A table can instead keep the token in each row, and the statement that
// writes checks it (sqlfence.ExecFenced reports zero rows as stale):
//
//	ALTER TABLE invoices ADD COLUMN fence bigint NOT NULL DEFAULT 0;
//	UPDATE invoices SET total = $1, fence = $2 WHERE id = $3 AND fence <= $2;
//	-- 0 rows affected: a higher token has written (or no such row)
//
// For a row that may not exist yet, PostgreSQL and SQLite take
// INSERT ... ON CONFLICT (id) DO UPDATE SET ..., fence = excluded.fence
// WHERE invoices.fence <= excluded.fence. Never read the fence in one
// statement and write in another unless the read locks the row in the same
// transaction (SELECT ... FOR UPDATE), and compute the new values from data
// read inside that transaction. MySQL counts rows changed, not rows matched,
// unless the client sets CLIENT_FOUND_ROWS. Tokens fit a signed BIGINT:
// lockmesh issues them from a count of microseconds since 1970, about 2⁵¹.
type Fence struct {
	shards [fenceShards]fenceShard
}

// fenceShard maps keys to their entries. Its lock covers only the map, never
// a key's check or the caller's function, so a slow Apply on one key does not
// hold up other keys in the same shard.
type fenceShard struct {
	mu   sync.RWMutex
	keys map[string]*fenceEntry
	_    [64]byte // keeps neighbouring shards' locks off one cache line
}

// fenceEntry is one key's fence.
type fenceEntry struct {
	mu      sync.Mutex    // held for Admit's check-and-record and for all of Apply
	highest atomic.Uint64 // written only with mu held; 0 means nothing admitted yet
}

// NewFence returns an empty Fence. It is the same as new(Fence).
func NewFence() *Fence {
	return new(Fence)
}

// Admit records token for key if it is at least the highest token already
// admitted for key, and returns nil. Otherwise it records nothing and returns
// a *StaleTokenError (errors.Is(err, ErrStaleToken) holds). Token 0 is refused
// with an error wrapping ErrZeroToken.
//
// Admit checks and records; it does not cover whatever the caller does next.
// If two goroutines each Admit and then write, the lower token's write may
// still land after the higher one's. When the write follows the check, use
// Apply, which runs the write inside the check.
func (f *Fence) Admit(key string, token uint64) error {
	if token == 0 {
		return zeroTokenError(key)
	}
	e := f.entry(key)
	e.mu.Lock()
	h := e.highest.Load()
	if token < h {
		e.mu.Unlock()
		return &StaleTokenError{Key: key, Token: token, Highest: h}
	}
	if token > h {
		e.highest.Store(token)
	}
	e.mu.Unlock()
	return nil
}

// Apply runs fn only if token is admissible for key, and records token only
// if fn returns nil. While fn runs, Admit and Apply calls on the same key wait,
// so the check, fn and the record form one step; calls on other keys proceed.
//
// It returns a *StaleTokenError (fn not run) when token is below the highest
// admitted for key, an error wrapping ErrZeroToken for token 0, an error
// wrapping ErrNilFunc for a nil fn, and otherwise whatever fn returns,
// unchanged. If fn panics, the panic goes on up, the token is not recorded
// and the key is released.
//
// fn must not call Admit or Apply on the same key of the same Fence: that
// would wait for itself forever.
func (f *Fence) Apply(key string, token uint64, fn func() error) error {
	if fn == nil {
		return fmt.Errorf("%w (key %q)", ErrNilFunc, key)
	}
	if token == 0 {
		return zeroTokenError(key)
	}
	e := f.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock() // a deferred unlock frees the key even if fn panics
	if h := e.highest.Load(); token < h {
		return &StaleTokenError{Key: key, Token: token, Highest: h}
	}
	if err := fn(); err != nil {
		return err
	}
	if token > e.highest.Load() {
		e.highest.Store(token)
	}
	return nil
}

// Highest returns the highest token admitted for key, and false if none has
// been. It does not wait for an Apply in progress on key: it reports the
// token recorded before that Apply began.
func (f *Fence) Highest(key string) (uint64, bool) {
	s := &f.shards[shardOf(key)]
	s.mu.RLock()
	e := s.keys[key]
	s.mu.RUnlock()
	if e == nil {
		return 0, false
	}
	h := e.highest.Load()
	return h, h != 0
}

// entry returns key's entry, adding it if the key is new. The common case, a
// key seen before, takes only the shard's read lock and does not allocate.
func (f *Fence) entry(key string) *fenceEntry {
	s := &f.shards[shardOf(key)]
	s.mu.RLock()
	e := s.keys[key]
	s.mu.RUnlock()
	if e != nil {
		return e
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if e = s.keys[key]; e == nil { // another goroutine may have added it meanwhile
		if s.keys == nil {
			s.keys = make(map[string]*fenceEntry)
		}
		e = new(fenceEntry)
		// Clone so the map does not pin a larger buffer the caller sliced
		// the key from.
		s.keys[strings.Clone(key)] = e
	}
	return e
}

// shardOf picks the shard that holds key.
func shardOf(key string) uint64 {
	return maphash.String(shardSeed, key) % fenceShards
}

// zeroTokenError reports token 0 for key.
func zeroTokenError(key string) error {
	return fmt.Errorf("%w (key %q)", ErrZeroToken, key)
}
