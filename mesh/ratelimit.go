package mesh

import (
	"sync"
	"time"
)

// limiter rate-limits the log lines about refused peers and forged input,
// so that a flood of bad input cannot flood the log. A line is keyed by
// what it reports and whom (a kind and a peer name or host): one line per
// key per minute. Names are chosen by whoever sends the input, so keys are
// not enough: an attacker varying names would get a line per name. On top,
// every key shares one bucket of limiterBurst lines, refilled at
// limiterRate, and at most limiterKeys keys are remembered (a key seen
// while the table is full of keys logged within the minute is refused, not
// made room for). Refused lines are counted (Status.LogLinesSuppressed).
type limiter struct {
	mu         sync.Mutex
	last       map[string]time.Time
	tokens     float64
	refilled   time.Time
	suppressed uint64
}

const (
	limiterKeys  = 1024
	limiterBurst = 30
	limiterRate  = 30.0 / 60 // lines per second, sustained
)

// allow reports whether a line with key may be logged now.
func (l *limiter) allow(key string) bool {
	return l.allowAt(key, time.Now())
}

func (l *limiter) allowAt(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[string]time.Time)
		l.tokens, l.refilled = limiterBurst, now
	}
	l.tokens = min(limiterBurst, l.tokens+now.Sub(l.refilled).Seconds()*limiterRate)
	l.refilled = now
	if t, ok := l.last[key]; ok && now.Sub(t) < time.Minute {
		l.suppressed++
		return false
	}
	if len(l.last) >= limiterKeys {
		for k, t := range l.last {
			if now.Sub(t) >= time.Minute {
				delete(l.last, k)
			}
		}
	}
	if len(l.last) >= limiterKeys || l.tokens < 1 {
		l.suppressed++
		return false
	}
	l.tokens--
	l.last[key] = now
	return true
}

// dropped is how many lines were refused so far.
func (l *limiter) dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suppressed
}
