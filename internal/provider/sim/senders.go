package sim

import (
	"errors"
	"fmt"
	"time"
)

// MaxSeenSenders bounds the senders the simulator tracks beyond the
// configured ones: a send from another sender past it is still judged by
// the account's contract, and counted only in Stats.OtherSenders.
const MaxSeenSenders = 100

// slidingWindow holds the units accepted in the trailing second. The
// account's sliding limit and every sender's limit are this one window.
type slidingWindow struct {
	recent []unitAt // accepts in the trailing second, oldest first
	sum    int
}

// fits forgets the accepts that left (now-1s, now] — an accept at a stays
// while now-a < 1s — and reports whether units more stay within limit.
func (w *slidingWindow) fits(now time.Time, units, limit int) bool {
	drop := 0
	for drop < len(w.recent) && now.Sub(w.recent[drop].at) >= time.Second {
		w.sum -= w.recent[drop].units
		drop++
	}
	w.recent = w.recent[drop:]
	return w.sum+units <= limit
}

// add counts an accept; call it only after fits said yes.
func (w *slidingWindow) add(now time.Time, units int) {
	w.recent = append(w.recent, unitAt{now, units})
	w.sum += units
}

// sender is what the simulator keeps of one sender (a send's "from").
type sender struct {
	limit       int // units per second; 0: only the account's limit
	window      slidingWindow
	throttleEnd time.Time // throttle_sender: its sends are 429 until then
	rejected429 int
}

// fits reports whether units more from this sender stay within its limit.
func (p *sender) fits(now time.Time, units int) bool {
	return p.limit <= 0 || p.window.fits(now, units, p.limit)
}

func (p *sender) add(now time.Time, units int) {
	if p.limit > 0 {
		p.window.add(now, units)
	}
}

// senderLocked returns the state of from, tracking it when it is new and
// the bound allows; nil for no sender or one past the bound.
func (s *Sim) senderLocked(from string) *sender {
	if from == "" {
		return nil
	}
	if p, ok := s.senders[from]; ok {
		return p
	}
	if len(s.senders) >= len(s.cfg.Senders)+MaxSeenSenders {
		return nil
	}
	p := &sender{}
	s.senders[from] = p
	return p
}

func (s *Sim) resetSendersLocked() {
	s.senders = make(map[string]*sender, len(s.cfg.Senders))
	for from, limit := range s.cfg.Senders {
		s.senders[from] = &sender{limit: limit}
	}
}

// SenderThrottle answers every send from From with the sender's 429 for
// For, from now (Control.ThrottleSender).
type SenderThrottle struct {
	From string   `json:"from"`
	For  Duration `json:"for"`
}

// validateSenders checks the configured per-sender limits. Its errors do
// not quote the sender: a long code is a phone number.
func validateSenders(limits map[string]int) error {
	for from, limit := range limits {
		if from == "" {
			return errors.New("senders: a sender with no name")
		}
		if limit < 0 {
			return fmt.Errorf("senders: limit %d: want >= 0", limit)
		}
	}
	return nil
}

// SenderStats is what the simulator saw of one sender.
type SenderStats struct {
	Limit         int       `json:"limit"` // 0: only the account's limit
	Accepted      int       `json:"accepted"`
	AcceptedUnits int       `json:"accepted_units"`
	Rejected429   int       `json:"rejected_429"` // its sender-scoped 429s
	MaxInAny1s    int       `json:"max_in_any_1s"`
	ThrottledTil  time.Time `json:"throttled_until,omitzero"`
}
