package sqlfence

import (
	"errors"
	"fmt"
	"strings"
)

// Dialect is the SQL a database speaks, as far as the fence's statements
// differ. The zero value is no dialect and is invalid.
type Dialect uint8

const (
	// PostgreSQL, version 9.5 or later (INSERT ... ON CONFLICT), or a
	// server speaking its SQL (CockroachDB, YugabyteDB): $1 placeholders.
	PostgreSQL Dialect = iota + 1
	// MySQL 5.7 or later, or MariaDB, TiDB and others speaking MySQL's SQL:
	// ? placeholders, INSERT ... ON DUPLICATE KEY UPDATE, InnoDB tables.
	MySQL
	// SQLite 3.35 or later (upsert and RETURNING), through any driver.
	SQLite
)

// String returns the dialect's name, such as "PostgreSQL".
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", uint8(d))
}

// queries are the statements a Fence runs, written out once by New for its
// dialect and table.
type queries struct {
	// create makes the fence table if it does not exist.
	create string
	// admit writes the token into the key's row if the row's token is not
	// higher, creating the row if need be, and leaves the row locked for
	// the rest of the transaction. Its arguments are the key and the token
	// (and the token again, where it does not return).
	admit string
	// returns says that admit returns the token it wrote, and no row when
	// the row holds a higher token. Otherwise admit returns nothing and
	// locked reads the row's token back.
	returns bool
	// locked reads the key's token under the row lock (MySQL only).
	locked string
	// highest reads the key's token, with no lock.
	highest string
}

// queriesFor writes the statements of dialect d for the fence table. table
// has been checked by validTable, so it can go into the text as it is.
//
// PostgreSQL and SQLite admit in one round trip: the conditional upsert
// returns a row only if it wrote. PostgreSQL locks the conflicting row even
// when the WHERE is false, and evaluates the WHERE on the row's newest
// version once it has the lock (READ COMMITTED), so two writers of one key
// queue on the row and the second sees the first one's token. SQLite has one
// writer at a time.
//
// MySQL's INSERT ... ON DUPLICATE KEY UPDATE has no RETURNING, and its rows
// affected cannot tell an equal token (row unchanged: 0, or 1 with
// CLIENT_FOUND_ROWS) from a stale one (also unchanged). So the upsert keeps
// the greater token (GREATEST changes nothing when ours is lower), which
// locks the row, and a locking read tells which case it was. Placeholders
// stand in for VALUES(), which MySQL 8.0.20 deprecated and MariaDB keeps,
// and for the row alias, which MySQL 8.0.19 added and MariaDB lacks.
func queriesFor(d Dialect, table string) queries {
	switch d {
	case PostgreSQL:
		return queries{
			create: "CREATE TABLE IF NOT EXISTS " + table + " (\n" +
				"\tlock_key text PRIMARY KEY,\n" +
				"\ttoken bigint NOT NULL CHECK (token > 0)\n)",
			admit: "INSERT INTO " + table + " AS f (lock_key, token) VALUES ($1, $2)" +
				" ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token" +
				" WHERE f.token <= excluded.token RETURNING f.token",
			returns: true,
			highest: "SELECT token FROM " + table + " WHERE lock_key = $1",
		}
	case MySQL:
		return queries{
			// VARBINARY: keys compare byte for byte. A case-insensitive
			// collation (MySQL's default) would make "A" and "a" one fence.
			create: "CREATE TABLE IF NOT EXISTS " + table + " (\n" +
				"\tlock_key varbinary(" + fmt.Sprint(MaxKeyLength) + ") NOT NULL PRIMARY KEY,\n" +
				"\ttoken bigint NOT NULL,\n" +
				"\tCHECK (token > 0)\n) ENGINE=InnoDB",
			admit: "INSERT INTO " + table + " (lock_key, token) VALUES (?, ?)" +
				" ON DUPLICATE KEY UPDATE token = GREATEST(token, ?)",
			locked:  "SELECT token FROM " + table + " WHERE lock_key = ? FOR UPDATE",
			highest: "SELECT token FROM " + table + " WHERE lock_key = ?",
		}
	case SQLite:
		return queries{
			// WITHOUT ROWID: the key is the table's only index.
			create: "CREATE TABLE IF NOT EXISTS " + table + " (\n" +
				"\tlock_key text NOT NULL PRIMARY KEY,\n" +
				"\ttoken integer NOT NULL CHECK (token > 0)\n) WITHOUT ROWID",
			admit: "INSERT INTO " + table + " AS f (lock_key, token) VALUES (?, ?)" +
				" ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token" +
				" WHERE f.token <= excluded.token RETURNING token",
			returns: true,
			highest: "SELECT token FROM " + table + " WHERE lock_key = ?",
		}
	}
	return queries{}
}

// maxIdentifier is the longest identifier accepted in a table name:
// PostgreSQL's limit, the lowest of the three (MySQL allows 64).
const maxIdentifier = 63

// validTable reports what is wrong with a table name, if anything: it must
// be an identifier, or schema.identifier, of ASCII letters, digits and
// underscores, not starting with a digit. The name goes into statements
// unquoted, so the rule keeps out anything that would change their meaning,
// and each database folds its case the same way in every statement.
func validTable(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("table %q: at most schema.table", name)
	}
	for _, p := range parts {
		if err := validIdentifier(p); err != nil {
			return fmt.Errorf("table %q: %s", name, err)
		}
	}
	return nil
}

func validIdentifier(id string) error {
	switch {
	case id == "":
		return errors.New("empty identifier")
	case len(id) > maxIdentifier:
		return fmt.Errorf("identifier of %d bytes (limit %d)", len(id), maxIdentifier)
	case id[0] >= '0' && id[0] <= '9':
		return fmt.Errorf("identifier %q starts with a digit", id)
	}
	for _, c := range []byte(id) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Errorf("identifier %q: %q is not a letter, digit or underscore", id, c)
		}
	}
	return nil
}
