package sim

import (
	"math"
	"slices"
	"time"
)

// Stats is what the provider saw (GET /stats).
type Stats struct {
	Limit  int    `json:"limit"`
	Window Window `json:"window"`

	Accepted      int `json:"accepted"`       // messages accepted
	AcceptedUnits int `json:"accepted_units"` // units (segments) accepted
	Rejected429   int `json:"rejected_429"`   // rate-limit and throttle-all answers, the senders' included
	Rejected403   int `json:"rejected_403"`   // answers while suspended
	Failed5xx     int `json:"failed_5xx"`     // injected failures
	Timeouts      int `json:"timeouts"`       // injected hangs (not accepted)
	LostReplies   int `json:"lost_replies"`   // accepted, then the answer withheld
	BadRequests   int `json:"bad_requests"`

	Suspended      bool      `json:"suspended"`
	SuspendedUntil time.Time `json:"suspended_until,omitzero"`
	Suspensions    int       `json:"suspensions"`

	// MaxInAny1s is the most units accepted in any interval (t-1s, t],
	// computed exactly over every accept time (not per fixed bucket).
	// MaxMessagesInAny1s is the same in messages.
	MaxInAny1s         int `json:"max_in_any_1s"`
	MaxMessagesInAny1s int `json:"max_messages_in_any_1s"`

	// Senders is, per sender (a send's "from"), what its limit saw: every
	// configured sender and at most MaxSeenSenders others. OtherSenders
	// counts the accepts from senders past that bound.
	Senders      map[string]SenderStats `json:"senders"`
	OtherSenders int                    `json:"other_senders"`

	Duplicates int `json:"duplicates"` // accepts whose reference was accepted before
	// Replays are sends whose Idempotency-Key was accepted before: answered
	// with the first id and not delivered again (0 with NoIdempotency).
	Replays  int            `json:"replays"`
	PerClass map[string]int `json:"per_class"` // messages per "class" field ("none" when absent)

	// Latency is, per class, provider arrival minus the gateway's acceptance
	// time (X-Smsgw-Accepted-At), for sends that carried it.
	Latency map[string]Latency `json:"latency"`

	// Receipts posted and taken by the gateway, given up after every
	// attempt, and dropped because too many were waiting.
	ReceiptsPosted  int `json:"receipts_posted"`
	ReceiptsFailed  int `json:"receipts_failed"`
	ReceiptsDropped int `json:"receipts_dropped"`

	FirstAccept time.Time `json:"first_accept,omitzero"`
	LastAccept  time.Time `json:"last_accept,omitzero"`
	// AchievedRate is accepted units per second between the first and last
	// accept, not counting the first (0 with fewer than two accepts).
	AchievedRate float64 `json:"achieved_rate"`
}

// Latency summarizes one class's queue-to-provider times in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Stats computes the current statistics.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	recs := slices.Clone(s.records)
	st := Stats{Limit: s.limit, Window: s.cfg.Window,
		Rejected429: s.counters.rejected429, Rejected403: s.counters.rejected403,
		Failed5xx: s.counters.failed5xx, Timeouts: s.counters.timeouts,
		LostReplies: s.counters.lostReplies, BadRequests: s.counters.badRequests,
		Suspensions: s.counters.suspensions, Replays: s.counters.replays}
	now := s.now()
	if now.Before(s.suspendEnd) {
		st.Suspended, st.SuspendedUntil = true, s.suspendEnd
	}
	st.Senders = make(map[string]SenderStats, len(s.senders))
	for from, p := range s.senders {
		ss := SenderStats{Limit: p.limit, Rejected429: p.rejected429}
		if now.Before(p.throttleEnd) {
			ss.ThrottledTil = p.throttleEnd
		}
		st.Senders[from] = ss
	}
	st.OtherSenders = s.otherSends
	s.mu.Unlock()

	st.ReceiptsPosted, st.ReceiptsFailed, st.ReceiptsDropped = s.rcpt.Load().stats()
	st.Accepted = len(recs)
	st.PerClass = map[string]int{}
	lat := map[string][]time.Duration{}
	for _, r := range recs {
		st.AcceptedUnits += r.Units
		if r.Duplicate {
			st.Duplicates++
		}
		class := r.Class
		if class == "" {
			class = "none"
		}
		st.PerClass[class]++
		if !r.AcceptedAt.IsZero() {
			lat[class] = append(lat[class], r.Arrived.Sub(r.AcceptedAt))
		}
	}
	st.Latency = make(map[string]Latency, len(lat))
	for class, ds := range lat {
		st.Latency[class] = summarize(ds)
	}
	// Records are appended under the lock with a non-decreasing clock, so
	// this sort is a no-op unless a test clock went backwards.
	slices.SortStableFunc(recs, func(a, b Record) int { return a.At.Compare(b.At) })
	st.MaxInAny1s, st.MaxMessagesInAny1s = maxInAnySecond(recs)
	senderStats(st.Senders, recs)
	if len(recs) > 0 {
		st.FirstAccept, st.LastAccept = recs[0].At, recs[len(recs)-1].At
		if span := st.LastAccept.Sub(st.FirstAccept); span > 0 && len(recs) > 1 {
			// The first accept opens the span; the units after it fill it.
			st.AchievedRate = float64(st.AcceptedUnits-recs[0].Units) / span.Seconds()
		}
	}
	return st
}

// maxInAnySecond returns the most units and messages accepted in any
// interval (t-1s, t], for recs sorted by At. Every maximal interval ends at
// an accept, so a two-pointer sweep over the accepts is exact: for each
// accept j, i is the oldest accept with At[j]-At[i] < 1s.
func maxInAnySecond(recs []Record) (units, msgs int) {
	i, sum := 0, 0
	for j, r := range recs {
		sum += r.Units
		for r.At.Sub(recs[i].At) >= time.Second {
			sum -= recs[i].Units
			i++
		}
		units = max(units, sum)
		msgs = max(msgs, j-i+1)
	}
	return units, msgs
}

// senderStats adds to each tracked sender its accepts and its most units
// in any (t-1s, t], from recs sorted by At.
func senderStats(senders map[string]SenderStats, recs []Record) {
	if len(senders) == 0 {
		return
	}
	per := map[string][]Record{}
	for _, r := range recs {
		if _, ok := senders[r.From]; ok {
			per[r.From] = append(per[r.From], r)
		}
	}
	for from, rs := range per {
		ss := senders[from]
		ss.Accepted = len(rs)
		for _, r := range rs {
			ss.AcceptedUnits += r.Units
		}
		ss.MaxInAny1s, _ = maxInAnySecond(rs)
		senders[from] = ss
	}
}

func summarize(ds []time.Duration) Latency {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// Nearest-rank percentile: the smallest value with at least p of the
	// samples at or below it.
	rank := func(p float64) time.Duration {
		k := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[min(max(k, 0), len(ds)-1)]
	}
	return Latency{Count: len(ds), P50: ms(rank(0.50)), P99: ms(rank(0.99)), Max: ms(ds[len(ds)-1])}
}
