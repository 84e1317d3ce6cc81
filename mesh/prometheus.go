package mesh

import (
	"math"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of this node's metrics, labelled
// node="<Config.Name>". Register it on the registry you serve, once, with
// Go's and the process's collectors if that registry has none yet (the
// lockmesh agent's /metrics has all three):
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m.Collector(), collectors.NewGoCollector(),
//		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Counters are cumulative since New and every series is exported from the
// start, at zero until its first event, so a rare event is never lost
// between scrapes. A family whose events have several causes (refusals,
// limits, an acquire's outcome) is one family with a label, so that a sum
// over it counts each event once. Durations are histograms in seconds.
// Voting state, quorum health and build information are read at each
// scrape. docs/metrics.md lists the families. Collector works whether or
// not Config.MetricSink is set.
func (m *Mesh) Collector() prometheus.Collector {
	c := &collector{m: m}
	node := prometheus.Labels{"node": m.cfg.Name}
	for _, fam := range metricFamilies {
		var labels []string
		if fam.label != "" {
			labels = []string{fam.label}
		}
		c.families = append(c.families, prometheus.NewDesc(promName(fam.name, fam.kind), fam.help, labels, node))
	}
	for _, mi := range metricList {
		c.slots = append(c.slots, metricSlot[mi.kind][mi.name])
	}
	c.unlisted = [3]*prometheus.Desc{
		counterKind: prometheus.NewDesc("lockmesh_unlisted_total",
			"Counters the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
		gaugeKind: prometheus.NewDesc("lockmesh_unlisted",
			"Gauges the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
		histogramKind: prometheus.NewDesc("lockmesh_unlisted_duration_seconds",
			"Durations the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
	}
	c.voting = prometheus.NewDesc("lockmesh_voting_state",
		"This node's voting state (Status.VotingState): 1 for the state it is in, 0 for the others.",
		[]string{"state"}, node)
	c.build = prometheus.NewDesc("lockmesh_build_info",
		"Always 1: the lockmesh module version this node runs, the Go that built it, and the highest ballot protocol version it speaks.",
		[]string{"version", "goversion", "protocol"}, node)
	c.voters = prometheus.NewDesc("lockmesh_quorum_voters",
		"Voters in the configuration this node knows (0 before it formed).", nil, node)
	c.alive = prometheus.NewDesc("lockmesh_quorum_voters_alive",
		"Voters of that configuration that gossip shows alive, this node included (a hint: gossip never decides a quorum).", nil, node)
	c.majority = prometheus.NewDesc("lockmesh_quorum_majority",
		"Voters whose answers a lock needs: a majority of the configuration.", nil, node)
	c.healthy = prometheus.NewDesc("lockmesh_quorum_healthy",
		"1 if gossip shows a majority of the voters alive (of both old and new voters while a change is pending), else 0. A hint from gossip, not a promise that locks are granted.",
		nil, node)
	return c
}

// collector exports a node's meters and a few figures of its Status.
type collector struct {
	m                       *Mesh
	families                []*prometheus.Desc // by metricFamilies' index
	slots                   []int              // by metricList's index: its place in the meters of its kind
	unlisted                [3]*prometheus.Desc
	voting, build           *prometheus.Desc
	voters, alive, majority *prometheus.Desc
	healthy                 *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, ds := range [][]*prometheus.Desc{c.families, c.unlisted[:]} {
		for _, d := range ds {
			ch <- d
		}
	}
	for _, d := range []*prometheus.Desc{c.voting, c.build, c.voters, c.alive, c.majority, c.healthy} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := &c.m.stats
	st := c.m.Status()
	for i, mi := range metricList {
		d := c.families[mi.family]
		var lv []string
		if mi.value != "" {
			lv = []string{mi.value}
		}
		slot := c.slots[i]
		switch mi.kind {
		case counterKind:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(s.counters[slot].Load()), lv...)
		case gaugeKind:
			v := math.Float64frombits(s.gauges[slot].Load())
			if read := gaugesFromStatus[mi.name]; read != nil {
				v = read(st)
			}
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		case histogramKind:
			ch <- constHistogram(d, &s.hists[slot], lv...)
		}
	}
	s.mu.Lock()
	for k, u := range s.unlisted {
		d := c.unlisted[k.kind]
		switch k.kind {
		case counterKind:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(u.value.Load()), k.name)
		case gaugeKind:
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, math.Float64frombits(u.value.Load()), k.name)
		case histogramKind:
			ch <- constHistogram(d, &u.hist, k.name)
		}
	}
	s.mu.Unlock()

	for _, v := range votingStateLabels() {
		ch <- prometheus.MustNewConstMetric(c.voting, prometheus.GaugeValue, boolFloat(v.state == st.VotingState), v.label)
	}
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1,
		moduleVersion(), runtime.Version(), strconv.Itoa(c.m.supported().Max))
	q := quorumHealthOf(st)
	ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(q.voters))
	ch <- prometheus.MustNewConstMetric(c.alive, prometheus.GaugeValue, float64(q.alive))
	ch <- prometheus.MustNewConstMetric(c.majority, prometheus.GaugeValue, float64(q.majority))
	ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, boolFloat(q.healthy))
}

