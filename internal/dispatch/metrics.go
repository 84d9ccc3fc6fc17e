package dispatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// Closed label values. Every label set is created at zero in newMetrics.
const (
	outcomeSent     = "sent"
	outcomeFailed   = "failed"
	outcomeExpired  = "expired"
	outcomeRequeued = "requeued"
	outcomeDead     = "dead"
	// outcomeSuppressed: the provider refused the send because the
	// recipient opted out there, or the take found the number on the
	// suppression list and ended the message unsent (status suppressed).
	outcomeSuppressed = "suppressed"
)

var outcomes = []string{outcomeSent, outcomeFailed, outcomeExpired, outcomeRequeued, outcomeDead, outcomeSuppressed}

// Why a leased message went back to the queue (the requeue reason label).
const (
	requeueThrottled = "throttled"   // provider 429 or suspension
	requeueRetry     = "retry"       // temporary failure, attempt spent
	requeueRateWait  = "rate_wait"   // limiter wait longer than the lane holds a message
	requeuePaused    = "paused"      // local pause set after a 429 in this process
	requeueBreaker   = "breaker"     // provider breaker open
	requeueReleased  = "released"    // graceful stop, limiter error
	requeueAuth      = "auth"        // the provider refused our credentials (or the account's sender)
	requeueQuiet     = "quiet_hours" // the recipient's quiet hours: back until they end
	requeueCrashed   = "crashed"     // the send crashed its sender (a recovered panic)
	requeueLate      = "late_slot"   // this process stalled past the slot (Config.LateSlot)
	// The queue has not confirmed the lease for two thirds of it (this
	// replica cut off from Redis): another replica may have the message.
	requeueUnconfirmed = "lease_unconfirmed"
	// Held through an operator pause: back in its place in line, to be
	// taken again at once (the take reads the suppression list).
	requeueAfterPause = "after_pause"
	// Its producer is paused by an operator: set aside on the producer's
	// shelf until the pause ends (Config.Held).
	requeueProducerPaused = "producer_paused"
)

var requeueReasons = []string{requeueThrottled, requeueRetry, requeueRateWait, requeuePaused, requeueBreaker, requeueReleased,
	requeueAuth, requeueQuiet, requeueCrashed, requeueLate, requeueUnconfirmed, requeueAfterPause, requeueProducerPaused,
	requeueSenderLimit, requeueSenderPaused}

// Reservation results.
const (
	reserveGranted = "granted"
	reserveDenied  = "denied"
	reservePaused  = "paused"
	reserveTooBig  = "too_big"
	reserveError   = "error"
)

var reserveResults = []string{reserveGranted, reserveDenied, reservePaused, reserveTooBig, reserveError}

// Send results: "ok", a provider.Reason, or one of these.
const (
	sendOK       = "ok"
	sendOther    = "other"    // an error the adapter did not classify
	sendCanceled = "canceled" // this process stopped mid-send
)

func sendResults() []string {
	out := []string{sendOK, sendOther, sendCanceled}
	for _, r := range provider.Reasons {
		out = append(out, string(r))
	}
	return out
}

// SendNow results.
const (
	nowSent        = "sent"
	nowNoSlot      = "no_slot"
	nowUnknown     = "unknown"
	nowUnavailable = "unavailable"
	nowFailed      = "failed"
)

var nowResults = []string{nowSent, nowNoSlot, nowUnknown, nowUnavailable, nowFailed}

// Take results.
const (
	takeMessage = "message"
	takeEmpty   = "empty"
	takeError   = "error"
)

type metrics struct {
	takes          *prometheus.CounterVec   // lane, result
	outcomes       *prometheus.CounterVec   // class, outcome
	requeues       *prometheus.CounterVec   // class, reason
	reservations   *prometheus.CounterVec   // class, result
	reserveDelay   *prometheus.HistogramVec // class
	sendDuration   *prometheus.HistogramVec // result
	queueToSend    *prometheus.HistogramVec // class
	throttles      prometheus.Counter
	breakerRejects prometheus.Counter
	inFlight       prometheus.Gauge
	guardActive    prometheus.Gauge
	guardCount     prometheus.Gauge
	sendNow        *prometheus.CounterVec // result
	loopErrors     *prometheus.CounterVec // loop
	senderPanics   prometheus.Counter
	poison         prometheus.Counter
	lateSlots      *prometheus.CounterVec // class
}

