package opsview

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/dispatch"
	"smsgw/internal/metricdef"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// APIMetrics are the HTTP edge's metrics. Labels come from closed sets:
// route patterns, methods, status codes, Kinds, classes, OTP outcomes.
type APIMetrics struct {
	requests         *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	Rejected         *prometheus.CounterVec
	Accepted         *prometheus.CounterVec
	Replays          prometheus.Counter
	AnswersNotKept   prometheus.Counter
	otpDuration      *prometheus.HistogramVec
	OTPRecordFailed  prometheus.Counter
	OTPRecordRetried prometheus.Counter
	otpStep          *prometheus.HistogramVec
	IngressFallback  prometheus.Counter
	Receipts         *receiptMetrics
	// PreviousKeys counts requests authenticated with a previous key, by
	// principal: a configured producer name or "admin" (newAuthenticator
	// creates the series of the principals that have one).
	PreviousKeys *prometheus.CounterVec
	// BatchCanceled counts the messages DELETE /v1/batches/{id} canceled.
	BatchCanceled prometheus.Counter
}

// otp outcomes, the label of smsgw_api_otp_duration_seconds.
var otpOutcomes = []string{"sent", "no_slot", "unknown", "unavailable", "rejected", "error"}

// NewAPIMetrics registers the API's metrics on reg, with a rejection series
// at zero for each of kinds.
func NewAPIMetrics(reg prometheus.Registerer, kinds []string) (*APIMetrics, error) {
	m := &APIMetrics{
		requests:         metricdef.CounterVec("smsgw_http_requests_total", "HTTP requests by route pattern, method and status code.", "route", "method", "code"),
		duration:         metricdef.HistogramVec("smsgw_http_request_duration_seconds", "HTTP request latency by route pattern.", []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5}, "route"),
		Rejected:         metricdef.CounterVec("smsgw_api_rejections_total", "Requests (and batch items) refused, by problem kind.", "kind"),
		Accepted:         metricdef.CounterVec("smsgw_api_accepted_total", "Messages queued, by class.", "class"),
		Replays:          metricdef.Counter("smsgw_api_idempotent_replays_total", "Requests answered with a stored first answer."),
		AnswersNotKept:   metricdef.Counter("smsgw_api_idempotent_answers_not_kept_total", "Batch answers not kept for replay: larger than their store budget (1 KiB per accepted item, compressed); a replay runs the batch again."),
		OTPRecordFailed:  metricdef.Counter("smsgw_api_otp_record_failures_total", "OTPs the fast path sent whose sent record could not be stored (given up after retries, or a stop): their status, receipts and callbacks are not kept."),
		OTPRecordRetried: metricdef.Counter("smsgw_api_otp_record_retries_total", "Writes of fast-path OTPs' sent records the store could not take (down or slow), tried again later."),
		otpDuration:      metricdef.HistogramVec("smsgw_api_otp_duration_seconds", "POST /v1/otp time in the send path, by outcome.", []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5}, "outcome"),
		otpStep:          metricdef.HistogramVec("smsgw_api_otp_step_seconds", "POST /v1/otp time by step of the fast path (decode, idempotency, protect, ingress, reserve, wait, provider).", []float64{.00005, .0001, .00025, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1}, "step"),
		IngressFallback:  metricdef.Counter("smsgw_api_ingress_fallback_total", "Ingress decisions taken locally because Redis failed."),
		PreviousKeys:     metricdef.CounterVec("smsgw_auth_previous_key_total", "Requests authenticated with a previous key (producers[].previous_key, admin.previous_key) while it is rotated, by principal (a producer's name, or admin); once it stays flat the previous key can be removed.", "principal"),
	}
	m.BatchCanceled = metricdef.Counter("smsgw_api_batch_canceled_total", "Messages canceled by DELETE /v1/batches/{id} (each never sent).")
	if err := metricdef.Register(reg, m.requests, m.duration, m.Rejected, m.Accepted, m.Replays, m.AnswersNotKept, m.otpDuration, m.OTPRecordFailed, m.OTPRecordRetried, m.otpStep, m.IngressFallback, m.PreviousKeys, m.BatchCanceled); err != nil {
		return nil, err
	}
	var err error
	if m.Receipts, err = newReceiptMetrics(reg, time.Now); err != nil {
		return nil, err
	}
	for _, k := range kinds {
		m.Rejected.WithLabelValues(k)
	}
	for _, c := range sms.Classes {
		m.Accepted.WithLabelValues(c.String())
	}
	for _, o := range otpOutcomes {
		m.otpDuration.WithLabelValues(o)
	}
	for st := range dispatch.NumSteps {
		m.otpStep.WithLabelValues(st.String())
	}
	return m, nil
}

// Observe counts one answered request and its latency.
func (m *APIMetrics) Observe(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, MethodLabel(method), statusLabel(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// OTP records one POST /v1/otp outcome and its duration.
func (m *APIMetrics) OTP(err error, d time.Duration) {
	outcome := "sent"
	var noSlot dispatch.NoSlotError
	switch pe := provider.AsError(err); {
	case err == nil:
	case errors.As(err, &noSlot):
		outcome = "no_slot"
	case errors.Is(err, dispatch.ErrOutcomeUnknown):
		outcome = "unknown"
	case errors.Is(err, dispatch.ErrUnavailable):
		outcome = "unavailable"
	case pe != nil && !pe.Temporary:
		outcome = "rejected"
	default:
		outcome = "error"
	}
	m.otpDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// OTPSteps observes the steps of one OTP that reached the send path.
func (m *APIMetrics) OTPSteps(s *dispatch.Steps) {
	for st := range dispatch.NumSteps {
		m.otpStep.WithLabelValues(st.String()).Observe(s.Duration(st).Seconds())
	}
}

// MethodLabel is method as a label or a log field: the standard methods
// (RFC 9110 section 9 and PATCH) as they are, anything else "other". A
// client chooses the method, so a label taken from it as it is would let
// anyone add a series (and its memory) with every request.
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// statusLabel is a status code as a label. Our handlers choose it, but a
// status outside 100..599 (none today) would be one label per value.
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}

// MethodNamed names method in an answer's detail: itself when it is
// standard, else "this method" (the client's own text is not echoed back,
// whatever its length).
func MethodNamed(method string) string {
	if l := MethodLabel(method); l != "other" {
		return l
	}
	return "this method"
}
