package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/lockmesh/lockmesh/lease"
)

// store stands for the resource a lock protects: a database row, a file, an
// API. It holds one counter, and every write goes through a lease.Fence,
// which refuses a token lower than the highest it has seen.
type store struct {
	fence lease.Fence

	mu     sync.Mutex // keeps the race detector happy; it is not the lock
	value  int
	tokens []uint64 // the token of every accepted write, in order
}

// increment adds 1 to the counter under token, inside fence.Apply: a read,
// some work, then the write. It returns the values before and after, or the
// fence's *lease.StaleTokenError when token is too old.
func (s *store) increment(key string, token uint64) (before, after int, err error) {
	err = s.fence.Apply(key, token, func() error {
		before = s.get()
		time.Sleep(200 * time.Microsecond) // the "work" between read and write
		after = before + 1
		s.mu.Lock()
		s.value = after
		s.tokens = append(s.tokens, token)
		s.mu.Unlock()
		return nil
	})
	return before, after, err
}

func (s *store) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

// checkTokens reports an error unless exactly writes writes were accepted,
// each with a token above the one before (every grant writes once).
func (s *store) checkTokens(writes int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tokens) != writes {
		return fmt.Errorf("%d writes accepted, expected %d", len(s.tokens), writes)
	}
	for i := 1; i < len(s.tokens); i++ {
		if s.tokens[i] <= s.tokens[i-1] {
			return fmt.Errorf("write %d carried token %d, not above the previous write's %d",
				i+1, s.tokens[i], s.tokens[i-1])
		}
	}
	return nil
}

// tokenRange returns the first and last accepted tokens.
func (s *store) tokenRange() (first, last uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tokens) == 0 {
		return 0, 0
	}
	return s.tokens[0], s.tokens[len(s.tokens)-1]
}
