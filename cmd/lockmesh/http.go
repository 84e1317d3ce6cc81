package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The agent's HTTP endpoints: the mesh's own handler (/healthz, /livez,
// /readyz, /status; see mesh.HTTPHandler) and the node's Prometheus
// metrics at /metrics, with Go's and the process's.

// readiness says whether a node is ready (mesh.Status.Ready), and if not
// why, for the status command.
func readiness(st mesh.Status) (bool, string) {
	if st.Ready {
		return true, "ready"
	}
	if why := st.Waiting.String(); why != "" {
		return false, "not ready: " + why
	}
	return false, "not ready"
}

// serveHTTP serves the node's HTTP endpoints on addr and returns the
// address it listens on.
func serveHTTP(addr string, m *mesh.Mesh) (*http.Server, string, error) {
	// The node's families, and the process's: the agent is its own
	// process, so Go's runtime and the process's figures are its to serve.
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{m.Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, "", err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/", mesh.HTTPHandler(m))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return hs, ln.Addr().String(), nil
}

// announceReady prints "ready" once the node is ready (as /readyz answers
// 200), or nothing if ctx ends first.
func announceReady(ctx context.Context, m *mesh.Mesh) {
	if m.WaitReady(ctx) != nil {
		return
	}
	fmt.Printf("ready voters=%s\n", strings.Join(m.Status().Voters, ","))
}
