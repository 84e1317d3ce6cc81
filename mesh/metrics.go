package mesh

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
)

// The mesh's metrics. Every node keeps its own figures, cumulative since
// New: counters, gauges and duration histograms, in atomics, whether or not
// anything reads them. Mesh.Collector exports them to Prometheus
// (prometheus.go); Config.MetricSink, when set, receives each event as
// well, through go-metrics, named by its family with the family's label
// (sinkKey). docs/metrics.md lists them and says why both.

// metricKind is how a figure adds up.
type metricKind uint8

const (
	counterKind   metricKind = iota // a count since New (incr)
	gaugeKind                       // the last value set (gauge)
	histogramKind                   // a distribution of durations (measure)
)

// metricFamily is one family of figures: a single series, or one series
// per value of its label (a reason, a limit, an outcome), so that a sum
// over the family counts each event once.
type metricFamily struct {
	name   string // go-metrics name: "transport.refused"; Prometheus derives its own (promName)
	kind   metricKind
	help   string
	label  string       // the label that tells its series apart; "" for one series
	values []labelValue // with a label: every value, each a figure of its own
}

// labelValue is one series of a family with a label.
type labelValue struct {
	value string // the label's value: "plaintext"
	id    string // the name the code reports it by (incr, measure); "" means family name.value
	help  string
}

// metricInfo is one figure, as the code reports it (name) and as it is
// exported (its family, and its label's value).
type metricInfo struct {
	name   string
	kind   metricKind
	family int    // in metricFamilies
	value  string // the family's label value; "" without a label
	help   string
}

