package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/bench/internal/workload"
)

// The machine is shared and noisy: one run is an anecdote. -merge reads the
// JSON files of several runs and prints one table of medians: each figure
// is the median of that figure over the runs that measured it, and each
// ratio the median of the runs' own ratios (every ratio is to the floor of
// its own run).

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// mergeReports reads the reports in paths and returns their medians.
func mergeReports(paths []string) (*report, error) {
	var reps []*report
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r := new(report)
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		r.ratios()
		reps = append(reps, r)
	}
	if len(reps) == 0 {
		return nil, fmt.Errorf("-merge: no file")
	}
	out := &report{Machine: reps[0].Machine, Options: reps[0].Options, merged: len(reps), Ratios: map[string]float64{}}
	var dates, loads []string
	for _, r := range reps {
		dates = append(dates, r.Date)
		loads = append(loads, r.Machine.LoadStart+" → "+r.Machine.LoadEnd)
		out.Seconds += r.Seconds / float64(len(reps))
	}
	out.Date = strings.Join(dates, ", ")
	out.Machine.LoadStart = strings.Join(loads, "; ")
	out.Machine.LoadEnd = ""
	out.Command = fmt.Sprintf("median of %d runs of: %s", len(reps), reps[0].Command)

	// Rows, in the order of the first report that has them.
	var order []string
	rows := map[string][]workload.Row{}
	for _, r := range reps {
		for _, row := range r.Rows {
			if _, seen := rows[row.Case]; !seen {
				order = append(order, row.Case)
			}
			rows[row.Case] = append(rows[row.Case], row)
		}
	}
	out.Spread = map[string]rowSpread{}
	for _, c := range order {
		out.Rows = append(out.Rows, medianRow(rows[c]))
		var ratios []float64
		for _, r := range reps {
			if v, ok := r.Ratios[c]; ok {
				ratios = append(ratios, v)
			}
		}
		if len(ratios) > 0 {
			out.Ratios[c] = median(ratios)
		}
		out.Spread[c] = spreadOf(rows[c], ratios)
	}
	var floors []float64
	for _, r := range reps {
		if f := r.floorRow(); f != nil {
			floors = append(floors, f.Latency.P50)
		}
	}
	if len(floors) > 0 {
		out.Floor = &workload.Summary{P50: median(floors), N: len(floors)}
	}
	out.Renewal = mergeRenewal(reps)
	out.Crash = mergeCrash(reps)
	return out, nil
}

// rowSpread is what one case measured in each run, so that a reader sees
// how far apart the runs were (the table shows the smallest and the
// largest).
type rowSpread struct {
	P50       []float64 `json:"p50_us"`
	P99       []float64 `json:"p99_us"`
	Ratio     []float64 `json:"ratio_to_quorum_floor_p50"`
	OpsPerSec []float64 `json:"ops_per_sec"`
	CPUPerOp  []float64 `json:"cpu_us_per_op"`
	Handover  []float64 `json:"handover_p50_us"`
	// Figures are the row's own figures (Row.Figures) in each run.
	Figures map[string][]float64 `json:"figures,omitempty"`
}

func spreadOf(rows []workload.Row, ratios []float64) rowSpread {
	s := rowSpread{Ratio: ratios}
	for _, r := range rows {
		if l := r.Latency; l != nil && l.N > 0 {
			s.P50 = append(s.P50, l.P50)
			s.P99 = append(s.P99, l.P99)
		}
		if t := r.Throughput; t != nil && t.Ops > 0 {
			s.OpsPerSec = append(s.OpsPerSec, t.OpsPerSec)
			s.CPUPerOp = append(s.CPUPerOp, t.CPUMicrosPerOp)
		}
		if h := r.Handover; h != nil && h.Handover != nil && h.Handover.N > 0 {
			s.Handover = append(s.Handover, h.Handover.P50)
		}
		for k, v := range r.Figures {
			if s.Figures == nil {
				s.Figures = map[string][]float64{}
			}
			s.Figures[k] = append(s.Figures[k], v)
		}
	}
	return s
}

