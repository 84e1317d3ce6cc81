package mesh

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// slogLines is a JSON slog handler's output, read back record by record.
type slogLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *slogLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *slogLines) records(t testing.TB) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		out = append(out, r)
	}
	s.buf.Reset()
	return out
}

func newSlogLines(level slog.Level) (*slogLines, *slog.Logger) {
	out := &slogLines{}
	return out, slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level, AddSource: true}))
}

// Each hclog level lands at its slog level, with the caller as its source.
func TestSlogLoggerLevels(t *testing.T) {
	out, sl := newSlogLines(slog.LevelDebug - 4)
	l := SlogLogger(sl)
	l.Trace("t")
	l.Debug("d")
	l.Info("i")
	l.Warn("w")
	l.Error("e")
	l.Log(hclog.NoLevel, "none")
	l.Log(hclog.Off, "off")
	want := []struct{ msg, level string }{
		{"t", "DEBUG-4"}, {"d", "DEBUG"}, {"i", "INFO"}, {"w", "WARN"}, {"e", "ERROR"}, {"none", "INFO"},
	}
	recs := out.records(t)
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r["msg"] != w.msg || r["level"] != w.level {
			t.Errorf("record %d: %v %v, want %s %s", i, r["level"], r["msg"], w.level, w.msg)
		}
		src, _ := r["source"].(map[string]any)
		if file, _ := src["file"].(string); filepath.Base(file) != "slog_test.go" {
			t.Errorf("record %d: source %v, want this file", i, src)
		}
	}
}

// The handler's level decides what hclog's callers see as enabled, and
// SetLevel adds a floor of its own, shared with derived loggers.
func TestSlogLoggerEnabled(t *testing.T) {
	out, sl := newSlogLines(slog.LevelWarn)
	l := SlogLogger(sl)
	if l.IsTrace() || l.IsDebug() || l.IsInfo() || !l.IsWarn() || !l.IsError() {
		t.Errorf("at Warn: trace %v debug %v info %v warn %v error %v", l.IsTrace(), l.IsDebug(), l.IsInfo(), l.IsWarn(), l.IsError())
	}
	if l.GetLevel() != hclog.Warn {
		t.Errorf("GetLevel %v, want Warn", l.GetLevel())
	}
	l.Info("dropped")
	sub := l.Named("sub")
	l.SetLevel(hclog.Error)
	sub.Warn("dropped by the floor")
	sub.Error("kept")
	if recs := out.records(t); len(recs) != 1 || recs[0]["msg"] != "kept" {
		t.Errorf("records %v, want the error only", recs)
	}
	if sub.GetLevel() != hclog.Error {
		t.Errorf("a derived logger's level %v after SetLevel(Error)", sub.GetLevel())
	}
	_, sl = newSlogLines(slog.LevelError + 1)
	if l := SlogLogger(sl); l.GetLevel() != hclog.Off {
		t.Errorf("above Error: GetLevel %v, want Off", l.GetLevel())
	}
}

// With and Named add attributes and the logger's name; ImpliedArgs and
// Name say what they added; ResetNamed replaces the name.
func TestSlogLoggerWithNamed(t *testing.T) {
	out, sl := newSlogLines(slog.LevelInfo)
	l := SlogLogger(sl).Named("lockmesh").With("node", "a")
	m := l.Named("memberlist")
	m.Info("hello", "peer", "b")
	if l.Name() != "lockmesh" || m.Name() != "lockmesh.memberlist" {
		t.Errorf("names %q, %q", l.Name(), m.Name())
	}
	if got := m.ImpliedArgs(); len(got) != 2 || got[0] != "node" || got[1] != "a" {
		t.Errorf("ImpliedArgs %v", got)
	}
	l.With("x", 1).Info("other")
	if got := l.ImpliedArgs(); len(got) != 2 {
		t.Errorf("With changed its parent's args: %v", got)
	}
	m.ResetNamed("gossip").Info("reset")
	recs := out.records(t)
	if len(recs) != 3 {
		t.Fatalf("records %v", recs)
	}
	if r := recs[0]; r["logger"] != "lockmesh.memberlist" || r["node"] != "a" || r["peer"] != "b" {
		t.Errorf("record %v", r)
	}
	if r := recs[1]; r["x"] != float64(1) || r["node"] != "a" || r["logger"] != "lockmesh" {
		t.Errorf("record %v", r)
	}
	if r := recs[2]; r["logger"] != "gossip" {
		t.Errorf("record %v", r)
	}
}

// memberlist's lines ("[WARN] memberlist: ...") through StandardLogger
// land at the level their prefix says, without it; ForceLevel wins.
func TestSlogLoggerStandardLogger(t *testing.T) {
	out, sl := newSlogLines(slog.LevelDebug - 4)
	l := SlogLogger(sl)
	std := l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	std.Print("[WARN] memberlist: Refuting a suspect message")
	std.Print("[ERR] memberlist: Failed to send")
	std.Print("[DEBUG] memberlist: Stream connection")
	std.Print("no prefix")
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}).Print("[ERROR] http: TLS handshake error")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true}).
		Print("2026/12/08 10:00:00 [TRACE] with a timestamp")
	want := []struct{ level, msg string }{
		{"WARN", "memberlist: Refuting a suspect message"},
		{"ERROR", "memberlist: Failed to send"},
		{"DEBUG", "memberlist: Stream connection"},
		{"INFO", "no prefix"},
		{"DEBUG", "http: TLS handshake error"},
		{"DEBUG-4", "with a timestamp"},
	}
	recs := out.records(t)
	if len(recs) != len(want) {
		t.Fatalf("records %v", recs)
	}
	for i, w := range want {
		if recs[i]["level"] != w.level || recs[i]["msg"] != w.msg {
			t.Errorf("line %d: %v %q, want %s %q", i, recs[i]["level"], recs[i]["msg"], w.level, w.msg)
		}
	}
}

// A mesh logging through the bridge: its records carry its node name and
// the "lockmesh" logger name, and memberlist's lines arrive too.
func TestSlogLoggerInAMesh(t *testing.T) {
	out, sl := newSlogLines(slog.LevelDebug)
	c := newCluster(t, clusterOpts{voters: 1, tweak: func(cfg *Config) { cfg.Logger = SlogLogger(sl) }})
	c.waitVoting()
	c.nodes[0].Shutdown()
	var mesh, gossip int
	for _, r := range out.records(t) {
		switch r["logger"] {
		case "lockmesh":
			mesh++
			if r["node"] != "node0" {
				t.Errorf("a record without its node: %v", r)
			}
		case "lockmesh.memberlist":
			gossip++
		}
	}
	if mesh == 0 || gossip == 0 {
		t.Errorf("%d records of the mesh, %d of memberlist; want both", mesh, gossip)
	}
}