// votingStateLabel is a VotingState and its lockmesh_voting_state label:
// its name with underscores ("catching_up"), as label values were spelt
// before VotingState had names.
type votingStateLabel struct {
	state VotingState
	label string
}

// votingStateLabels lists every VotingState, each with its label.
func votingStateLabels() []votingStateLabel {
	out := make([]votingStateLabel, len(votingStateNames))
	for i := range votingStateNames {
		s := VotingState(i)
		out[i] = votingStateLabel{s, strings.ReplaceAll(s.String(), "-", "_")}
	}
	return out
}

// modulePath is this module's path, which build information names.
const modulePath = "github.com/lockmesh/lockmesh"

// moduleVersion is the version of this module in the running binary: the
// main module's when it is lockmesh (the agent), the dependency's when an
// application embeds it, "(devel)" when built from a work tree or a
// replace directive without a version, "unknown" without build information.
var moduleVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return moduleVersionOf(bi)
})

func moduleVersionOf(bi *debug.BuildInfo) string {
	version := func(m *debug.Module) string {
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Version == "" {
			return "(devel)"
		}
		return m.Version
	}
	if bi.Main.Path == modulePath {
		return version(&bi.Main)
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			return version(d)
		}
	}
	return "(devel)" // a test of this module, whose main package is its own
}

// gaugesFromStatus are the gauges that Status knows: the collector reads
// them from it at the scrape rather than take the value last set (the
// founding configuration, for one, sets no voters.version).
var gaugesFromStatus = map[string]func(Status) float64{
	"leases.held":    func(st Status) float64 { return float64(st.Leases) },
	"voters.version": func(st Status) float64 { return float64(st.Config.Version) },
}

// constHistogram reads h into a histogram in seconds. The buckets are read
// one by one while observations may land, so the count (their sum) and the
// sum of durations may be an observation or so apart; neither goes down.
func constHistogram(d *prometheus.Desc, h *histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(latencyBuckets))
	var count uint64
	for i, ub := range latencyBuckets {
		count += h.counts[i].Load()
		buckets[ub.Seconds()] = count
	}
	count += h.counts[len(latencyBuckets)].Load()
	sum := float64(h.sum.Load()) / 1e9
	return prometheus.MustNewConstHistogram(d, count, sum, buckets, labels...)
}

// promName is a family's Prometheus name: "lockmesh_", its go-metrics name
// with dots as underscores, and "_total" for a counter or
// "_duration_seconds" for a histogram (go-metrics names those samples
// "<name>.latency", in milliseconds).
func promName(name string, kind metricKind) string {
	n := "lockmesh_" + strings.ReplaceAll(name, ".", "_")
	switch kind {
	case counterKind:
		return n + "_total"
	case histogramKind:
		return n + "_duration_seconds"
	}
	return n
}

// quorumHealth is what gossip suggests about the voters' majority.
type quorumHealth struct {
	voters, alive, majority int
	healthy                 bool
}

// quorumHealthOf counts the configuration's voters that gossip shows alive
// against the majority they need. While a change is pending a lock needs a
// majority of the previous voters as well, so healthy requires both.
// Gossip is a hint: a voter it shows alive may not answer, and the mesh
// never sizes a quorum by it.
func quorumHealthOf(st Status) quorumHealth {
	alive := make(map[string]bool, len(st.Members))
	for _, mem := range st.Members {
		if mem.State == "alive" {
			alive[mem.Name] = true
		}
	}
	count := func(voters []string) (n, majority int) {
		for _, v := range voters {
			if alive[v] {
				n++
			}
		}
		return n, len(voters)/2 + 1
	}
	q := quorumHealth{voters: len(st.Config.Voters)}
	if q.voters == 0 {
		return q
	}
	q.alive, q.majority = count(st.Config.Voters)
	q.healthy = q.alive >= q.majority
	if st.Config.Pending && len(st.Config.Previous) > 0 {
		n, need := count(st.Config.Previous)
		q.healthy = q.healthy && n >= need
	}
	return q
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
