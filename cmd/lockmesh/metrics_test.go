//go:build linux

package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The agent's /metrics serves the node's families with Go's and the
// process's, build information, and no family whose name ends in what a
// reason or limit label carries (every refusal or limit hit is one
// family with a label, so that a sum counts each event once).
func TestAgentMetrics(t *testing.T) {
	ag := sharedCluster(t)
	resp, err := http.Get("http://" + ag[0].http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var goFams, procFams int
	values := map[string]string{} // a reason or limit label's value → its family
	for name, f := range fams {
		switch {
		case strings.HasPrefix(name, "go_"):
			goFams++
		case strings.HasPrefix(name, "process_"):
			procFams++
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "reason" || lp.GetName() == "limit" {
					values[lp.GetValue()] = name
				}
			}
		}
	}
	if goFams == 0 || procFams == 0 || fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Errorf("%d go_ and %d process_ families; want Go's and the process's collectors", goFams, procFams)
	}
	if b := fams["lockmesh_build_info"]; b == nil || len(b.GetMetric()) != 1 || b.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("lockmesh_build_info: %v", b)
	}
	if len(values) < 20 {
		t.Errorf("only %d reason and limit values: %v", len(values), values)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "lockmesh_") {
			continue
		}
		// What a family counts comes last in its name, before the unit:
		// lockmesh_transport_refused_plaintext_total was such a name.
		core := strings.TrimSuffix(strings.TrimSuffix(name, "_total"), "_duration_seconds")
		for v, in := range values {
			if strings.HasSuffix(core, "_"+v) {
				t.Errorf("%s names %q, a value of a label of %s", name, v, in)
			}
		}
		if strings.HasSuffix(name, "_latency_seconds") {
			t.Errorf("%s: durations are _duration_seconds", name)
		}
	}
}
