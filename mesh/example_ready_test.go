package mesh_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Wait until the node is ready: its vote (if a voter) counts and a majority
// of the voters is known live. A rolling restart waits for this on each
// restarted node before it restarts the next.
func ExampleMesh_WaitReady() {
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = "solo"
	cfg.Voters = []string{"solo"}
	m, err := mesh.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Shutdown()
	fmt.Println("at start:", m.Status().VotingState) // a voter starts quarantined
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		panic(err) // says what the node still waits for
	}
	fmt.Println("ready:", m.Status().VotingState)
	// Output:
	// at start: quarantined
	// ready: live
}

// Serve /healthz, /readyz and /status for probes, and /metrics for
// Prometheus, on one port.
func ExampleHTTPHandler() {
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = "solo"
	cfg.Voters = []string{"solo"}
	m, err := mesh.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Shutdown()

	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	mux := http.NewServeMux()
	mux.Handle("/", mesh.HTTPHandler(m))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.ListenAndServe()
	defer srv.Close()
}
