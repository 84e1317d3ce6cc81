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

// lasting tells a refusal of a moment from one that lasts. A restarted or
// new node is refused for a moment (gossip has not yet shown its join, or
// its new process, to every peer), which needs nobody; a stranger or a
// second process with a node's name is refused for as long as it keeps
// trying, which an operator must look into. It remembers, per key (a kind
// and a peer), since when the key has been seen with no gap of
// refusalGrace, for at most limiterKeys keys.
type lasting struct {
	mu   sync.Mutex
	seen map[string]lastingSpan
}

type lastingSpan struct{ first, last time.Time }

// refusalGrace is how long a refusal may last and still be of a moment:
// gossip spreads a join within a push/pull interval (30 s in memberlist's
// LAN defaults).
const refusalGrace = time.Minute

// note records key seen at now and returns how long it has lasted (zero
// when new, or when the table is full of keys seen within refusalGrace).
func (l *lasting) note(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[string]lastingSpan)
	}
	s, ok := l.seen[key]
	if !ok || now.Sub(s.last) >= refusalGrace {
		s.first = now
	}
	s.last = now
	if !ok && len(l.seen) >= limiterKeys {
		for k, o := range l.seen {
			if now.Sub(o.last) >= refusalGrace {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= limiterKeys {
			return 0
		}
	}
	l.seen[key] = s
	return now.Sub(s.first)
}

// logRefusal logs a refusal of key: at DEBUG while it has lasted less than
// refusalGrace (a restart or a join not yet seen), at WARN once it lasts
// longer; one line a minute per key either way (noisy).
func (m *Mesh) logRefusal(key, msg string, args ...any) {
	m.logRefusalAt(time.Now(), key, msg, args...)
}

func (m *Mesh) logRefusalAt(now time.Time, key, msg string, args ...any) {
	lasted := m.lasting.note(key, now)
	if !m.noisy.allowAt(key, now) {
		return
	}
	if lasted < refusalGrace {
		m.log.Debug(msg, args...)
		return
	}
	m.log.Warn(msg, append(args, "for", lasted.Round(time.Second))...)
}