// span formats the smallest and largest of v with f ("—" for none).
func span(v []float64, f func(float64) string) string {
	if len(v) == 0 {
		return "—"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if len(v) == 1 || f(lo) == f(hi) {
		return f(lo) + fmt.Sprintf(" (%d run)", len(v))
	}
	return fmt.Sprintf("%s – %s", f(lo), f(hi))
}

// spreadMarkdown is the table of each case's smallest and largest figure
// over the merged runs.
func (r *report) spreadMarkdown(b *strings.Builder) {
	if len(r.Spread) == 0 {
		return
	}
	ratio := func(v float64) string { return fmt.Sprintf("%.1f×", v) }
	plain := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	fmt.Fprintf(b, "Spread over the %d runs (smallest – largest of each run's figure):\n\n", r.merged)
	fmt.Fprintf(b, "| case | p50 | ×floor | ops/s | CPU µs/op | hand-over p50 |\n|---|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		s, ok := r.Spread[row.Case]
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", row.Case, span(s.P50, us), span(s.Ratio, ratio),
			span(s.OpsPerSec, count), span(s.CPUPerOp, plain), span(s.Handover, us))
	}
	fmt.Fprintf(b, "\n")
}

// medianRow is the median of one case's rows over the runs.
func medianRow(rows []workload.Row) workload.Row {
	// The setup, notes and sizes come from the first run that has them: a
	// run that failed early may have none.
	m := rows[0]
	for _, r := range rows {
		if r.Error == "" {
			m = r
			break
		}
	}
	m.Error = ""
	var (
		p50, p99, p999, ops, cpu, h50, h99 []float64
		h999, hmax, holds, ratio, jain     []float64
		perNode                            = map[string][]float64{}
		lat                                *workload.Summary
		tp                                 *workload.ThroughputResult
		ho                                 *workload.HandoverResult
	)
	failed := 0
	for _, r := range rows {
		if r.Error != "" {
			failed++
		}
		if l := r.Latency; l != nil && l.N > 0 {
			p50, p99, p999 = append(p50, l.P50), append(p99, l.P99), append(p999, l.P999)
			lat = cmp.Or(lat, l)
		}
		if t := r.Throughput; t != nil && t.Ops > 0 {
			ops, cpu = append(ops, t.OpsPerSec), append(cpu, t.CPUMicrosPerOp)
			tp = cmp.Or(tp, t)
		}
		if h := r.Handover; h != nil && h.Handover != nil && h.Handover.N > 0 {
			h50, h99 = append(h50, h.Handover.P50), append(h99, h.Handover.P99)
			h999, hmax = append(h999, h.Handover.P999), append(hmax, h.Handover.Max)
			holds = append(holds, float64(h.Holds))
			if f := h.Fairness; f != nil {
				ratio, jain = append(ratio, f.MaxOverMin), append(jain, f.Jain)
				for g, n := range f.Grants {
					perNode[g] = append(perNode[g], float64(n))
				}
			}
			ho = cmp.Or(ho, h)
		}
	}
	if len(p50) > 0 {
		m.Latency = &workload.Summary{N: lat.N, P50: median(p50), P99: median(p99), P999: median(p999)}
	} else {
		m.Latency = nil
	}
	if len(ops) > 0 {
		m.Throughput = &workload.ThroughputResult{Workers: tp.Workers, Ops: 1, OpsPerSec: median(ops), CPUMicrosPerOp: median(cpu)}
	} else {
		m.Throughput = nil
	}
	if len(h50) > 0 {
		h := *ho
		h.Handover = &workload.Summary{N: 1, P50: median(h50), P99: median(h99), P999: median(h999), Max: median(hmax)}
		h.Holds = int(median(holds))
		h.Fairness = nil
		if len(jain) > 0 {
			f := &workload.Fairness{Grants: map[string]int{}, MaxOverMin: median(ratio), Jain: median(jain)}
			for g, ns := range perNode {
				f.Grants[g] = int(median(ns))
			}
			h.Fairness = f
		}
		m.Handover = &h
	} else {
		m.Handover = nil
	}
	m.Figures, m.Curve = medianFigures(rows), medianCurve(rows)
	if failed > 0 {
		m.Notes = append(slices.Clone(m.Notes), fmt.Sprintf("failed in %d of %d runs (first error: %s)", failed, len(rows), oneLine(firstError(rows))))
		if failed == len(rows) {
			m.Error = firstError(rows)
		}
	}
	return m
}

// medianFigures is the median of each of the rows' Figures over the runs
// that have it.
func medianFigures(rows []workload.Row) map[string]float64 {
	all := map[string][]float64{}
	for _, r := range rows {
		for k, v := range r.Figures {
			all[k] = append(all[k], v)
		}
	}
	if len(all) == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range all {
		out[k] = median(v)
	}
	return out
}

