package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// report is everything one run measured; it is written as JSON as is.
type report struct {
	Date    string             `json:"date"`
	Command string             `json:"command"`
	Seconds float64            `json:"seconds"`
	Machine machine            `json:"machine"`
	Options map[string]any     `json:"options"`
	Rows    []workload.Row     `json:"rows"`
	Renewal *renewalResult     `json:"renewal,omitempty"`
	Crash   *crashResult       `json:"crash,omitempty"`
	Start   *startResult       `json:"start,omitempty"`
	Panics  int                `json:"panics,omitempty"`
	Ratios  map[string]float64 `json:"ratio_to_quorum_floor_p50,omitempty"`
	Floor   *workload.Summary  `json:"quorum_floor_latency,omitempty"`

	// Spread is, for a merged report, each case's figures in every run.
	Spread map[string]rowSpread `json:"spread,omitempty"`

	merged int // medians of this many runs (-merge): Ratios are given
}

type machine struct {
	Arch      string `json:"uname_m"`
	Kernel    string `json:"kernel"`
	CPU       string `json:"cpu_model"`
	NumCPU    int    `json:"nproc"`
	MemTotal  string `json:"mem_total"`
	Go        string `json:"go"`
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
}

func describeMachine() machine {
	m := machine{NumCPU: runtime.NumCPU(), Go: runtime.Version(), LoadStart: loadAverage()}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.Arch, m.Kernel = cString(u.Machine[:]), cString(u.Release[:])
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	var kb float64
	if _, err := fmt.Sscanf(m.MemTotal, "%f kB", &kb); err == nil {
		m.MemTotal = fmt.Sprintf("%.0f GiB", kb/(1<<20))
	}
	return m
}

func cString[T int8 | uint8](b []T) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// procField returns the value of the first "key: value" line of a /proc
// file.
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// floorRow is the quorum-round floor, the denominator of every ratio.
func (r *report) floorRow() *workload.Row {
	for i := range r.Rows {
		if r.Rows[i].Case == "floor-quorum" && r.Rows[i].Latency != nil && r.Rows[i].Latency.N > 0 {
			return &r.Rows[i]
		}
	}
	return nil
}

// ratios fills Ratios: each row's p50 over the quorum floor's p50.
func (r *report) ratios() {
	if r.merged > 0 {
		return
	}
	f := r.floorRow()
	if f == nil {
		return
	}
	r.Floor = f.Latency
	r.Ratios = map[string]float64{}
	for _, row := range r.Rows {
		if row.Latency != nil && row.Latency.N > 0 && !row.LoadedLatency {
			r.Ratios[row.Case] = row.Latency.P50 / f.Latency.P50
		}
	}
}

