package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"smsgw/internal/sms"
)

// ClassCounts are the messages of one class this process ended, by outcome.
type ClassCounts struct {
	Sent    int64 // accepted by the provider (queued sends and, for otp, the fast path)
	Failed  int64 // permanent failure, suppressed included (an opt-out the provider reported, a number found on the suppression list at take) (queued sends and, for otp, the fast path)
	Expired int64 // TTL passed before the send
	Dead    int64 // moved to the dead letters after MaxAttempts
}

// SendNowCounts are the OTP fast path's answers (SendNow) of this process.
type SendNowCounts struct {
	Sent        int64
	NoSlot      int64 // NoSlotError: denied, paused, throttled or credentials refused
	Unknown     int64 // ErrOutcomeUnknown
	Unavailable int64 // ErrUnavailable
	Failed      int64 // permanent rejection, cost over the burst
}

// Refused is every SendNow that did not send for a reason the API answers
// with 503 (no slot, outcome unknown, provider unavailable).
func (c SendNowCounts) Refused() int64 { return c.NoSlot + c.Unknown + c.Unavailable }

// Snapshot is a read-only copy of this process's send-loop counters,
// cumulative since New. The counters are the Prometheus metrics of the
// package, read back, so the two never disagree.
type Snapshot struct {
	Classes   map[sms.Class]ClassCounts
	SendNow   SendNowCounts
	Throttled int64 // provider 429s seen by this process (queued sends and the fast path)
	// GuardCount is the suspension guard's shared 429 count as last read
	// (every GuardRefresh, and on each 429); GuardActivateAt the count
	// from which it slows sending down. Both 0 without a guard.
	GuardCount      int64
	GuardActivateAt int64
	GuardActive     bool
}

// Snapshot reads the counters. It is cheap (a few dozen atomic loads) and
// safe to call from any goroutine.
func (d *Dispatcher) Snapshot() Snapshot {
	s := Snapshot{Classes: make(map[sms.Class]ClassCounts, len(sms.Classes))}
	for _, c := range sms.Classes {
		cl := c.String()
		s.Classes[c] = ClassCounts{
			Sent: counterValue(d.m.outcomes.WithLabelValues(cl, outcomeSent)),
			// A refusal because the recipient opted out, or a message
			// ended unsent because its number is on the suppression
			// list, is a permanent refusal too (status suppressed).
			Failed: counterValue(d.m.outcomes.WithLabelValues(cl, outcomeFailed)) +
				counterValue(d.m.outcomes.WithLabelValues(cl, outcomeSuppressed)),
			Expired: counterValue(d.m.outcomes.WithLabelValues(cl, outcomeExpired)),
			Dead:    counterValue(d.m.outcomes.WithLabelValues(cl, outcomeDead)),
		}
	}
	n := func(r string) int64 { return counterValue(d.m.sendNow.WithLabelValues(r)) }
	s.SendNow = SendNowCounts{Sent: n(nowSent), NoSlot: n(nowNoSlot), Unknown: n(nowUnknown),
		Unavailable: n(nowUnavailable), Failed: n(nowFailed)}
	otp := s.Classes[sms.ClassOTP]
	otp.Sent += s.SendNow.Sent
	otp.Failed += s.SendNow.Failed
	s.Classes[sms.ClassOTP] = otp
	s.Throttled = counterValue(d.m.throttles)
	s.GuardCount = gaugeValue(d.m.guardCount)
	if d.cfg.Guard != nil {
		s.GuardActivateAt = int64(d.cfg.Guard.ActivateAt())
	}
	s.GuardActive = d.GuardActive()
	return s
}

func counterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}

func gaugeValue(g prometheus.Gauge) int64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return int64(m.GetGauge().GetValue())
}
