package quorumtest

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is what the check of one key's history found.
type Verdict struct {
	Key string
	// Ops is how many operations were checked (amnesias included).
	Ops int
	// Result is porcupine's: Ok, Illegal, or Unknown when the check did
	// not finish in time. Anything but Ok fails the run.
	Result porcupine.CheckResult
	Took   time.Duration
	// Visualization is the HTML file porcupine drew of a failed check (""
	// when the check passed, or when writing it failed: VisualizationErr).
	Visualization    string
	VisualizationErr error
}

// Failed reports whether the check failed: not linearizable, or not
// decided in time (DESIGN §6: a porcupine timeout fails the run).
func (v Verdict) Failed() bool { return v.Result != porcupine.Ok }

func (v Verdict) String() string {
	var what string
	switch v.Result {
	case porcupine.Ok:
		what = "linearizable"
	case porcupine.Illegal:
		what = "not linearizable"
	default:
		what = fmt.Sprintf("undecided: the check timed out after %v, which fails the run", v.Took.Round(time.Millisecond))
	}
	s := fmt.Sprintf("the history of %q (%d operations) is %s", v.Key, v.Ops, what)
	switch {
	case v.Visualization != "":
		s += "; porcupine's visualisation: " + v.Visualization
	case v.VisualizationErr != nil:
		s += fmt.Sprintf("; no visualisation: %v", v.VisualizationErr)
	}
	return s
}

// CheckKeys runs porcupine over each key's history, each for at most
// timeout, and returns a verdict per key, in key order. For each key whose
// check failed, illegal or timed out, it writes porcupine's visualisation
// to a file (see ArtifactDir).
func (h *History) CheckKeys(timeout time.Duration) []Verdict {
	var out []Verdict
	for _, key := range h.Keys() {
		out = append(out, h.checkKey(key, timeout))
	}
	return out
}

func (h *History) checkKey(key string, timeout time.Duration) Verdict {
	m := Model()
	ops := h.checkedOps(key)
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(m, ops, timeout)
	v := Verdict{Key: key, Ops: len(ops), Result: res, Took: time.Since(start)}
	if v.Failed() {
		// Again for the drawing: the verbose check keeps the partial
		// linearizations (a fifth slower, so only for failures). An
		// illegal history is decided again; an undecided one gets a
		// shorter second chance, for a partial drawing.
		again := timeout
		if res == porcupine.Unknown {
			again = min(timeout, drawTimeout)
		}
		_, info := porcupine.CheckOperationsVerbose(m, ops, again)
		v.Visualization, v.VisualizationErr = h.visualize(m, info, key)
	}
	h.mu.Lock()
	if h.verdicts == nil {
		h.verdicts = make(map[string]Verdict)
	}
	h.verdicts[key] = v
	h.mu.Unlock()
	return v
}

// drawTimeout bounds the verbose check that draws a timed-out one.
const drawTimeout = 10 * time.Second

// Check runs CheckKeys and returns the keys whose check failed — not
// linearizable, or timed out (a timeout fails the run) — and, among them,
// those whose check timed out.
func (h *History) Check(timeout time.Duration) (bad, unknown []string) {
	for _, v := range h.CheckKeys(timeout) {
		if v.Failed() {
			bad = append(bad, v.Key)
		}
		if v.Result == porcupine.Unknown {
			unknown = append(unknown, v.Key)
		}
	}
	return bad, unknown
}

// Verify runs CheckKeys and fails t for each key whose check failed, with
// Explain's account and the path of the visualisation. Files are named
// after t unless SetName named the history.
func (h *History) Verify(t testing.TB, timeout time.Duration) []Verdict {
	t.Helper()
	h.mu.Lock()
	if h.name == "" {
		h.name = t.Name()
	}
	h.mu.Unlock()
	vs := h.CheckKeys(timeout)
	for _, v := range vs {
		if v.Failed() {
			t.Errorf("%s", h.Explain(v.Key, 30))
		}
	}
	return vs
}

// Explain renders a failed check of key for a failure message: what the
// check found, where its visualisation is, and, for a history that is not
// linearizable, the operations that return before the shortest failing
// prefix of calls, the last max of them.
func (h *History) Explain(key string, max int) string {
	h.mu.Lock()
	v, checked := h.verdicts[key]
	h.mu.Unlock()
	if !checked {
		v = h.checkKey(key, 10*time.Second)
	}
	var b strings.Builder
	b.WriteString(v.String())
	b.WriteString("\n")
	if v.Result != porcupine.Illegal {
		return b.String()
	}
	ops := h.checkedOps(key)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	m := Model()
	// Binary search for the shortest prefix (by call time) that fails.
	lo, hi := 1, len(ops)
	for lo < hi {
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(m, ops[:mid], 10*time.Second) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	fmt.Fprintf(&b, "%d operations; the first %d by call time are not linearizable; the last is marked >>\n", len(ops), lo)
	ops = ops[:lo]
	start := 0
	if max > 0 && len(ops) > max {
		start = len(ops) - max
	}
	for i := start; i < len(ops); i++ {
		op := ops[i]
		if i == len(ops)-1 {
			b.WriteString(">> ")
		}
		ret := fmt.Sprint(op.Return)
		if op.Return >= Infinity {
			ret = "∞"
		}
		fmt.Fprintf(&b, "[%d, %s] %v: %s\n", op.Call, ret, op.Metadata, m.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// ArtifactDir is where failed checks leave their visualisations: the
// directory in $LOCKMESH_ARTIFACTS, else lockmesh-artifacts in the
// system's temporary directory.
func ArtifactDir() string {
	if dir := os.Getenv("LOCKMESH_ARTIFACTS"); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "lockmesh-artifacts")
}

// visualize writes porcupine's drawing of a check to a new file named after
// the history and the key, and returns its path.
func (h *History) visualize(m porcupine.Model, info porcupine.LinearizationInfo, key string) (string, error) {
	h.mu.Lock()
	name := h.name
	h.mu.Unlock()
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	}
	dir := ArtifactDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(dir, fileName(name)+"-"+fileName(key))
	// Never overwrite: one test may fail many checks (seeds, eras).
	for i := 1; ; i++ {
		path := base + ".html"
		if i > 1 {
			path = fmt.Sprintf("%s-%d.html", base, i)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) && i < 1000 {
			continue
		}
		if err != nil {
			return "", err
		}
		f.Close()
		if err := porcupine.VisualizePath(m, info, path); err != nil {
			return "", err
		}
		return path, nil
	}
}

// fileName keeps letters, digits, '.', '-' and '_' of s, and turns the rest
// into '_'.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
