package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQuickRun runs the in-process cases (the floor and a 3-voter lockmesh)
// with -quick sizes, so that go test ./... keeps the benchmark compiling
// and working. It checks that every workload produced figures, not how
// good they are: a shared machine makes timed assertions flaky.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs lockmesh for a few seconds")
	}
	o, err := parseFlags([]string{"-quick", "-cases", "floor,lockmesh", "-n", "100", "-duration", "500ms"})
	if err != nil {
		t.Fatal(err)
	}
	if o.root, err = moduleRoot(); err != nil {
		t.Fatal(err)
	}
	o.caseTimeout = 40 * time.Second
	o.out = filepath.Join(t.TempDir(), "results.json")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var log io.Writer = io.Discard
	if testing.Verbose() {
		log = os.Stderr
	}
	rep := run(ctx, o, log)

	want := map[string]bool{"floor-rtt": false, "floor-quorum": false, "lockmesh": true}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rep.Rows), len(want), rep.Rows)
	}
	for _, row := range rep.Rows {
		lock, ok := want[row.Case]
		if !ok {
			t.Errorf("unexpected row %q", row.Case)
			continue
		}
		if row.Error != "" {
			t.Errorf("%s: %s", row.Case, row.Error)
			continue
		}
		if row.Latency == nil || row.Latency.N != o.n || row.Latency.P50 <= 0 || row.Latency.P999 < row.Latency.P50 {
			t.Errorf("%s: latency %+v", row.Case, row.Latency)
		}
		if tp := row.Throughput; tp == nil || tp.Ops == 0 || tp.Workers != 64 || tp.CPUMicrosPerOp <= 0 {
			t.Errorf("%s: throughput %+v", row.Case, tp)
		}
		if lock {
			h := row.Handover
			if h == nil || h.Handover == nil || h.Handover.N == 0 {
				t.Errorf("%s: no hand-over measured: %+v", row.Case, h)
			} else if h.Overlaps > 0 {
				t.Errorf("%s: %d grants overlapped the previous holder", row.Case, h.Overlaps)
			}
		}
	}

	md := rep.markdown()
	for _, s := range []string{"| setup | p50 |", "×floor", "nproc", "load average"} {
		if !strings.Contains(md, s) {
			t.Errorf("the table lacks %q:\n%s", s, md)
		}
	}
	path, err := rep.write(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("the JSON file does not read back: %v", err)
	}
	if back.Ratios["lockmesh"] <= 0 {
		t.Errorf("no ratio to the quorum floor in the JSON file: %v", back.Ratios)
	}
}

// Flags: unknown cases are refused, -quick shrinks the sizes.
func TestFlagsRejectUnknownCases(t *testing.T) {
	if _, err := parseFlags([]string{"-cases", "floor,zookeeper"}); err == nil {
		t.Fatal("an unknown case was accepted")
	}
	o, err := parseFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if o.n != 200 || o.duration != time.Second || len(o.cases) != len(allCases) {
		t.Fatalf("-quick gave n=%d duration=%v cases=%v", o.n, o.duration, o.cases)
	}
}