// Latency buckets: sub-millisecond to seconds; the OTP target is 20 ms.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		takes:          metricdef.CounterVec("smsgw_dispatch_takes_total", "Queue takes by lane and result (message, empty, error).", "lane", "result"),
		outcomes:       metricdef.CounterVec("smsgw_dispatch_messages_total", "Messages the send loop ended (leases, and messages a take ended suppressed), by class and outcome.", "class", "outcome"),
		requeues:       metricdef.CounterVec("smsgw_dispatch_requeues_total", "Messages put back in the queue, by class and reason.", "class", "reason"),
		reservations:   metricdef.CounterVec("smsgw_dispatch_reservations_total", "Limiter reservations by class and result.", "class", "result"),
		reserveDelay:   metricdef.HistogramVec("smsgw_dispatch_reservation_delay_seconds", "Delay of granted reservations (slept before sending).", latencyBuckets, "class"),
		sendDuration:   metricdef.HistogramVec("smsgw_dispatch_send_duration_seconds", "Provider call duration by result.", latencyBuckets, "result"),
		queueToSend:    metricdef.HistogramVec("smsgw_dispatch_queue_to_provider_seconds", "From a message being ready in the queue to the provider call, by class.", latencyBuckets, "class"),
		throttles:      metricdef.Counter("smsgw_dispatch_provider_throttles_total", "Provider 429s (throttles) seen by this process."),
		breakerRejects: metricdef.Counter("smsgw_dispatch_breaker_rejections_total", "Sends not attempted because the provider breaker was open."),
		inFlight:       metricdef.Gauge("smsgw_dispatch_in_flight_messages", "Leased messages held by this process."),
		guardActive:    metricdef.Gauge("smsgw_dispatch_suspension_guard_active", "1 while the suspension guard slows sending down."),
		guardCount:     metricdef.Gauge("smsgw_dispatch_suspension_guard_throttles", "Provider 429s in the guard's rolling window (all replicas)."),
		sendNow:        metricdef.CounterVec("smsgw_dispatch_send_now_total", "OTP fast-path sends by result.", "result"),
		loopErrors:     metricdef.CounterVec("smsgw_dispatch_loop_errors_total", "Errors of the background loops and queue calls, by step.", "step"),
		senderPanics:   metricdef.Counter("smsgw_dispatch_sender_panics_total", "Sends that crashed their sender (a recovered panic)."),
		lateSlots:      metricdef.CounterVec("smsgw_dispatch_late_slots_total", "Limiter slots forfeited because this process would have started the send later than dispatch's late-slot bound after the slot (a stall), by class.", "class"),
		poison:         metricdef.Counter("smsgw_dispatch_poison_total", "Messages made dead letters because sending them crashed dispatch.poison_after times."),
	}
	if err := metricdef.Register(reg, m.takes, m.outcomes, m.requeues, m.reservations, m.reserveDelay,
		m.sendDuration, m.queueToSend, m.throttles, m.breakerRejects, m.inFlight, m.guardActive, m.guardCount,
		m.sendNow, m.loopErrors, m.senderPanics, m.poison, m.lateSlots); err != nil {
		return nil, fmt.Errorf("dispatch: register metrics: %w", err)
	}
	m.createAtZero()
	return m, nil
}

// createAtZero creates every label set of the closed label values, so
// that each series exists from the start.
func (m *metrics) createAtZero() {
	for _, lane := range []string{laneOTP, laneBulk} {
		for _, r := range []string{takeMessage, takeEmpty, takeError} {
			m.takes.WithLabelValues(lane, r)
		}
	}
	for _, c := range sms.Classes {
		cl := c.String()
		for _, o := range outcomes {
			m.outcomes.WithLabelValues(cl, o)
		}
		for _, r := range requeueReasons {
			m.requeues.WithLabelValues(cl, r)
		}
		for _, r := range reserveResults {
			m.reservations.WithLabelValues(cl, r)
		}
		m.reserveDelay.WithLabelValues(cl)
		m.queueToSend.WithLabelValues(cl)
		m.lateSlots.WithLabelValues(cl)
	}
	for _, r := range sendResults() {
		m.sendDuration.WithLabelValues(r)
	}
	for _, r := range nowResults {
		m.sendNow.WithLabelValues(r)
	}
	for _, s := range []string{"take", "ack", "extend", "recover", "guard", "reserve", "pause", "hold", "opt_out"} {
		m.loopErrors.WithLabelValues(s)
	}
}
