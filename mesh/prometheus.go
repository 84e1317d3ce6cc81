package mesh

import (
	"math"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of this node's metrics, labelled
// node="<Config.Name>". Register it on the registry you serve, once:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m.Collector())
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Counters are cumulative since New and every one is exported from the
// start, at zero until its first event, so a rare event is never lost
// between scrapes. Latencies are histograms in seconds. Voting state and
// quorum health are read from Status at each scrape. METRICS.md lists the
// families. Collector works whether or not Config.MetricSink is set.
func (m *Mesh) Collector() prometheus.Collector {
	c := &collector{m: m}
	node := prometheus.Labels{"node": m.cfg.Name}
	for _, mi := range metricList {
		d := prometheus.NewDesc(promName(mi.name, mi.kind), mi.help, nil, node)
		switch mi.kind {
		case counterKind:
			c.counters = append(c.counters, d)
		case gaugeKind:
			c.gauges = append(c.gauges, d)
			c.gaugeNames = append(c.gaugeNames, mi.name)
		case histogramKind:
			c.hists = append(c.hists, d)
		}
	}
	c.unlisted = [3]*prometheus.Desc{
		counterKind: prometheus.NewDesc("lockmesh_unlisted_total",
			"Counters the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
		gaugeKind: prometheus.NewDesc("lockmesh_unlisted",
			"Gauges the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
		histogramKind: prometheus.NewDesc("lockmesh_unlisted_latency_seconds",
			"Latencies the mesh reported that this version's list lacks (a bug: please report it).", []string{"metric"}, node),
	}
	c.voting = prometheus.NewDesc("lockmesh_voting_state",
		"This node's acceptor state: 1 for the state it is in, 0 for the others. "+
			"not_voter: not in the voter configuration; quarantined: a restarted voter waiting out MaxTTL; "+
			"catching_up: learning from the other voters; live: voting.",
		[]string{"state"}, node)
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
	counters, gauges, hists []*prometheus.Desc // in metricList's order, per kind
	gaugeNames              []string
	unlisted                [3]*prometheus.Desc
	voting                  *prometheus.Desc
	voters, alive, majority *prometheus.Desc
	healthy                 *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, ds := range [][]*prometheus.Desc{c.counters, c.gauges, c.hists, c.unlisted[:]} {
		for _, d := range ds {
			ch <- d
		}
	}
	for _, d := range []*prometheus.Desc{c.voting, c.voters, c.alive, c.majority, c.healthy} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := &c.m.stats
	for i, d := range c.counters {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(s.counters[i].Load()))
	}
	st := c.m.Status()
	for i, d := range c.gauges {
		v := math.Float64frombits(s.gauges[i].Load())
		if read := gaugesFromStatus[c.gaugeNames[i]]; read != nil {
			v = read(st)
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for i, d := range c.hists {
		ch <- constHistogram(d, &s.hists[i])
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

	state := votingState(st)
	for _, v := range votingStates {
		ch <- prometheus.MustNewConstMetric(c.voting, prometheus.GaugeValue, boolFloat(v == state), v)
	}
	q := quorumHealthOf(st)
	ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(q.voters))
	ch <- prometheus.MustNewConstMetric(c.alive, prometheus.GaugeValue, float64(q.alive))
	ch <- prometheus.MustNewConstMetric(c.majority, prometheus.GaugeValue, float64(q.majority))
	ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, boolFloat(q.healthy))
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

// promName is a figure's Prometheus name: "lockmesh_", its go-metrics name
// with dots as underscores, and "_total" for a counter or
// "_latency_seconds" for a histogram (go-metrics names those
// "<name>.latency", in milliseconds).
func promName(name string, kind metricKind) string {
	n := "lockmesh_" + strings.ReplaceAll(name, ".", "_")
	switch kind {
	case counterKind:
		return n + "_total"
	case histogramKind:
		return n + "_latency_seconds"
	}
	return n
}

// votingStates are the values of lockmesh_voting_state's state label;
// "unknown" is a state votingState does not know (a bug).
var votingStates = [...]string{"not_voter", "quarantined", "catching_up", "live", "unknown"}

// votingState maps Status.Voting to a label value of votingStates. It is
// the one place that knows how Status spells it.
func votingState(st Status) string {
	switch st.Voting {
	case "":
		return "not_voter"
	case "quarantined":
		return "quarantined"
	case "catching up":
		return "catching_up"
	case "live":
		return "live"
	}
	return "unknown"
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
