package mesh

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
)

// The mesh's metrics. Every node keeps its own figures, cumulative since
// New: counters, gauges and latency histograms, in atomics, whether or not
// anything reads them. Mesh.Collector exports them to Prometheus
// (prometheus.go); Config.MetricSink, when set, receives each event as
// well, through go-metrics. METRICS.md lists them and says why both.

// metricKind is how a figure adds up.
type metricKind uint8

const (
	counterKind   metricKind = iota // a count since New (incr)
	gaugeKind                       // the last value set (gauge)
	histogramKind                   // a latency distribution (measure)
)

// metricInfo describes one figure: its go-metrics name ("quorum.failures"),
// kind and meaning. The Prometheus name derives from them (promName).
type metricInfo struct {
	name string
	kind metricKind
	help string
}

// metricList is every figure the mesh reports, in the order they are
// documented. A name used in the code but missing here is still counted
// (as lockmesh_unlisted*), and TestMetricListComplete fails.
var metricList = []metricInfo{
	{"acquire", histogramKind, "Time from the start of an Acquire to its grant, waiting for a held key included."},
	{"renew", histogramKind, "Time from the start of a lease renewal to its success. (On a go-metrics sink, renewals that started together and succeeded together are one sample.)"},
	{"leases.granted", counterKind, "Leases granted to this node."},
	{"leases.renewed", counterKind, "Lease renewals that succeeded on this node."},
	{"leases.lost", counterKind, "Leases this node lost before releasing them (renewal failed in time, or the deadline passed first, as after a pause)."},
	{"leases.held", gaugeKind, "Leases this node holds."},
	{"quorum.failures", counterKind, "Acquire, Release and Holder calls on this node that ended in ErrNoQuorum (too few voters answered)."},
	{"send.queued", counterKind, "Ballot requests queued behind the calls in flight to a voter (they leave together)."},
	{"send.unknown_peer", counterKind, "Ballot requests not sent because gossip has not shown the voter yet."},
	{"observe.pushes", counterKind, "Messages this voter sent to nodes observing keys (Watch, Observe), each carrying the changes of keys one node observes."},
	{"send.value_to_old_voter", counterKind, "Writes of lease values not sent to a voter of an earlier protocol version, which would drop the value."},
	{"messages.sent", counterKind, "Ballot messages sent."},
	{"messages.received", counterKind, "Ballot messages received."},
	{"bytes.sent", counterKind, "Bytes of ballot messages sent."},
	{"bytes.received", counterKind, "Bytes of ballot messages and replies received."},
	{"rpc.malformed", counterKind, "Ballot messages or replies refused as malformed."},
	{"rpc.unknown_peer", counterKind, "Ballot messages refused from a node gossip has not shown."},
	{"rpc.wrong_config", counterKind, "Ballot messages refused for naming another mesh's configuration."},
	{"rpc.wrong_incarnation", counterKind, "Ballot messages or answers refused for coming from another process than the one bound to the sender's name."},
	{"rpc.refused_incarnation", counterKind, "Ballot connections refused for a hello of another incarnation than the one bound to the name."},
	{"rpc.refused_old_catch_up", counterKind, "Catch-ups refused to a voter of an earlier protocol version while leases carry values it would drop."},
	{"rpc.refused_settings", counterKind, "Ballot connections refused, dialed or accepted, because the peer's settings would break exclusion: protocol versions that do not overlap, another Timing.Drift, or TTL bounds that do not overlap (SettingsMismatches)."},
	{"voters.changes", counterKind, "Voter changes this node ran to completion."},
	{"voters.change_failures", counterKind, "Voter changes this node started that failed (no majority, or the outcome is unknown)."},
	{"voters.version", gaugeKind, "Version of the voter configuration this node knows."},
	{"autopilot.changes", counterKind, "Voter changes the autopilot made from this node."},
	{"autopilot.failures", counterKind, "Voter changes the autopilot tried from this node that failed."},
	{"gossip.bad_meta", counterKind, "Gossip members ignored for undecodable metadata."},
	{"gossip.refused.key", counterKind, "Gossip dropped for another gossip key, or none."},
	{"gossip.refused.label", counterKind, "Gossip dropped for another gossip label, or none."},
	{"gossip.refused.forged", counterKind, "Gossip alive messages refused for moving a bound name to another address."},
	{"gossip.refused.rebind", counterKind, "Gossip alive messages of a new incarnation refused while the bound process still answers."},
	{"gossip.name_conflict", counterKind, "Name clashes memberlist reported (two processes with one name)."},
	{"identity.conflict", counterKind, "Two processes with one name, confirmed by a probe."},
	{"identity.not_voting", counterKind, "Times this node stopped voting because an earlier process with its name runs."},
	{"transport.unresponsive", counterKind, "Ballot connections given up because the peer stopped answering."},
	{"transport.refused", counterKind, "Ballot connections closed for a fault or a limit (not idle or unresponsive ones)."},
	{"transport.refused.plaintext", counterKind, "Ballot connections refused: the peer does not speak TLS."},
	{"transport.refused.tls_unknown_ca", counterKind, "Ballot connections refused: certificate not signed by the mesh's CA."},
	{"transport.refused.tls_expired", counterKind, "Ballot connections refused: certificate expired or not valid yet."},
	{"transport.refused.tls_bad_cert", counterKind, "Ballot connections refused: any other fault of the peer's certificate."},
	{"transport.refused.tls_no_cert", counterKind, "Ballot connections refused: the peer presented no certificate."},
	{"transport.refused.tls_alert", counterKind, "Ballot connections refused by the peer: it does not trust this node's certificate."},
	{"transport.refused.identity", counterKind, "Ballot connections refused: the hello names a node the certificate does not."},
	{"transport.refused.handshake", counterKind, "Ballot connections refused: any other TLS or hello failure."},
	{"transport.refused.malformed", counterKind, "Ballot connections closed for a malformed frame."},
	{"transport.refused.rejected", counterKind, "Ballot connections closed because the handler refused the peer's messages."},
	{"transport.refused.write_timeout", counterKind, "Ballot connections closed because the peer stopped reading."},
	{"transport.refused.io", counterKind, "Ballot connections that failed otherwise."},
	{"limit.frame_size", counterKind, "Frames longer than MaxFrameSize."},
	{"limit.slow_frame", counterKind, "Frames not received whole within FrameTimeout."},
	{"limit.handshake", counterKind, "Connections without TLS handshake and hello within HandshakeTimeout."},
	{"limit.inflight", counterKind, "Connections that left MaxInflightPerConn replies unread."},
	{"limit.queue", counterKind, "Connections whose reply queue was full."},
	{"limit.conns", counterKind, "Connections over MaxConnsPerPeer or MaxInboundConns."},
	{"limit.idle", counterKind, "Connections closed after IdleTimeout of silence (normal)."},
	{"limit.ops", counterKind, "Messages with more than MaxOpsPerMessage operations or keys."},
	{"limit.key_length", counterKind, "Messages with a key longer than MaxKeyLength."},
	{"limit.value", counterKind, "Messages with a lease value longer than MaxValueSize."},
	{"limit.depth", counterKind, "Messages nested deeper than any message can be."},
	{"limit.memory", counterKind, "Frames or replies refused for want of room in MaxBytesInFlight."},
}

