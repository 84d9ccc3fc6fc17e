// Package logsample samples repeated log lines: during an outage a loop
// fails once a second on every replica, and one line per interval with the
// count since the last is what an operator can read.
package logsample

import (
	"sync"
	"time"
)

// Sampler counts events and says when one should be logged: the first,
// then at most one per interval. Safe for concurrent use; the zero value
// is ready.
type Sampler struct {
	mu    sync.Mutex
	last  time.Time
	count int
}

// Add counts one event at now and reports whether to log it, with how
// many events (this one included) the line stands for.
func (s *Sampler) Add(now time.Time, every time.Duration) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if !s.last.IsZero() && now.Sub(s.last) < every {
		return 0, false
	}
	n := s.count
	s.count, s.last = 0, now
	return n, true
}

// Reset forgets the interval, so that the next event is logged at once:
// call it when the failure ends.
func (s *Sampler) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.count = time.Time{}, 0
}