// medianCurve is, at each point any run reached, the median of each figure
// over the runs that reached it.
func medianCurve(rows []workload.Row) []workload.Point {
	var at []float64
	byAt := map[float64][]workload.Row{}
	for _, r := range rows {
		for _, p := range r.Curve {
			if _, ok := byAt[p.At]; !ok {
				at = append(at, p.At)
			}
			byAt[p.At] = append(byAt[p.At], workload.Row{Figures: p.Figures})
		}
	}
	slices.Sort(at)
	var out []workload.Point
	for _, x := range at {
		out = append(out, workload.Point{At: x, Figures: medianFigures(byAt[x])})
	}
	return out
}

func firstError(rows []workload.Row) string {
	for _, r := range rows {
		if r.Error != "" {
			return r.Error
		}
	}
	return ""
}

// mergeRenewal takes, for each lease count, the median of each node's
// figures over the runs that reached that count; lost leases are listed
// per run.
func mergeRenewal(reps []*report) *renewalResult {
	var out *renewalResult
	levels := map[int][]renewalLevel{}
	for _, r := range reps {
		if r.Renewal == nil {
			continue
		}
		if out == nil {
			out = &renewalResult{Setup: r.Renewal.Setup, Notes: r.Renewal.Notes}
		}
		for _, lv := range r.Renewal.Levels {
			levels[lv.Leases] = append(levels[lv.Leases], lv)
		}
	}
	if out == nil {
		return nil
	}
	var counts []int
	for n := range levels {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	for _, n := range counts {
		lvs := levels[n]
		m := renewalLevel{Leases: n}
		pick := func(f func(renewalLevel) float64) float64 {
			var xs []float64
			for _, lv := range lvs {
				xs = append(xs, f(lv))
			}
			return median(xs)
		}
		m.AcquireSeconds = pick(func(l renewalLevel) float64 { return l.AcquireSeconds })
		m.WindowSeconds = pick(func(l renewalLevel) float64 { return l.WindowSeconds })
		for i, node := range lvs[0].Nodes {
			at := func(l renewalLevel) nodeCost {
				if i < len(l.Nodes) {
					return l.Nodes[i]
				}
				return nodeCost{}
			}
			m.Nodes = append(m.Nodes, nodeCost{
				Node:              node.Node,
				CPUPercent:        pick(func(l renewalLevel) float64 { return at(l).CPUPercent }),
				MessagesSec:       pick(func(l renewalLevel) float64 { return at(l).MessagesSec }),
				ReceivedSec:       pick(func(l renewalLevel) float64 { return at(l).ReceivedSec }),
				WrittenSec:        pick(func(l renewalLevel) float64 { return at(l).WrittenSec }),
				RenewedSec:        pick(func(l renewalLevel) float64 { return at(l).RenewedSec }),
				HeapBytesPerLease: pick(func(l renewalLevel) float64 { return at(l).HeapBytesPerLease }),
			})
		}
		var lost, errs []string
		for _, lv := range lvs {
			lost = append(lost, fmt.Sprint(lv.Lost))
			m.Lost = max(m.Lost, lv.Lost)
			if lv.Error != "" {
				errs = append(errs, oneLine(lv.Error))
			}
		}
		if m.Lost > 0 {
			errs = append(errs, "leases lost per run: "+strings.Join(lost, ", "))
		}
		if len(lvs) < len(reps) {
			errs = append(errs, fmt.Sprintf("reached in %d of %d runs", len(lvs), len(reps)))
		}
		m.Error = strings.Join(errs, "; ")
		out.Levels = append(out.Levels, m)
	}
	return out
}

// mergeCrash pools the crash trials of every run.
func mergeCrash(reps []*report) *crashResult {
	var out *crashResult
	var took []time.Duration
	for _, r := range reps {
		if r.Crash == nil {
			continue
		}
		if out == nil {
			c := *r.Crash
			out = &c
			out.TrialsMs, out.HolderLeftMs, out.Error = nil, nil, ""
		}
		out.TrialsMs = append(out.TrialsMs, r.Crash.TrialsMs...)
		out.HolderLeftMs = append(out.HolderLeftMs, r.Crash.HolderLeftMs...)
		for _, ms := range r.Crash.TrialsMs {
			took = append(took, time.Duration(ms*float64(time.Millisecond)))
		}
	}
	if out != nil {
		out.CrashToGrant = workload.Summarize(took)
	}
	return out
}