// metricSlot maps, per kind, a name of metricList to its place among the
// figures of that kind in a node's meters. Built once; only read after.
var metricSlot = func() [3]map[string]int {
	var slots [3]map[string]int
	for k := range slots {
		slots[k] = make(map[string]int)
	}
	for _, mi := range metricList {
		if _, dup := slots[mi.kind][mi.name]; dup {
			panic("mesh: metric listed twice: " + mi.name)
		}
		slots[mi.kind][mi.name] = len(slots[mi.kind])
	}
	return slots
}()

// metricKey names a figure not in metricList.
type metricKey struct {
	name string
	kind metricKind
}

// latencyBuckets are the upper bounds of the latency histograms: an
// uncontended acquire takes about 100 µs on a LAN, a renewal a few ms, an
// acquire that waited for a held key up to the TTL and more.
var latencyBuckets = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second,
}

// cell is one atomic figure alone on its cache line: the counters of the
// hot path (messages, bytes) are incremented from several cores at once.
type cell struct {
	atomic.Uint64
	_ [56]byte
}

// histogram counts durations per bucket of latencyBuckets (the last count
// is above them all), not cumulated; the collector cumulates.
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
}

func (h *histogram) observe(d time.Duration, n uint64) {
	d = max(d, 0)
	i := 0
	for i < len(latencyBuckets) && d > latencyBuckets[i] {
		i++
	}
	h.counts[i].Add(n)
	h.sum.Add(n * uint64(d))
}

