package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A normal life of a 3-node mesh on real TCP — start, a lock taken and
// given back, one node restarted (leaving as an agent does on SIGTERM, and
// started again on its addresses and data directory), every node leaving
// in turn — logs nothing at WARN or ERROR: those are for what an operator
// must act on, and none of this is.
func TestRoutineLifeLogsNoWarning(t *testing.T) {
	out, sl := newSlogLines(slog.LevelDebug)
	logger := SlogLogger(sl)
	root := t.TempDir()
	names := []string{"node0", "node1", "node2"}
	cfgs := make([]*Config, len(names))
	nodes := make([]*Mesh, len(names))
	start := func(i int) {
		t.Helper()
		m, err := New(cfgs[i])
		if err != nil {
			t.Fatalf("starting %s: %v", names[i], err)
		}
		nodes[i] = m
	}
	for i, name := range names {
		cfg := DefaultLocalConfig()
		cfg.Name, cfg.Voters, cfg.Logger = name, names, logger
		cfg.DataDir = filepath.Join(root, name)
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		cfgs[i] = cfg
		start(i)
	}
	t.Cleanup(func() {
		for _, m := range nodes {
			m.Shutdown()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	allReady := func(what string) {
		t.Helper()
		for _, m := range nodes {
			if err := m.WaitReady(ctx); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	allReady("start")
	l, err := nodes[1].Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart, on the same addresses, as a service manager does it.
	old := nodes[2]
	st := old.Status()
	_, port, _ := net.SplitHostPort(st.Addr)
	cfgs[2].BindPort, _ = strconv.Atoi(port)
	cfgs[2].RPCAddr = st.RPCAddr
	cfgs[2].Seeds = []string{nodes[0].Addr(), nodes[1].Addr()}
	if err := old.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	start(2)
	allReady("after the restart")

	for _, m := range nodes {
		start := time.Now()
		err := m.Leave(ctx)
		t.Logf("%s left in %v", m.Name(), time.Since(start))
		if err != nil {
			t.Errorf("%s leaving: %v", m.Name(), err)
		}
	}

	var loud []string
	for _, r := range out.records(t) {
		if lvl := r["level"].(string); lvl == "WARN" || lvl == "ERROR" {
			loud = append(loud, fmt.Sprintf("%s %v: %v %v", lvl, r["node"], r["msg"], attrs(r)))
		}
	}
	if len(loud) > 0 {
		t.Errorf("%d records at WARN or ERROR in a routine life:\n%s", len(loud), strings.Join(loud, "\n"))
	}
}

// attrs are a record's attributes other than the usual ones, as text.
func attrs(r map[string]any) string {
	var out []string
	for k, v := range r {
		switch k {
		case "time", "level", "msg", "source", "node", "logger":
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	return strings.Join(out, " ")
}
