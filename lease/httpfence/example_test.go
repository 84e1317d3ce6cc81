package httpfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/lockmesh/lockmesh/lease"
	"github.com/lockmesh/lockmesh/lease/httpfence"
	"github.com/lockmesh/lockmesh/lease/sqlfence"
)

// A service keeps one value per job and fences its writes in memory. The
// holder of token 8 was paused past its lease; the holder of token 9 wrote
// meanwhile; the late write is refused with 409.
func ExampleMiddleware() {
	mw, err := httpfence.Middleware(httpfence.Config{
		Fence: httpfence.Memory(lease.NewFence()),
		Key:   func(r *http.Request) (string, error) { return "job/" + r.PathValue("name"), nil },
	})
	if err != nil {
		panic(err)
	}
	status := map[string]string{} // written only under the fence
	mux := http.NewServeMux()
	mux.Handle("PUT /jobs/{name}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status[r.PathValue("name")] = r.FormValue("status")
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	put := func(token uint64, s string) {
		req, _ := http.NewRequest("PUT", srv.URL+"/jobs/nightly?status="+s, nil)
		httpfence.SetToken(req.Header, "job/nightly", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		err = httpfence.CheckResponse(resp)
		fmt.Println(resp.Status, errors.Is(err, lease.ErrStaleToken), err)
	}
	put(8, "running")
	put(9, "done")
	put(8, "failed")
	fmt.Println("status:", status["nightly"])
	// Output:
	// 200 OK false <nil>
	// 200 OK false <nil>
	// 409 Conflict true lease: stale token 8 for "job/nightly": highest seen is 9
	// status: done
}

// Under the SQL fence, the handler reads and writes through the request's
// transaction, which begins with the admission of the token and commits
// after the handler returns.
func ExampleSQL() {
	dir, _ := os.MkdirTemp("", "httpfence-example-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	fence, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite})
	if err := fence.CreateTable(ctx, db); err != nil {
		panic(err)
	}
	db.Exec(`CREATE TABLE stock (item text PRIMARY KEY, n integer NOT NULL); INSERT INTO stock VALUES ('bolts', 10)`)

	mw, err := httpfence.Middleware(httpfence.Config{
		Fence: httpfence.SQL(fence, db),
		Key:   func(r *http.Request) (string, error) { return "stock/" + r.PathValue("item"), nil },
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /stock/{item}/take", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpfence.Tx(r.Context())
		var n int
		if err := tx.QueryRowContext(r.Context(), `SELECT n FROM stock WHERE item = ?`, r.PathValue("item")).Scan(&n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `UPDATE stock SET n = ? WHERE item = ?`, n-1, r.PathValue("item")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%d left", n-1)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	take := func(token uint64) {
		req, _ := http.NewRequest("POST", srv.URL+"/stock/bolts/take", nil)
		httpfence.SetToken(req.Header, "stock/bolts", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		if err := httpfence.CheckResponse(resp); err != nil {
			fmt.Println(resp.StatusCode, err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, string(body))
	}
	take(5)
	take(6)
	take(5)
	// Output:
	// 200 9 left
	// 200 8 left
	// 409 lease: stale token 5 for "stock/bolts": highest seen is 6
}
