package httpfence_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/httpfence"
	"github.com/lockmesh/lockmesh/lease/sqlfence"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, no cgo
)

// docStore is the service's data: a value per document, and the log of
// committed writes. Each implementation writes the way its fence requires.
type docStore interface {
	fence() httpfence.Fence
	// put writes id's value and logs token, as a handler does under the
	// fence (ctx is the handler's request context).
	put(ctx context.Context, id, value string, token uint64) error
	get(t *testing.T, id string) string
	logged(t *testing.T, id string) []uint64
}

// memStore keeps documents in maps, fenced by a lease.Fence.
type memStore struct {
	f    *lease.Fence
	mu   sync.Mutex
	docs map[string]string
	log  map[string][]uint64
}

func newMemStore(*testing.T) docStore {
	return &memStore{f: lease.NewFence(), docs: map[string]string{}, log: map[string][]uint64{}}
}

func (m *memStore) fence() httpfence.Fence { return httpfence.Memory(m.f) }

func (m *memStore) put(_ context.Context, id, value string, token uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.docs[id] = value
	m.log[id] = append(m.log[id], token)
	return nil
}

func (m *memStore) get(_ *testing.T, id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.docs[id]
}

func (m *memStore) logged(_ *testing.T, id string) []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log[id])
}

// sqlStore keeps documents in SQLite, fenced by a sqlfence.Fence; handlers
// write through the request's transaction.
type sqlStore struct {
	db *sql.DB
	f  *sqlfence.Fence
}

