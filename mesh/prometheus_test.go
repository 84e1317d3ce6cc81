package mesh

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockmesh/lockmesh/mesh/internal/wire"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// A Prometheus server scraping a node sees every family with its type and
// unit, a series per value of its label, the figures of what the node did,
// its voting state (a series per VotingState), build information and
// quorum health, and a counter that moved once stays there scrape after
// scrape.
func TestPrometheusScrape(t *testing.T) {
	c := newCluster(t, clusterOpts{voters: 3})
	c.waitVoting()
	m := c.nodes[0]

	// Every node on one registry, as a process running several would; the
	// pedantic registry checks each metric against its description.
	reg := prometheus.NewPedanticRegistry()
	for _, n := range c.nodes {
		reg.MustRegister(n.Collector())
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const pairs = 5
	lock := func(n int) {
		for i := 0; i < n; i++ {
			l, err := m.Acquire(ctx, fmt.Sprintf("k%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	lock(pairs)
	held, err := c.nodes[1].Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(ctx, "held"); !errors.Is(err, ErrLocked) {
		t.Fatalf("a try of a held key: %v", err)
	}
	held.Release(ctx)
	m.incr("gossip.bad_meta", 1) // a rare event, once
	m.incr("no.such.metric", 2)  // a name missing from metricList

	fams := scrape(t, srv.URL)
	for _, fam := range metricFamilies {
		name := promName(fam.name, fam.kind)
		f := fams[name]
		if f == nil {
			t.Errorf("%s (%s) missing", name, fam.name)
			continue
		}
		want := map[metricKind]dto.MetricType{
			counterKind: dto.MetricType_COUNTER, gaugeKind: dto.MetricType_GAUGE, histogramKind: dto.MetricType_HISTOGRAM,
		}[fam.kind]
		if f.GetType() != want {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), want)
		}
		if (fam.kind == counterKind) != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: only counters end in _total", name)
		}
		if (fam.kind == histogramKind) != strings.HasSuffix(name, "_duration_seconds") {
			t.Errorf("%s: only histograms, of durations, end in _duration_seconds", name)
		}
		perNode := max(len(fam.values), 1)
		if len(f.GetMetric()) != perNode*len(c.nodes) {
			t.Errorf("%s: %d series, want %d per node (%d nodes)", name, len(f.GetMetric()), perNode, len(c.nodes))
		}
		for _, v := range fam.values {
			series(t, fams, name, "node1", fam.label, v.value)
		}
	}
	noReasonInNames(t, fams)

	if v := value(t, fams, "lockmesh_leases_granted_total", "node0"); v < pairs {
		t.Errorf("leases granted on node0: %v, want at least %d", v, pairs)
	}
	if v := value(t, fams, "lockmesh_messages_sent_total", "node0"); v == 0 {
		t.Error("node0 sent no ballot messages, it says")
	}
	if v := value(t, fams, "lockmesh_leases_held", "node0"); v != 0 {
		t.Errorf("leases held on node0: %v after releasing all", v)
	}
	if v, want := value(t, fams, "lockmesh_voters_version", "node0"), m.Status().Config.Version; v != float64(want) {
		t.Errorf("voters version on node0: %v, want %d", v, want)
	}

	// Duration: a histogram in seconds, with the buckets of latencyBuckets,
	// by outcome.
	h := series(t, fams, "lockmesh_acquire_duration_seconds", "node0", "outcome", "granted").GetHistogram()
	if h.GetSampleCount() < pairs {
		t.Errorf("acquire latency: %d samples, want at least %d", h.GetSampleCount(), pairs)
	}
	if n := series(t, fams, "lockmesh_acquire_duration_seconds", "node0", "outcome", "locked").GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("acquires that found the key locked: %d, want 1 (and not among the granted)", n)
	}
	if h.GetSampleSum() <= 0 || h.GetSampleSum() > 20 { // seconds, not ms or ns: the test's own deadline bounds it
		t.Errorf("acquire latency: sum %v s for %d acquires", h.GetSampleSum(), h.GetSampleCount())
	}
	var bounds []float64
	for _, b := range h.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) { // the text format spells out +Inf
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	var want []float64
	for _, b := range latencyBuckets {
		want = append(want, b.Seconds())
	}
	if !slices.Equal(bounds, want) {
		t.Errorf("acquire latency buckets %v, want %v", bounds, want)
	}
	if b := h.GetBucket(); b[len(b)-1].GetCumulativeCount() > h.GetSampleCount() {
		t.Errorf("acquire latency: last bucket %d above the count %d", b[len(b)-1].GetCumulativeCount(), h.GetSampleCount())
	}

	// Voting state: a series for every state, the one it is in at 1.
	for _, n := range c.names {
		for _, s := range []string{"not_voter", "quarantined", "catching_up", "live", "silenced", "disk_failed"} {
			want := boolFloat(s == "live")
			if v := labelled(t, fams, "lockmesh_voting_state", n, "state", s); v != want {
				t.Errorf("%s: lockmesh_voting_state{state=%q} = %v, want %v", n, s, v, want)
			}
		}
		if got := len(fams["lockmesh_voting_state"].GetMetric()); got != len(votingStateNames)*len(c.nodes) {
			t.Errorf("lockmesh_voting_state: %d series, want %d states for each of %d nodes", got, len(votingStateNames), len(c.nodes))
		}
	}
	// Build information: one series per node at 1, naming this Go.
	b := series(t, fams, "lockmesh_build_info", "node0")
	labels := map[string]string{}
	for _, lp := range b.GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	if b.GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() || labels["version"] == "" ||
		labels["protocol"] != strconv.Itoa(wire.MaxVersion) {
		t.Errorf("lockmesh_build_info %v = %v", labels, b.GetGauge().GetValue())
	}
	// Quorum health, as gossip shows it: all three alive.
	for name, want := range map[string]float64{
		"lockmesh_quorum_voters": 3, "lockmesh_quorum_voters_alive": 3, "lockmesh_quorum_majority": 2, "lockmesh_quorum_healthy": 1,
	} {
		if v := value(t, fams, name, "node1"); v != want {
			t.Errorf("%s on node1: %v, want %v", name, v, want)
		}
	}
	if v := labelled(t, fams, "lockmesh_unlisted_total", "node0", "metric", "no.such.metric"); v != 2 {
		t.Errorf("an unlisted counter: %v, want 2", v)
	}

	// The rare counter does not vanish: later scrapes, with other activity
	// in between, still show it.
	for i := 0; i < 3; i++ {
		lock(2)
		fams = scrape(t, srv.URL)
		if v := labelled(t, fams, "lockmesh_gossip_refused_total", "node0", "reason", "bad_meta"); v != 1 {
			t.Fatalf("scrape %d: lockmesh_gossip_refused_total{reason=\"bad_meta\"} = %v, want 1", i+2, v)
		}
		if v := labelled(t, fams, "lockmesh_gossip_refused_total", "node1", "reason", "bad_meta"); v != 0 {
			t.Fatalf("scrape %d: node1's lockmesh_gossip_refused_total{reason=\"bad_meta\"} = %v, want 0", i+2, v)
		}
	}
}

// scrape fetches the text exposition at url and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

// series finds the series of family name for node (and one more label
// pair, if given).
func series(t *testing.T, fams map[string]*dto.MetricFamily, name, node string, label ...string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("%s missing", name)
	}
next:
	for _, s := range f.GetMetric() {
		want := map[string]string{"node": node}
		if len(label) == 2 {
			want[label[0]] = label[1]
		}
		for _, lp := range s.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
			delete(want, lp.GetName())
		}
		if len(want) == 0 {
			return s
		}
	}
	t.Fatalf("%s has no series for node %s %v", name, node, label)
	return nil
}

