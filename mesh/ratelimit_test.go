package mesh

import (
	"fmt"
	"testing"
	"time"
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
