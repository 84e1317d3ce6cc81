package main

import (
	"sync"
	"time"
)

// expiry calls fire once no beat has come for a whole window: the rule
// that a client which stops talking to the agent loses what the agent
// holds for it. HTTP sessions (their refreshes) and connections of the
// socket protocol (every request) both beat one.
//
// Its timer fires at most once per window whatever the number of beats: a
// beat only moves the time of the last beat, and the timer, when it fires
// early, sleeps again for what is left.
type expiry struct {
	window time.Duration
	fire   func()

	mu      sync.Mutex
	last    time.Time // the last beat (monotonic clock)
	timer   *time.Timer
	stopped bool
}

// newExpiry starts the window now.
func newExpiry(window time.Duration, fire func()) *expiry {
	e := &expiry{window: window, fire: fire, last: time.Now()}
	e.timer = time.AfterFunc(window, e.check)
	return e
}

// beat restarts the window; false if it had already run out.
func (e *expiry) beat() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return false
	}
	e.last = time.Now()
	return true
}

// remaining is how long the window has left (0 once it has run out).
func (e *expiry) remaining() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return 0
	}
	return max(time.Until(e.last.Add(e.window)), 0)
}

// stop ends the window without firing; false if it had already fired or
// stopped.
func (e *expiry) stop() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return false
	}
	e.stopped = true
	e.timer.Stop()
	return true
}

func (e *expiry) check() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	if left := time.Until(e.last.Add(e.window)); left > 0 {
		e.timer.Reset(left)
		e.mu.Unlock()
		return
	}
	e.stopped = true
	e.mu.Unlock()
	e.fire()
}
