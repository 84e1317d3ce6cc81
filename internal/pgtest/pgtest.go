// Package pgtest runs a private PostgreSQL server for tests. The server lives
// in a temporary directory, answers only on a unix socket in that directory
// (no TCP port is opened), and is stopped and removed by Stop. Nothing of the
// machine's own PostgreSQL clusters is used or touched, only its binaries.
//
// A package shares one server among its tests:
//
//	var pg pgtest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pg.Stop()
//		os.Exit(code)
//	}
//
//	func TestSomething(t *testing.T) {
//		db := pg.DB(t) // a new, empty database; the server starts on first use
//		...
//	}
//
// Where PostgreSQL is not installed, DB skips the test with a message saying
// how to install it, except under CI=true, where it fails: CI must not pass
// by skipping the tests that need it.
package pgtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// ErrNotInstalled means no PostgreSQL binaries were found.
var ErrNotInstalled = errors.New("pgtest: PostgreSQL is not installed")

// installHint says how to get the binaries on the machines this project uses.
const installHint = "apt-get install postgresql (Debian, Ubuntu), or set LOCKMESH_PG_BIN to the directory holding initdb and postgres"

// startTimeout bounds initdb and the server's start together; a loaded CI
// machine running the race detector is slow, a healthy one takes 1 to 2 s.
const startTimeout = 60 * time.Second

// superuser is the role initdb creates; tests connect as it (trust auth on
// the socket, which only the test's user and the server's can reach).
const superuser = "lockmesh"

// Server is one running PostgreSQL server.
type Server struct {
	dir    string // holds data/ and the socket; removed by Stop
	cmd    *exec.Cmd
	exited chan struct{}
	log    *tail

	mu  sync.Mutex
	dbs int // databases made so far, for their names
}

// Start initialises a cluster in a new temporary directory and starts a
// server on it. It returns an error wrapping ErrNotInstalled when there are
// no binaries. Run as root, as CI does, it runs initdb and the server as
// the user postgres (or nobody), since PostgreSQL refuses to run as root.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: a unix socket's path is limited to about 100 bytes, and
	// the directory must be reachable by the server's user when that is not
	// ours (t.TempDir's parent is private to us).
	dir, err := os.MkdirTemp("", "lockmesh-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{dir: dir, exited: make(chan struct{}), log: &tail{}}
	if err := s.start(bin); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(bin string) error {
	attr, err := runAs(s.dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	data := filepath.Join(s.dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", superuser,
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = attr
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	// No TCP listener, the socket in our directory, and no durability: the
	// cluster is thrown away at the end.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", s.dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	s.cmd.SysProcAttr = attr
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: starting postgres: %w", err)
	}
	ready := make(chan struct{})
	go s.readLog(stderr, ready)
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	select {
	case <-ready:
		return nil
	case <-s.exited:
		return fmt.Errorf("pgtest: postgres exited at start (%v):\n%s", s.cmd.ProcessState, s.log)
	case <-ctx.Done():
		s.Stop()
		return fmt.Errorf("pgtest: postgres not ready within %v:\n%s", startTimeout, s.log)
	}
}

// readyLine is what the server logs once it accepts connections.
const readyLine = "database system is ready to accept connections"

// readLog keeps the server's log and closes ready at readyLine. It reads to
// the end: a server whose stderr pipe filled up would stop.
func (s *Server) readLog(r io.Reader, ready chan struct{}) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		s.log.add(sc.Text())
		if ready != nil && strings.Contains(sc.Text(), readyLine) {
			close(ready)
			ready = nil
		}
	}
}

// DSN returns the connection string of database name, for pgx's
// database/sql driver ("pgx").
func (s *Server) DSN(name string) string {
	return fmt.Sprintf("host=%s user=%s dbname=%s sslmode=disable", s.dir, superuser, name)
}

// CreateDatabase creates a new, empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("test%d", s.dbs)
	s.mu.Unlock()
	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: creating database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// Stop shuts the server down (fast shutdown: clients are disconnected) and
// removes its directory.
func (s *Server) Stop() error {
	defer os.RemoveAll(s.dir)
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-s.exited:
		return nil
	case <-timer.C:
		s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("pgtest: postgres did not stop within 30s; killed:\n%s", s.log)
	}
}

// binDir finds the directory holding initdb and postgres: LOCKMESH_PG_BIN,
// else Debian's /usr/lib/postgresql/N/bin with the highest N, else PATH.
func binDir() (string, error) {
	if d := os.Getenv("LOCKMESH_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("%w: LOCKMESH_PG_BIN=%s: %v", ErrNotInstalled, d, err)
		}
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int { return majorOf(a) - majorOf(b) })
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w: no initdb in /usr/lib/postgresql/*/bin or on PATH", ErrNotInstalled)
}

// majorOf reads N from /usr/lib/postgresql/N/bin/initdb (0 if not a number).
func majorOf(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// serverUser is whom the server runs as when we are root: PostgreSQL refuses
// to run as root.
func serverUser() (*user.User, error) {
	for _, name := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(name); err == nil {
			return u, nil
		}
	}
	return nil, errors.New("pgtest: running as root, and neither user postgres nor nobody exists to run PostgreSQL as")
}

// Shared is a server that a package's tests share, started by the first
// test that asks for a database. The zero value is ready to use.
type Shared struct {
	once sync.Once
	s    *Server
	err  error
}

// DB starts the shared server if need be, creates a new database for tb, and
// returns a handle to it, closed when tb ends. Without PostgreSQL it skips
// tb, or fails it under CI=true.
func (sh *Shared) DB(tb testing.TB) *sql.DB {
	tb.Helper()
	sh.once.Do(func() { sh.s, sh.err = Start() })
	switch {
	case errors.Is(sh.err, ErrNotInstalled) && os.Getenv("CI") == "true":
		tb.Fatalf("%v; CI must install it (.ci/run does): %s", sh.err, installHint)
	case errors.Is(sh.err, ErrNotInstalled):
		tb.Skipf("%v; to run this test: %s", sh.err, installHint)
	case sh.err != nil:
		tb.Fatal(sh.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := sh.s.CreateDatabase(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// Stop stops the shared server, if it was started.
func (sh *Shared) Stop() {
	if sh.s != nil {
		if err := sh.s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// tail keeps the last lines of the server's log, for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 50

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == tailLines {
		t.lines = slices.Delete(t.lines, 0, 1)
	}
	t.lines = append(t.lines, line)
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