// metricFamilies is every family of figures the mesh reports, in the order
// docs/metrics.md lists them. A name the code uses that none lists is still
// counted (as lockmesh_unlisted*), and a test of the list fails.
var metricFamilies = []metricFamily{
	{name: "acquire", kind: histogramKind, label: "outcome",
		help: "Time an Acquire or TryAcquire took, from its start to its end, by how it ended.",
		values: []labelValue{
			{"granted", "acquire.granted", "The key was granted; waiting for a held key included."},
			{"locked", "acquire.locked", "Another node held the key to the end: a TryAcquire that found it held, or an Acquire whose ctx ended while it was."},
			{"no_quorum", "acquire.no_quorum", "Too few voters answered (ErrNoQuorum)."},
			{"cancelled", "acquire.cancelled", "ctx ended otherwise, or the node began to leave (a grant that came meanwhile was given back)."},
		}},
	{name: "renew", kind: histogramKind, help: "Time from the start of a lease renewal to its success (a renewal that fails ends as a lost lease). On a go-metrics sink, renewals that started together and succeeded together are one sample."},
	{name: "leases.granted", kind: counterKind, help: "Leases granted to this node."},
	{name: "leases.renewed", kind: counterKind, help: "Lease renewals that succeeded on this node."},
	{name: "leases.lost", kind: counterKind, help: "Leases this node lost before releasing them (renewal failed in time, or the deadline passed first, as after a pause)."},
	{name: "leases.held", kind: gaugeKind, help: "Leases this node holds."},
	{name: "quorum.failures", kind: counterKind, help: "Acquire, Release and Holder calls on this node that ended in ErrNoQuorum (too few voters answered)."},

	{name: "messages.sent", kind: counterKind, help: "Ballot messages sent."},
	{name: "messages.received", kind: counterKind, help: "Ballot messages received."},
	{name: "bytes.sent", kind: counterKind, help: "Bytes of ballot messages sent."},
	{name: "bytes.received", kind: counterKind, help: "Bytes of ballot messages and replies received."},
	{name: "send.queued", kind: counterKind, help: "Ballot requests queued behind the calls in flight to a voter (they leave together)."},
	{name: "send.skipped", kind: counterKind, label: "reason", help: "Ballot requests this node did not send, by why.",
		values: []labelValue{
			{"unknown_peer", "send.unknown_peer", "Gossip has not shown the voter yet."},
			{"old_voter", "send.value_to_old_voter", "A write of a lease value to a voter of an earlier protocol version, which would drop the value."},
		}},
	{name: "observe.pushes", kind: counterKind, help: "Messages this voter sent to nodes observing keys (Watch, Observe), each carrying the changes of keys one node observes."},
	{name: "messages.refused", kind: counterKind, label: "reason", help: "Ballot messages and replies this node refused, by why.",
		values: []labelValue{
			{"malformed", "rpc.malformed", "Malformed."},
			{"unknown_peer", "rpc.unknown_peer", "From a node gossip has not shown (routine for a moment as a node joins or restarts)."},
			{"wrong_config", "rpc.wrong_config", "Naming another mesh's voter configuration."},
			{"wrong_incarnation", "rpc.wrong_incarnation", "From another process than the one bound to the sender's name."},
			{"old_catch_up", "rpc.refused_old_catch_up", "A catch-up from a voter of an earlier protocol version while leases carry values it would drop."},
		}},
	{name: "messages.refused_by_peer", kind: counterKind, label: "reason", help: "Ballot calls of this node that a peer refused, by why.",
		values: []labelValue{
			{"incarnation", "rpc.refused_incarnation", "The peer knows this node's name as another process (this node restarted moments ago, or another process uses its name)."},
		}},

	{name: "voters.changes", kind: counterKind, help: "Voter changes this node ran to completion."},
	{name: "voters.change_failures", kind: counterKind, help: "Voter changes this node started that failed (no majority, or the outcome is unknown)."},
	{name: "voters.version", kind: gaugeKind, help: "Version of the voter configuration this node knows."},
	{name: "autopilot.changes", kind: counterKind, help: "Voter changes the autopilot made from this node."},
	{name: "autopilot.failures", kind: counterKind, help: "Voter changes the autopilot tried from this node that failed."},

	{name: "gossip.refused", kind: counterKind, label: "reason", help: "Gossip this node dropped or ignored, by why.",
		values: []labelValue{
			{"key", "", "Under another gossip key, or none."},
			{"label", "", "With another gossip label, or none."},
			{"forged", "", "An alive message moving a bound name to another address."},
			{"rebind", "", "An alive message of a new incarnation while the bound process still answers."},
			{"bad_meta", "gossip.bad_meta", "A member whose metadata does not decode."},
		}},
	{name: "gossip.name_conflict", kind: counterKind, help: "Name clashes memberlist reported (two processes with one name)."},
	{name: "identity.conflict", kind: counterKind, help: "Two processes with one name, confirmed by a probe."},
	{name: "identity.not_voting", kind: counterKind, help: "Times this node stopped voting because an earlier process with its name runs."},

	{name: "transport.unresponsive", kind: counterKind, help: "Ballot connections given up because the peer stopped answering."},
	{name: "transport.refused", kind: counterKind, label: "reason", help: "Ballot connections refused or closed for a fault, by why (limits: lockmesh_limit_hits_total).",
		values: []labelValue{
			{"plaintext", "", "The peer does not speak TLS."},
			{"tls_unknown_ca", "", "Its certificate is not signed by the mesh's CA."},
			{"tls_expired", "", "Its certificate has expired or is not valid yet."},
			{"tls_bad_cert", "", "Any other fault of its certificate."},
			{"tls_no_cert", "", "It presented no certificate."},
			{"tls_alert", "", "It refused this node's certificate."},
			{"identity", "", "Its hello names a node its certificate does not."},
			{"handshake", "", "Any other TLS or hello failure."},
			{"malformed", "", "A malformed frame."},
			{"rejected", "", "The handler refused the peer's messages (see lockmesh_messages_refused_total)."},
			{"write_timeout", "", "The peer stopped reading."},
			{"io", "", "The connection failed otherwise (a peer that stops resets its connections)."},
			{"settings", "rpc.refused_settings", "Dialed or accepted, the peer's settings would break exclusion: protocol versions that do not overlap, another Timing.Drift, or TTL bounds that do not overlap (SettingsMismatches)."},
		}},
	{name: "limit.hits", kind: counterKind, label: "limit", help: "Connections, frames and messages that hit one of the ballot transport's limits, by limit.",
		values: []labelValue{
			{"frame_size", "limit.frame_size", "A frame longer than MaxFrameSize."},
			{"slow_frame", "limit.slow_frame", "A frame not received whole within FrameTimeout."},
			{"handshake", "limit.handshake", "No TLS handshake and hello within HandshakeTimeout."},
			{"inflight", "limit.inflight", "A connection that left MaxInflightPerConn replies unread."},
			{"queue", "limit.queue", "A connection whose reply queue was full."},
			{"conns", "limit.conns", "A connection over MaxConnsPerPeer or MaxInboundConns."},
			{"idle", "limit.idle", "A connection closed after IdleTimeout of silence (normal)."},
			{"ops", "limit.ops", "A message with more than MaxOpsPerMessage operations or keys."},
			{"key_length", "limit.key_length", "A message with a key longer than MaxKeyLength."},
			{"value", "limit.value", "A message with a lease value longer than MaxValueSize."},
			{"depth", "limit.depth", "A message nested deeper than any message can be."},
			{"memory", "limit.memory", "A frame or reply refused for want of room in MaxBytesInFlight."},
		}},
}

