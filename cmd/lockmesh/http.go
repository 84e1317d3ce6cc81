package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
)

// The agent's HTTP endpoints, until package mesh serves its own handler
// (then this file becomes a call to it).

// readiness says whether a node is ready to serve locks, and if not why:
// a voter configuration is known and, when this node is one of its voters,
// its own vote is live (quarantine and catch-up are over).
func readiness(st mesh.Status) (bool, string) {
	switch {
	case st.ConfigID == 0:
		return false, "no voter configuration yet"
	case st.Voting != "" && st.Voting != "live":
		return false, "this voter is " + st.Voting
	}
	return true, "ready"
}

// serveHTTP serves /healthz, /readyz, /status and /metrics on addr and
// returns the address it listens on.
func serveHTTP(addr string, m *mesh.Mesh) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := readiness(m.Status())
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(m.Status())
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "metrics are not served yet: they arrive with the mesh's Prometheus collector", http.StatusNotImplemented)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return hs, ln.Addr().String(), nil
}
