package mesh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Varying the peer name in every line does not get more lines through than
// the shared bucket allows; one key gets one line a minute; the bucket
// refills with time.
func TestLimiterCannotBeBypassedByNames(t *testing.T) {
	var l limiter
	now := time.Unix(1e9, 0)
	allowed := 0
	for i := range 100000 {
		if l.allowAt(fmt.Sprintf("malformed  flood-%d", i), now) {
			allowed++
		}
	}
	if allowed != limiterBurst {
		t.Fatalf("%d lines of 100000 names allowed at once, want %d", allowed, limiterBurst)
	}
	if got := l.dropped(); got != 100000-limiterBurst {
		t.Fatalf("%d dropped", got)
	}
	// An hour later: one more minute's worth at most, and each key once.
	now = now.Add(time.Hour)
	allowed = 0
	for i := range 1000 {
		if l.allowAt("same key", now) {
			allowed++
		}
		if l.allowAt(fmt.Sprintf("name-%d", i), now.Add(time.Duration(i)*time.Millisecond)) {
			allowed++
		}
	}
	if allowed > limiterBurst+1 {
		t.Fatalf("%d lines allowed in a second", allowed)
	}
	if !l.allowAt("same key", now.Add(2*time.Minute)) {
		t.Fatal("a key is still refused two minutes later")
	}
}

// A refusal is logged at DEBUG while it is of a moment (a restart or a
// join gossip has not spread), once a minute, and at WARN once it has
// lasted a minute with no gap of a minute: then it is a stranger or a
// second process. A gap starts it over.
func TestRefusalsWarnOnlyOnceTheyLast(t *testing.T) {
	var lines []string
	m := &Mesh{log: hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: writerFunc(func(p []byte) (int, error) {
		lines = append(lines, string(p))
		return len(p), nil
	})})}
	t0 := time.Unix(1e9, 0)
	for _, step := range []struct {
		at   time.Duration
		want string // "" for no line
	}{
		{0, "[DEBUG]"},
		{30 * time.Second, ""}, // once a minute
		{59 * time.Second, ""},
		{60 * time.Second, "[WARN]"}, // lasted a minute, seen every 30 s
		{90 * time.Second, ""},
		{200 * time.Second, "[DEBUG]"}, // a gap of 110 s: a new moment
	} {
		lines = nil
		m.logRefusalAt(t0.Add(step.at), "unknown peer x", "refusing", "peer", "x")
		switch {
		case step.want == "" && len(lines) > 0:
			t.Errorf("at %v: logged %q, want nothing", step.at, lines)
		case step.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], step.want)):
			t.Errorf("at %v: logged %q, want one %s line", step.at, lines, step.want)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