// meters are a node's figures. The listed ones sit in slices indexed by
// metricSlot and are read and written with atomics alone; a name not
// listed gets its figure on first use, under mu.
type meters struct {
	counters []cell // counts
	gauges   []cell // math.Float64bits of the value
	hists    []histogram

	mu       sync.Mutex
	unlisted map[metricKey]*unlistedMeter
}

type unlistedMeter struct {
	value cell // a count, or a gauge's float64 bits
	hist  histogram
}

func (s *meters) init() {
	s.counters = make([]cell, len(metricSlot[counterKind]))
	s.gauges = make([]cell, len(metricSlot[gaugeKind]))
	s.hists = make([]histogram, len(metricSlot[histogramKind]))
	s.unlisted = make(map[metricKey]*unlistedMeter)
}

func (s *meters) lookupUnlisted(k metricKey) *unlistedMeter {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.unlisted[k]
	if u == nil {
		u = new(unlistedMeter)
		s.unlisted[k] = u
	}
	return u
}

func (s *meters) add(name string, v uint64) {
	if i, ok := metricSlot[counterKind][name]; ok {
		s.counters[i].Add(v)
		return
	}
	s.lookupUnlisted(metricKey{name, counterKind}).value.Add(v)
}

func (s *meters) set(name string, v float64) {
	if i, ok := metricSlot[gaugeKind][name]; ok {
		s.gauges[i].Store(math.Float64bits(v))
		return
	}
	s.lookupUnlisted(metricKey{name, gaugeKind}).value.Store(math.Float64bits(v))
}

// observe records n observations of d.
func (s *meters) observe(name string, d time.Duration, n uint64) {
	if i, ok := metricSlot[histogramKind][name]; ok {
		s.hists[i].observe(d, n)
		return
	}
	s.lookupUnlisted(metricKey{name, histogramKind}).hist.observe(d, n)
}

// setupMetrics creates the node's meters and, on the user's sink, its own
// go-metrics instance, so that its figures do not depend on go-metrics'
// global state. Without a sink m.met stays nil: the events are then not
// even formatted for go-metrics (it allocates for each).
func (m *Mesh) setupMetrics() error {
	m.stats.init()
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

// incr adds v (a whole number: events or bytes) to the counter name.
func (m *Mesh) incr(name string, v float32) {
	if v > 0 {
		m.stats.add(name, uint64(v))
	}
	if m.met != nil {
		m.met.IncrCounterWithLabels([]string{name}, v, m.lbl)
	}
}

// measure records the time since start in the latency histogram name
// (go-metrics: the sample name.latency, in milliseconds).
func (m *Mesh) measure(name string, start time.Time) { m.measureN(name, start, 1) }

// measureN records n operations that started at start and ended now: n
// observations in the node's own histogram (Prometheus), and one sample on
// the go-metrics sink, which takes samples one at a time (a renewal pass
// of 4,096 leases is one sample there, not 4,096 calls that say the same).
func (m *Mesh) measureN(name string, start time.Time, n uint64) {
	d := time.Since(start)
	m.stats.observe(name, d, n)
	if m.met != nil {
		m.met.AddSampleWithLabels([]string{name, "latency"}, float32(d)/float32(m.met.TimerGranularity), m.lbl)
	}
}

func (m *Mesh) gauge(name string, v float32) {
	m.stats.set(name, float64(v))
	if m.met != nil {
		m.met.SetGaugeWithLabels([]string{name}, v, m.lbl)
	}
}

// gaugeLeases reports how many leases this node holds (nodeMu held).
func (m *Mesh) gaugeLeases() {
	m.gauge("leases.held", float32(m.node.TaggedLeases()))
}
