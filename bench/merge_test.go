package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// -merge takes the median of each of a row's own figures and of each
// figure at each point of its curve, keeps the range of every figure, and
// the scale and churn rows print as their own paragraphs.
func TestMergeFiguresAndCurves(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, v := range []float64{10, 30, 20} {
		rep := &report{Date: "d", Rows: []workload.Row{
			{
				Case: "scale", Setup: "s", LoadedLatency: true,
				Latency:    &workload.Summary{N: 1, P50: 1000 * v, P99: 2000 * v},
				Throughput: &workload.ThroughputResult{Workers: 64, Ops: 1, OpsPerSec: 100 * v, CPUMicrosPerOp: v},
				Figures:    map[string]float64{figConverge: v, figVoterCPU: 2 * v},
			},
			{
				Case: "churn", Setup: "c",
				Figures: map[string]float64{figFinalHeap: v},
				Curve: []workload.Point{
					{At: 0, Figures: map[string]float64{figHeapAlloc: 1}},
					{At: 100, Figures: map[string]float64{figHeapAlloc: v}},
				},
			},
		}}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, string(rune('a'+i))+".json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	m, err := mergeReports(paths)
	if err != nil {
		t.Fatal(err)
	}
	scale, churn := m.Rows[0], m.Rows[1]
	if scale.Figures[figConverge] != 20 || scale.Figures[figVoterCPU] != 40 || !scale.LoadedLatency {
		t.Errorf("scale: %+v", scale)
	}
	if got := churn.Curve; len(got) != 2 || got[1].At != 100 || got[1].Figures[figHeapAlloc] != 20 {
		t.Errorf("churn curve: %+v", got)
	}
	if _, ok := m.Ratios["scale"]; ok {
		t.Errorf("a latency under load got a ratio to the floor: %v", m.Ratios)
	}
	md := m.markdown()
	for _, s := range []string{
		"converged (every node sees all 64 alive and all 5 voters live) 20.0 s (10.0 s – 30.0 s)",
		"voters 40 µs (20 µs – 60 µs)",
		"p50 20.00 ms (10.00 ms – 30.00 ms)",
		"| 100 | 20.0 MB |",
		"final heap 20.0 MB (10.0 MB – 30.0 MB)",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("the merged report lacks %q:\n%s", s, md)
		}
	}
}
