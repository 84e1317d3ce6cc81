package mesh

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-metrics"
)

// setupMetrics creates the mesh's own go-metrics instance on the user's
// sink, so that its figures do not depend on go-metrics' global state.
// Without a sink there is nothing to report to, and m.met stays nil: the
// figures are then not even formatted (go-metrics allocates for each).
func (m *Mesh) setupMetrics() error {
	m.lbl = []metrics.Label{{Name: "node", Value: m.cfg.Name}}
	sink := m.cfg.MetricSink
	if sink == nil {
		return nil
	}
	conf := metrics.DefaultConfig("lockmesh")
	conf.EnableHostname = false
	conf.EnableRuntimeMetrics = false
	conf.EnableHostnameLabel = false
	met, err := metrics.New(conf, sink)
	if err != nil {
		return fmt.Errorf("mesh: metrics: %w", err)
	}
	m.met = met
	return nil
}

func (m *Mesh) incr(name string, v float32) {
	if m.met != nil {
		m.met.IncrCounterWithLabels([]string{name}, v, m.lbl)
	}
}

func (m *Mesh) measure(name string, start time.Time) {
	if m.met != nil {
		m.met.MeasureSinceWithLabels([]string{name, "latency"}, start, m.lbl)
	}
}

func (m *Mesh) gauge(name string, v float32) {
	if m.met != nil {
		m.met.SetGaugeWithLabels([]string{name}, v, m.lbl)
	}
}

// gaugeLeases reports how many leases this node holds (propMu held).
func (m *Mesh) gaugeLeases() {
	m.gauge("leases.held", float32(len(m.leases)))
}