// value is a counter's or gauge's value.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name, node string) float64 {
	t.Helper()
	s := series(t, fams, name, node)
	if s.GetCounter() != nil {
		return s.GetCounter().GetValue()
	}
	return s.GetGauge().GetValue()
}

func labelled(t *testing.T, fams map[string]*dto.MetricFamily, name, node, label, v string) float64 {
	t.Helper()
	s := series(t, fams, name, node, label, v)
	if s.GetCounter() != nil {
		return s.GetCounter().GetValue()
	}
	return s.GetGauge().GetValue()
}

// Every metric name the package's code reports is in metricList, every name
// listed is reported somewhere, and docs/metrics.md documents every family
// and every value of its label.
func TestMetricListComplete(t *testing.T) {
	listed := map[string]bool{}
	for _, mi := range metricList {
		listed[mi.name] = true
	}
	used := usedMetricNames(t)
	for name := range used {
		if !listed[name] {
			t.Errorf("%q is reported but not in metricList", name)
		}
	}
	for name := range listed {
		if !used[name] {
			t.Errorf("%q is in metricList but nothing reports it", name)
		}
	}

	for name := range gaugesFromStatus {
		if i, ok := metricIndex[name]; !ok || metricList[i].kind != gaugeKind {
			t.Errorf("gaugesFromStatus reads %q, not a listed gauge", name)
		}
	}

	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	families := []string{"lockmesh_voting_state", "lockmesh_build_info", "lockmesh_quorum_voters", "lockmesh_quorum_voters_alive",
		"lockmesh_quorum_majority", "lockmesh_quorum_healthy", "lockmesh_unlisted_total"}
	for _, fam := range metricFamilies {
		families = append(families, promName(fam.name, fam.kind))
		for _, v := range fam.values {
			if !strings.Contains(string(doc), "`"+v.value+"`") {
				t.Errorf("docs/metrics.md does not list %s's %s `%s`", promName(fam.name, fam.kind), fam.label, v.value)
			}
		}
	}
	for _, f := range families {
		if !strings.Contains(string(doc), "`"+f+"`") {
			t.Errorf("docs/metrics.md does not list `%s`", f)
		}
	}
}