func newSQLStore(t *testing.T) docStore {
	dsn := "file:" + filepath.Join(t.TempDir(), "docs.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE docs (id text PRIMARY KEY, value text NOT NULL);
		CREATE TABLE writes (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL, token integer NOT NULL);
		CREATE TABLE refs (id text NOT NULL REFERENCES docs (id) DEFERRABLE INITIALLY DEFERRED)`)
	if err != nil {
		t.Fatal(err)
	}
	return &sqlStore{db: db, f: f}
}

func (s *sqlStore) fence() httpfence.Fence { return httpfence.SQL(s.f, s.db) }

func (s *sqlStore) put(ctx context.Context, id, value string, token uint64) error {
	tx, ok := httpfence.Tx(ctx)
	if !ok {
		return errors.New("no fenced transaction in the request's context")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO docs (id, value) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET value = excluded.value`, id, value); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO writes (id, token) VALUES (?, ?)`, id, int64(token))
	return err
}

func (s *sqlStore) get(t *testing.T, id string) string {
	var v string
	if err := s.db.QueryRow(`SELECT value FROM docs WHERE id = ?`, id).Scan(&v); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	return v
}

func (s *sqlStore) logged(t *testing.T, id string) []uint64 {
	rows, err := s.db.Query(`SELECT token FROM writes WHERE id = ? ORDER BY seq`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var tok uint64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	return out
}

var stores = []struct {
	name string
	new  func(*testing.T) docStore
}{
	{"memory", newMemStore},
	{"sql", newSQLStore},
}

// service is a document service: PUT /docs/{id} sets the document to the
// request body, under the key "doc/{id}". A body of "invalid" is refused
// with 422 after the write; "dangling" also adds a reference that fails the
// commit (SQL only).
type service struct {
	store docStore
	srv   *httptest.Server
}

func newService(t *testing.T, store docStore) *service {
	mw, err := httpfence.Middleware(httpfence.Config{
		Fence: store.fence(),
		Key: func(r *http.Request) (string, error) {
			id := r.PathValue("id")
			if id == "" {
				return "", errors.New("no document id")
			}
			return "doc/" + id, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /docs/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, token, _ := httpfence.Token(r.Context())
		body, _ := io.ReadAll(r.Body)
		value := string(body)
		if err := store.put(r.Context(), r.PathValue("id"), value, token); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch value {
		case "invalid":
			http.Error(w, "invalid document", http.StatusUnprocessableEntity)
			return
		case "dangling":
			tx, _ := httpfence.Tx(r.Context())
			if _, err := tx.ExecContext(r.Context(), `INSERT INTO refs (id) VALUES ('nowhere')`); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintf(w, "stored %s", value)
	})))
	s := &service{store: store, srv: httptest.NewServer(mux)}
	t.Cleanup(s.srv.Close)
	return s
}

// put sends PUT /docs/id with the token (0: no token header).
func (s *service) put(t *testing.T, id, value string, token uint64) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.srv.URL+"/docs/"+id, strings.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	if token != 0 {
		httpfence.SetToken(req.Header, "doc/"+id, token)
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func eachStore(t *testing.T, test func(t *testing.T, s *service)) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { test(t, newService(t, st.new(t))) })
	}
}

func wantStatus(t *testing.T, resp *http.Response, code int) {
	t.Helper()
	if resp.StatusCode != code {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s, want %d", resp.Request.URL.Path, resp.StatusCode, body, code)
	}
}

func TestStaleTokenIsRefusedWith409AndAProblem(t *testing.T) {
	eachStore(t, func(t *testing.T, s *service) {
		wantStatus(t, s.put(t, "1", "first", 5), http.StatusOK)
		wantStatus(t, s.put(t, "1", "second", 7), http.StatusOK)
		resp := s.put(t, "1", "late", 6)
		wantStatus(t, resp, http.StatusConflict)
		if ct := resp.Header.Get("Content-Type"); ct != httpfence.ProblemContentType {
			t.Errorf("Content-Type %q", ct)
		}
		err := httpfence.CheckResponse(resp)
		var se *lease.StaleTokenError
		if !errors.As(err, &se) || *se != (lease.StaleTokenError{Key: "doc/1", Token: 6, Highest: 7}) {
			t.Fatalf("CheckResponse = %v, want stale token 6 for doc/1, highest 7", err)
		}
		var p map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatalf("the body after CheckResponse: %v", err)
		}
		if p["type"] != httpfence.ProblemStaleToken || p["status"] != float64(409) || p["token"] != "6" || p["highest"] != "7" || p["key"] != "doc/1" {
			t.Errorf("problem body %v", p)
		}
		if v := s.store.get(t, "1"); v != "second" {
			t.Errorf("document %q after the stale write, want %q", v, "second")
		}
		if got := s.store.logged(t, "1"); !slices.Equal(got, []uint64{5, 7}) {
			t.Errorf("committed writes %v, want [5 7]", got)
		}
	})
}

func TestEqualTokenWritesAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, s *service) {
		for _, v := range []string{"a", "b", "c"} {
			wantStatus(t, s.put(t, "1", v, 9), http.StatusOK)
		}
		if v := s.store.get(t, "1"); v != "c" {
			t.Errorf("document %q, want c", v)
		}
	})
}

func TestDocumentsAreFencedIndependently(t *testing.T) {
	eachStore(t, func(t *testing.T, s *service) {
		wantStatus(t, s.put(t, "1", "x", 50), http.StatusOK)
		wantStatus(t, s.put(t, "2", "y", 3), http.StatusOK)
	})
}

// TestHandlerErrorRecordsNoToken: a handler that answers 422 has its
// response passed on, and its token is not recorded (and, under SQL, its
// write is rolled back).
func TestHandlerErrorRecordsNoToken(t *testing.T) {
	eachStore(t, func(t *testing.T, s *service) {
		wantStatus(t, s.put(t, "1", "good", 3), http.StatusOK)
		resp := s.put(t, "1", "invalid", 9)
		wantStatus(t, resp, http.StatusUnprocessableEntity)
		if err := httpfence.CheckResponse(resp); err != nil {
			t.Errorf("CheckResponse of the handler's own 422: %v", err)
		}
		wantStatus(t, s.put(t, "1", "better", 4), http.StatusOK)
	})
}

// TestFailedCommitIsNotReportedAsSuccess: the handler answers 200, but the
// transaction fails at commit (a deferred foreign key): the client gets
// 500, never the handler's 200, and nothing is written.
func TestFailedCommitIsNotReportedAsSuccess(t *testing.T) {
	s := newService(t, newSQLStore(t))
	wantStatus(t, s.put(t, "1", "good", 3), http.StatusOK)
	resp := s.put(t, "1", "dangling", 4)
	wantStatus(t, resp, http.StatusInternalServerError)
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), httpfence.ProblemFenceFailed) || strings.Contains(string(body), "stored") {
		t.Errorf("body %s", body)
	}
	if v := s.store.get(t, "1"); v != "good" {
		t.Errorf("document %q after the failed commit, want good", v)
	}
}

func TestMissingTokenIsRefusedWith428(t *testing.T) {
	eachStore(t, func(t *testing.T, s *service) {
		resp := s.put(t, "1", "x", 0)
		wantStatus(t, resp, http.StatusPreconditionRequired)
		if err := httpfence.CheckResponse(resp); !errors.Is(err, httpfence.ErrNoToken) {
			t.Errorf("CheckResponse = %v, want ErrNoToken", err)
		}
		if v := s.store.get(t, "1"); v != "" {
			t.Errorf("written without a token: %q", v)
		}
	})
}

func TestBadHeadersAreRefusedWith400(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"token not a number", http.Header{"Lockmesh-Fencing-Token": {"abc"}}},
		{"token 0", http.Header{"Lockmesh-Fencing-Token": {"0"}}},
		{"token negative", http.Header{"Lockmesh-Fencing-Token": {"-3"}}},
		{"token with sign", http.Header{"Lockmesh-Fencing-Token": {"+3"}}},
		{"token above 2^64", http.Header{"Lockmesh-Fencing-Token": {"18446744073709551616"}}},
		{"token twice", http.Header{"Lockmesh-Fencing-Token": {"3", "4"}}},
		{"another key", http.Header{"Lockmesh-Fencing-Token": {"3"}, "Lockmesh-Key": {"doc/2"}}},
		{"key badly encoded", http.Header{"Lockmesh-Fencing-Token": {"3"}, "Lockmesh-Key": {"doc%2"}}},
		{"key empty", http.Header{"Lockmesh-Fencing-Token": {"3"}, "Lockmesh-Key": {""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *service) {
				req, _ := http.NewRequest(http.MethodPut, s.srv.URL+"/docs/1", strings.NewReader("x"))
				req.Header = tc.header
				resp, err := s.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				wantStatus(t, resp, http.StatusBadRequest)
				if err := httpfence.CheckResponse(resp); !errors.Is(err, httpfence.ErrBadHeader) {
					t.Errorf("CheckResponse = %v, want ErrBadHeader", err)
				}
				if v := s.store.get(t, "1"); v != "" {
					t.Errorf("written: %q", v)
				}
			})
		})
	}
}

// TestTokenTooLargeForSQLIsRefusedWith400: a token above 2⁶³−1 is a valid
// header but does not fit a BIGINT: the client's error, not the server's.
func TestTokenTooLargeForSQLIsRefusedWith400(t *testing.T) {
	s := newService(t, newSQLStore(t))
	wantStatus(t, s.put(t, "1", "x", 1<<63), http.StatusBadRequest)
}

// TestConcurrentRequestsNeverOverwriteNewer: clients with tokens 1..n
// write one document at once, in shuffled order. The committed writes'
// tokens never go down, and the document ends with the highest token's
// value.
func TestConcurrentRequestsNeverOverwriteNewer(t *testing.T) {
	const clients = 12
	eachStore(t, func(t *testing.T, s *service) {
		rng := rand.New(rand.NewPCG(3, 4))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, p := range rng.Perm(clients) {
			token := uint64(p + 1)
			wg.Go(func() {
				<-start
				resp := s.put(t, "1", strconv.FormatUint(token, 10), token)
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
					t.Errorf("token %d: status %d", token, resp.StatusCode)
				}
			})
		}
		close(start)
		wg.Wait()
		got := s.store.logged(t, "1")
		if !slices.IsSorted(got) || len(got) == 0 || got[len(got)-1] != clients {
			t.Fatalf("committed writes %v: want non-decreasing, ending with %d", got, clients)
		}
		if v := s.store.get(t, "1"); v != strconv.Itoa(clients) {
			t.Fatalf("document %q, want %d", v, clients)
		}
	})
}

// TestHandlerCannotFlushBeforeTheFenceDecides: nothing of the response
// reaches the client before the write commits.
func TestHandlerCannotFlushBeforeTheFenceDecides(t *testing.T) {
	mw, err := httpfence.Middleware(httpfence.Config{Fence: httpfence.Memory(lease.NewFence())})
	if err != nil {
		t.Fatal(err)
	}
	var flushErr error
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		flushErr = http.NewResponseController(w).Flush()
	}))
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	httpfence.SetToken(req.Header, "k", 1)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !errors.Is(flushErr, http.ErrNotSupported) {
		t.Errorf("Flush under the fence: %v, want http.ErrNotSupported", flushErr)
	}
	if rec.Code != http.StatusOK || rec.Body.String() != "partial" {
		t.Errorf("response %d %q", rec.Code, rec.Body)
	}
}

// TestClientNamesTheKeyWhenTheServiceDoesNot: with Config.Key nil, the key
// comes from the header, which is then required.
func TestClientNamesTheKeyWhenTheServiceDoesNot(t *testing.T) {
	fence := lease.NewFence()
	mw, err := httpfence.Middleware(httpfence.Config{Fence: httpfence.Memory(fence)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, token, _ := httpfence.Token(r.Context())
		fmt.Fprintf(w, "%s %d", key, token)
	}))
	serve := func(header http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header = header
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	key := "jobs/nightly run 100%\n✓"
	h1 := http.Header{}
	httpfence.SetToken(h1, key, 12)
	if rec := serve(h1); rec.Code != http.StatusOK || rec.Body.String() != key+" 12" {
		t.Fatalf("response %d %q; header %q", rec.Code, rec.Body, h1.Get(httpfence.HeaderKey))
	}
	if h, _ := fence.Highest(key); h != 12 {
		t.Fatalf("the fence holds %d for %q, want 12", h, key)
	}
	if rec := serve(http.Header{"Lockmesh-Fencing-Token": {"12"}}); rec.Code != http.StatusPreconditionRequired {
		t.Fatalf("no key header: %d %s, want 428", rec.Code, rec.Body)
	}
}

func TestConfigValidate(t *testing.T) {
	var nilDB *sql.DB
	f, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	for name, cfg := range map[string]httpfence.Config{
		"no fence":         {},
		"Memory(nil)":      {Fence: httpfence.Memory(nil)},
		"SQL with nil db":  {Fence: httpfence.SQL(f, nilDB)},
		"SQL with nil fen": {Fence: httpfence.SQL(nil, &sql.DB{})},
	} {
		if _, err := httpfence.Middleware(cfg); !errors.Is(err, httpfence.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestCheckResponseLeavesOtherResponsesAlone: a 409 of the service's own
// (not a fencing problem) is not a stale token, and its body is intact.
func TestCheckResponseLeavesOtherResponsesAlone(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/problem+json")
	rec.WriteHeader(http.StatusConflict)
	rec.WriteString(`{"type":"https://example.com/probs/out-of-stock","status":409}`)
	resp := rec.Result()
	if err := httpfence.CheckResponse(resp); err != nil {
		t.Fatalf("CheckResponse = %v, want nil", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "out-of-stock") {
		t.Fatalf("body after CheckResponse: %q", body)
	}
}