// metricList is every figure of metricFamilies, by the name the code
// reports it by; metricIndex finds one by that name.
var metricList, metricIndex = func() ([]metricInfo, map[string]int) {
	var list []metricInfo
	for f, fam := range metricFamilies {
		if fam.label == "" {
			list = append(list, metricInfo{name: fam.name, kind: fam.kind, family: f, help: fam.help})
			continue
		}
		for _, v := range fam.values {
			id := v.id
			if id == "" {
				id = fam.name + "." + v.value
			}
			list = append(list, metricInfo{name: id, kind: fam.kind, family: f, value: v.value, help: v.help})
		}
	}
	index := make(map[string]int, len(list))
	for i, mi := range list {
		if _, dup := index[mi.name]; dup {
			panic("mesh: metric listed twice: " + mi.name)
		}
		index[mi.name] = i
	}
	return list, index
}()

// metricSlot maps, per kind, a name of metricList to its place among the
// figures of that kind in a node's meters. Built once; only read after.
var metricSlot = func() [3]map[string]int {
	var slots [3]map[string]int
	for k := range slots {
		slots[k] = make(map[string]int)
	}
	for _, mi := range metricList {
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
	m.sinkLbl = make([][]metrics.Label, len(metricList))
	for i, mi := range metricList {
		m.sinkLbl[i] = m.lbl
		if fam := metricFamilies[mi.family]; fam.label != "" {
			m.sinkLbl[i] = append(slices.Clip(m.lbl), metrics.Label{Name: fam.label, Value: mi.value})
		}
	}
	return nil
}

// sinkKey is what a go-metrics sink is given for the figure name: its
// family's name, and the node's labels with the family's own. A sink that
// flattens labels into the name (statsd) sees the name it saw before
// families had labels, for the families whose figures kept their names
// (transport.refused.plaintext; not limit.hits.idle, which was limit.idle).
func (m *Mesh) sinkKey(name string) (string, []metrics.Label) {
	i, ok := metricIndex[name]
	if !ok {
		return name, m.lbl
	}
	return metricFamilies[metricList[i].family].name, m.sinkLbl[i]
}

// incr adds v (a whole number: events or bytes) to the counter name.
func (m *Mesh) incr(name string, v float32) {
	if v > 0 {
		m.stats.add(name, uint64(v))
	}
	if m.met != nil {
		key, lbl := m.sinkKey(name)
		m.met.IncrCounterWithLabels([]string{key}, v, lbl)
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
		key, lbl := m.sinkKey(name)
		m.met.AddSampleWithLabels([]string{key, "latency"}, float32(d)/float32(m.met.TimerGranularity), lbl)
	}
}

func (m *Mesh) gauge(name string, v float32) {
	m.stats.set(name, float64(v))
	if m.met != nil {
		key, lbl := m.sinkKey(name)
		m.met.SetGaugeWithLabels([]string{key}, v, lbl)
	}
}

// gaugeLeases reports how many leases this node holds (nodeMu held).
func (m *Mesh) gaugeLeases() {
	m.gauge("leases.held", float32(m.node.TaggedLeases()))
}
