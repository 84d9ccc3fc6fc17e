package limiter

import (
	"math"
	"sync"
)

// MaxSenderPauses bounds the senders a SenderTimes keeps, and so the
// sender pauses one process keeps: past it, a new sender first forgets
// the ended ones, then the one that ends first.
const MaxSenderPauses = 4096

// SenderTimes maps senders to a time (in the caller's unit and clock),
// at most MaxSenderPauses of them: a sender's pause end, or when its next
// message is due. Safe for concurrent use; the zero value is empty.
type SenderTimes struct {
	mu sync.Mutex
	at map[string]int64
}

// Get is sender's time, 0 when none.
func (s *SenderTimes) Get(sender string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[sender]
}

// Update sets sender's time to f(its current time, 0 when none) and
// returns it. now is the time before which an entry has ended.
func (s *SenderTimes) Update(sender string, now int64, f func(cur int64) int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = make(map[string]int64)
	}
	cur, ok := s.at[sender]
	if !ok && len(s.at) >= MaxSenderPauses {
		first, firstAt := "", int64(math.MaxInt64)
		for k, t := range s.at {
			switch {
			case t <= now:
				delete(s.at, k)
			case t < firstAt:
				first, firstAt = k, t
			}
		}
		if len(s.at) >= MaxSenderPauses {
			delete(s.at, first)
		}
	}
	v := f(cur)
	s.at[sender] = v
	return v
}

// Each calls f for every sender and its time, under the lock.
func (s *SenderTimes) Each(f func(sender string, at int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.at {
		f(k, t)
	}
}
