package workload

import (
	"maps"
	"slices"
	"strings"
)

// Fairness says how evenly the grants of a contended key went to groups of
// workers (the nodes they run on).
type Fairness struct {
	// Grants is how many grants each group got.
	Grants map[string]int `json:"grants"`
	// MaxOverMin is the most grants of a group over the fewest (0 when a
	// group got none: no ratio).
	MaxOverMin float64 `json:"max_over_min"`
	// Jain is Jain's fairness index of the grants per group,
	// (Σx)²/(n·Σx²): 1 when every group got as many, 1/n when one got
	// them all.
	Jain float64 `json:"jain_index"`
}

// NodeOf is the group of a worker named "node/i": the node it runs on.
func NodeOf(worker string) string {
	node, _, _ := strings.Cut(worker, "/")
	return node
}

// FairnessOf counts holds by group(worker), over groups (every group that
// took part, so that one that got nothing counts as zero).
func FairnessOf(holds []Hold, groups []string, group func(worker string) string) *Fairness {
	f := &Fairness{Grants: map[string]int{}}
	for _, g := range groups {
		f.Grants[g] = 0
	}
	for _, h := range holds {
		f.Grants[group(h.Worker)]++
	}
	if len(f.Grants) == 0 {
		return f
	}
	var sum, sq float64
	lo, hi := -1, 0
	for _, g := range slices.Sorted(maps.Keys(f.Grants)) {
		x := f.Grants[g]
		sum += float64(x)
		sq += float64(x) * float64(x)
		if lo < 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	if sq > 0 {
		f.Jain = sum * sum / (float64(len(f.Grants)) * sq)
	}
	if lo > 0 {
		f.MaxOverMin = float64(hi) / float64(lo)
	}
	return f
}