// write saves the report as JSON: o.out, or bench/results/<date>.json.
func (r *report) write(o options) (string, error) {
	r.ratios()
	path := o.out
	if path == "" {
		stamp := strings.NewReplacer(":", "", "-", "").Replace(r.Date)
		path = filepath.Join(o.root, "bench", "results", stamp+".json")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// us formats microseconds for the table.
func us(v float64) string {
	switch {
	case v <= 0:
		return "—"
	case v < 1000:
		return fmt.Sprintf("%.0f µs", v)
	case v < 1e6:
		return fmt.Sprintf("%.2f ms", v/1000)
	}
	return fmt.Sprintf("%.2f s", v/1e6)
}

// count formats a rate or count with thousands separators.
func count(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// markdown renders the tables and the machine line.
func (r *report) markdown() string {
	r.ratios()
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if len(r.Rows) > 0 {
		w("| setup | p50 | p99 | p99.9 | ×floor | ops/s (%d goroutines) | CPU µs/op | hand-over p50 |\n", r.workers())
		w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Rows {
			cells := []string{row.Setup, "—", "—", "—", "—", "—", "—", "—"}
			if l := row.Latency; l != nil && l.N > 0 {
				cells[1], cells[2], cells[3] = us(l.P50), us(l.P99), us(l.P999)
				if ratio, ok := r.Ratios[row.Case]; ok {
					cells[4] = fmt.Sprintf("%.1f×", ratio)
				}
			}
			if t := row.Throughput; t != nil && t.Ops > 0 {
				cells[5] = count(t.OpsPerSec)
				cells[6] = fmt.Sprintf("%.0f", t.CPUMicrosPerOp)
			}
			if h := row.Handover; h != nil && h.Handover != nil && h.Handover.N > 0 {
				cells[7] = us(h.Handover.P50)
			}
			if row.Error != "" {
				cells[0] += " — **failed: " + oneLine(row.Error) + "**"
			}
			w("| %s |\n", strings.Join(cells, " | "))
		}
		w("\n")
		if f := r.Floor; f != nil {
			if r.merged > 0 {
				w("Medians of %d runs. ×floor is the median of each run's p50 over that run's quorum-round floor p50 (median floor %s). ", r.merged, us(f.P50))
			} else {
				w("×floor is p50 over the quorum-round floor's p50 (%s), measured in this run. ", us(f.P50))
			}
		}
		w("Latency: one goroutine, Acquire+Release of one key (the floor rows: one round trip, one quorum round). " +
			"ops/s: Acquire+Release pairs per second, each goroutine on its own key. " +
			"CPU µs/op: CPU time of every process of the setup (nodes, servers and caller) per pair. " +
			"Hand-over: goroutines contending for one key, time from the start of a release to the grant to another goroutine.\n\n")
		for _, row := range r.Rows {
			var notes []string
			if h := row.Handover; h != nil {
				notes = append(notes, fmt.Sprintf("hand-over: %s; %d grants, p99 %s, %d to the goroutine that had just released, %d overlaps",
					h.Placement, h.Holds, us(h.Handover.P99), h.SameWorker, h.Overlaps))
			}
			if t := row.Throughput; t != nil && t.Errors > 0 {
				notes = append(notes, fmt.Sprintf("throughput: %d workers failed, first: %s", t.Errors, oneLine(t.FirstError)))
			}
			notes = append(notes, row.Notes...)
			if len(notes) > 0 {
				w("- **%s**: %s\n", row.Case, strings.Join(notes, "; "))
			}
		}
		w("\n")
		r.handoverMarkdown(&b)
		r.spreadMarkdown(&b)
		r.figuresMarkdown(&b)
	}
	if r.Renewal != nil {
		r.Renewal.markdown(&b)
	}
	if r.Start != nil {
		r.Start.markdown(&b)
	}
	if r.Crash != nil {
		r.Crash.markdown(&b)
	}
	m := r.Machine
	if r.merged > 0 {
		w("Runs %s, %.0fs each on average; %s, %s, nproc %d, %s, Linux %s, %s; load average (1, 5, 15 min) at start → end of each run: %s (a shared machine: other work ran beside the benchmark).\n",
			r.Date, r.Seconds, m.Arch, m.CPU, m.NumCPU, m.MemTotal, m.Kernel, m.Go, m.LoadStart)
	} else {
		w("Run %s, %.0fs; %s, %s, nproc %d, %s, Linux %s, %s; load average (1, 5, 15 min) %s at start, %s at end (a shared machine: other work ran beside the benchmark).\n",
			r.Date, r.Seconds, m.Arch, m.CPU, m.NumCPU, m.MemTotal, m.Kernel, m.Go, m.LoadStart, m.LoadEnd)
	}
	if r.Command != "" {
		w("Command: `%s`\n", strings.TrimSpace(r.Command))
	}
	return b.String()
}

// figuresMarkdown renders the rows that carry figures of their own (the
// scale and churn cases), each as a paragraph or table of its own.
func (r *report) figuresMarkdown(b *strings.Builder) {
	for _, row := range r.Rows {
		switch row.Case {
		case "scale", "scale-disk":
			scaleMarkdown(b, row, r.spreadOf(row.Case))
		case "churn":
			churnMarkdown(b, row, r.spreadOf(row.Case))
		}
	}
}

// spreadOf is a case's spread over merged runs (empty for one run).
func (r *report) spreadOf(c string) rowSpread {
	if r.merged == 0 {
		return rowSpread{}
	}
	return r.Spread[c]
}

// figure formats a row's figure, with its range over the merged runs when
// they differ: "12.3 (11.9 – 13.0)".
func figure(row workload.Row, s rowSpread, name string, f func(float64) string) string {
	v, ok := row.Figures[name]
	if !ok {
		return "—"
	}
	return withRange(v, s.Figures[name], f)
}

// withRange formats v, with the range of vs when there are several.
func withRange(v float64, vs []float64, f func(float64) string) string {
	out := f(v)
	if len(vs) > 1 {
		if lo, hi := f(slices.Min(vs)), f(slices.Max(vs)); lo != hi {
			out += fmt.Sprintf(" (%s – %s)", lo, hi)
		}
	}
	return out
}

// handoverMarkdown is the table of every row's hand-over figures: the
// tail as well as the median, and how the grants went to the nodes where
// that was measured.
func (r *report) handoverMarkdown(b *strings.Builder) {
	any := false
	for _, row := range r.Rows {
		if h := row.Handover; h != nil && h.Handover != nil && h.Handover.N > 0 {
			any = true
		}
	}
	if !any {
		return
	}
	if r.merged > 0 {
		fmt.Fprintf(b, "Hand-over, medians of %d runs (each figure the median of the runs' figures):\n\n", r.merged)
	} else {
		fmt.Fprintf(b, "Hand-over (from the start of a release to the grant to another goroutine):\n\n")
	}
	fmt.Fprintf(b, "| case | contenders | grants | p50 | p99 | p99.9 | max | grants per node | max/min | Jain |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, row := range r.Rows {
		h := row.Handover
		if h == nil || h.Handover == nil || h.Handover.N == 0 {
			continue
		}
		s := h.Handover
		per, ratio, jain := "—", "—", "—"
		if f := h.Fairness; f != nil {
			var parts []string
			for _, g := range slices.Sorted(maps.Keys(f.Grants)) {
				parts = append(parts, fmt.Sprintf("%s %d", g, f.Grants[g]))
			}
			per = strings.Join(parts, ", ")
			if f.MaxOverMin > 0 {
				ratio = fmt.Sprintf("%.2f×", f.MaxOverMin)
			} else {
				ratio = "∞"
			}
			jain = fmt.Sprintf("%.3f", f.Jain)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", row.Case, h.Placement, h.Holds,
			us(s.P50), us(s.P99), us(s.P999), us(s.Max), per, ratio, jain)
	}
	fmt.Fprintf(b, "\n")
}

func (r *report) workers() int {
	for _, row := range r.Rows {
		if row.Throughput != nil {
			return row.Throughput.Workers
		}
	}
	return 64
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.ReplaceAll(s, "|", "/")
}
