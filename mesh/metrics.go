package mesh

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-metrics"
)

// setupMetrics creates the mesh's own go-metrics instance on the user's
// sink, so that its figures do not depend on go-metrics' global state.
func (m *Mesh) setupMetrics() error {
	sink := m.cfg.MetricSink
	if sink == nil {
		sink = &metrics.BlackholeSink{}
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

func (m *Mesh) labels() []metrics.Label { return []metrics.Label{{Name: "node", Value: m.cfg.Name}} }

func (m *Mesh) incr(name string, v float32) {
	m.met.IncrCounterWithLabels([]string{name}, v, m.labels())
}

func (m *Mesh) measure(name string, start time.Time) {
	m.met.MeasureSinceWithLabels([]string{name, "latency"}, start, m.labels())
}

func (m *Mesh) gauge(name string, v float32) {
	m.met.SetGaugeWithLabels([]string{name}, v, m.labels())
}

// gaugeLeases reports how many leases this node holds (propMu held).
func (m *Mesh) gaugeLeases() {
	m.met.SetGaugeWithLabels([]string{"leases", "held"}, float32(len(m.leases)), m.labels())
}