// noReasonInNames fails if a family's name ends in one of the values that
// a reason or limit label carries: that event belongs in the family with
// the label, where a sum counts it once.
func noReasonInNames(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name := range fams {
		// What a family counts comes last in its name, before the unit:
		// lockmesh_transport_refused_plaintext_total was such a name.
		core := strings.TrimSuffix(strings.TrimSuffix(name, "_total"), "_duration_seconds")
		for _, fam := range metricFamilies {
			if fam.label != "reason" && fam.label != "limit" {
				continue
			}
			for _, v := range fam.values {
				if strings.HasSuffix(core, "_"+v.value) {
					t.Errorf("%s names the %s %q of %s", name, fam.label, v.value, promName(fam.name, fam.kind))
				}
			}
		}
	}
}

// usedMetricNames reads the package's code for the names it reports: the
// literal first argument of incr, gauge and measure, and every string
// literal shaped like a dotted metric name (the limit and refusal
// classifiers return those).
func usedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	dotted := regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)+$`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || path == "metrics.go" {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) == 0 || !slices.Contains([]string{"incr", "gauge", "measure", "measureN"}, sel.Sel.Name) {
					return true
				}
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					used[s] = true
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, _ := strconv.Unquote(n.Value); dotted.MatchString(s) {
						used[s] = true
					}
				}
			}
			return true
		})
	}
	// gaugeLeases, in metrics.go itself.
	used["leases.held"] = true
	return used
}

// Every VotingState has a label of its own, spelt as before VotingState
// had names (underscores).
func TestVotingStateLabels(t *testing.T) {
	got := map[string]VotingState{}
	for _, v := range votingStateLabels() {
		if o, dup := got[v.label]; dup {
			t.Errorf("%v and %v share the label %q", o, v.state, v.label)
		}
		got[v.label] = v.state
	}
	for s := NotVoter; s <= DiskFailed; s++ {
		if l := strings.ReplaceAll(s.String(), "-", "_"); got[l] != s {
			t.Errorf("%v has no label (%q)", s, l)
		}
	}
	if got["catching_up"] != CatchingUp || got["not_voter"] != NotVoter {
		t.Errorf("labels %v", got)
	}
}

// The module's version comes from the main module when it is lockmesh,
// from the dependency when an application embeds it, and from a replace
// directive's target.
func TestModuleVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"the agent", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.4.0"}}, "v1.4.0"},
		{"the agent from a work tree", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		{"embedded", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.1.0"}, {Path: modulePath, Version: "v1.3.2"}}}, "v1.3.2"},
		{"replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.2", Replace: &debug.Module{Path: "../lockmesh"}}}}, "(devel)"},
		{"replaced by a fork", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.2", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.3.3"}}}}, "v1.3.3"},
	} {
		if got := moduleVersionOf(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestQuorumHealth(t *testing.T) {
	members := func(states ...string) []Member { // node0, node1, ... in these states
		var out []Member
		for i, s := range states {
			out = append(out, Member{Name: fmt.Sprintf("node%d", i), State: s})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		st   Status
		want quorumHealth
	}{
		{"no configuration yet", Status{Members: members("alive")}, quorumHealth{}},
		{"all alive", Status{Members: members("alive", "alive", "alive"), Config: Configuration{Voters: []string{"node0", "node1", "node2"}}},
			quorumHealth{voters: 3, alive: 3, majority: 2, healthy: true}},
		{"one dead of three", Status{Members: members("alive", "dead", "alive"), Config: Configuration{Voters: []string{"node0", "node1", "node2"}}},
			quorumHealth{voters: 3, alive: 2, majority: 2, healthy: true}},
		{"two gone of three", Status{Members: members("alive", "dead", "left"), Config: Configuration{Voters: []string{"node0", "node1", "node2"}}},
			quorumHealth{voters: 3, alive: 1, majority: 2}},
		{"a voter gossip never showed", Status{Members: members("alive", "alive"), Config: Configuration{Voters: []string{"node0", "node1", "node2", "node9"}}},
			quorumHealth{voters: 4, alive: 2, majority: 3}},
		{"non-voters do not count", Status{Members: members("alive", "alive", "alive", "alive"), Config: Configuration{Voters: []string{"node0", "node8", "node9"}}},
			quorumHealth{voters: 3, alive: 1, majority: 2}},
		{"pending change, old majority gone", Status{Members: members("alive", "alive", "alive", "dead", "dead"),
			Config: Configuration{Voters: []string{"node0", "node1", "node2"}, Pending: true, Previous: []string{"node0", "node3", "node4"}}},
			quorumHealth{voters: 3, alive: 3, majority: 2}},
		{"pending change, both majorities alive", Status{Members: members("alive", "alive", "alive", "alive"),
			Config: Configuration{Voters: []string{"node0", "node1", "node2"}, Pending: true, Previous: []string{"node0", "node1", "node3"}}},
			quorumHealth{voters: 3, alive: 3, majority: 2, healthy: true}},
	} {
		if got := quorumHealthOf(tc.st); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A duration on a bucket's bound counts in that bucket (Prometheus' le is
// inclusive); one above every bound only in the count.
func TestHistogramBuckets(t *testing.T) {
	var h histogram
	h.observe(latencyBuckets[0], 1)
	h.observe(latencyBuckets[0]+1, 1)
	h.observe(-time.Second, 1) // a clock step back: counted as zero
	h.observe(time.Hour, 1)
	m := &dto.Metric{}
	if err := constHistogram(prometheus.NewDesc("x_seconds", "x", nil, nil), &h).Write(m); err != nil {
		t.Fatal(err)
	}
	hist := m.GetHistogram()
	if got := hist.GetBucket()[0].GetCumulativeCount(); got != 2 {
		t.Errorf("first bucket (%v s): %d, want 2", hist.GetBucket()[0].GetUpperBound(), got)
	}
	if got := hist.GetBucket()[1].GetCumulativeCount(); got != 3 {
		t.Errorf("second bucket: %d, want 3", got)
	}
	if got := hist.GetSampleCount(); got != 4 {
		t.Errorf("count %d, want 4", got)
	}
	if want := (2*latencyBuckets[0] + 1 + time.Hour).Seconds(); math.Abs(hist.GetSampleSum()-want) > 1e-9 {
		t.Errorf("sum %v s, want %v", hist.GetSampleSum(), want)
	}
}

// BenchmarkMetricEvent measures what one event costs the hot path with no
// go-metrics sink: a counter increment from every core at once, and a
// latency observation.
//
//	go test -run '^$' -bench MetricEvent ./mesh/
func BenchmarkMetricEvent(b *testing.B) {
	m := &Mesh{}
	m.stats.init()
	b.Run("incr", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.incr("messages.sent", 1)
			}
		})
	})
	b.Run("measure", func(b *testing.B) {
		start := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.measure("acquire.granted", start)
			}
		})
	})
}
