package gateway

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// maxReceiptBytes bounds a receipt request's body: vendors' receipts are
// a few hundred bytes.
const maxReceiptBytes = 16 << 10

// receiptAdapters and receiptStatuses are the closed label sets of the
// receipt metrics; "other" is a vendor status on the way (queued, sent,
// buffered, ...) that changes nothing.
var (
	receiptAdapters = []string{"http", "twilio", "vonage"}
	receiptStatuses = []string{"delivered", "undelivered", "failed", "other"}
	outcomeStatuses = []sms.Status{sms.StatusDelivered, sms.StatusUndelivered, sms.StatusFailed}
)

// The secret label of smsgw_receipt_signatures_total: the adapter's
// current secret, or the previous one while it is rotated (only the
// generic adapter has one: rotatingAdapters).
const (
	secretCurrent  = "current"
	secretPrevious = "previous"
)

var rotatingAdapters = []string{"http"}

// ratioWindow is how far back smsgw_delivery_ratio looks, in one-minute
// buckets: long enough to be steady, short enough that an alert sees a
// collapse within minutes whatever the uptime.
const ratioWindow = 15

// receiptMetrics are the receipts' metrics.
type receiptMetrics struct {
	receipts *prometheus.CounterVec   // smsgw_receipts_total{adapter,status}
	unknown  *prometheus.CounterVec   // smsgw_receipts_unknown_total{adapter}
	early    *prometheus.CounterVec   // smsgw_receipts_early_total{adapter}
	outcomes *prometheus.CounterVec   // smsgw_receipt_outcomes_total{class,status}
	latency  *prometheus.HistogramVec // smsgw_receipt_latency_seconds{class}
	// smsgw_receipt_signatures_total{adapter,secret}
	signatures *prometheus.CounterVec

	mu      sync.Mutex
	now     func() time.Time
	buckets map[sms.Class]*[ratioWindow]ratioBucket
}

type ratioBucket struct {
	minute          int64
	delivered, seen int64
}

func newReceiptMetrics(reg prometheus.Registerer, now func() time.Time) (*receiptMetrics, error) {
	m := &receiptMetrics{
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_receipts_total", Help: "Signed provider receipts received, by adapter and the status they report.",
		}, []string{"adapter", "status"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_receipts_unknown_total", Help: "Signed receipts that matched no stored message (pruned, an OTP of the fast path whose record was not stored, or not ours).",
		}, []string{"adapter"}),
		early: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_receipts_early_total", Help: "Receipts that came before the send was recorded: kept on the message and applied when it is.",
		}, []string{"adapter"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_receipt_outcomes_total",
			Help: "Messages a receipt moved (or will move, parked until the send is recorded) to a final status, by class; the delivery ratio is delivered over all.",
		}, []string{"class", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "smsgw_receipt_latency_seconds", Help: "Time from sent to the delivered receipt, by class.",
			Buckets: []float64{.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600, 4 * 3600},
		}, []string{"class"}),
		signatures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_receipt_signatures_total",
			Help: "Receipts whose signature checked, by adapter and the secret that checked it: current, or previous while provider.previous_receipt_secret is set; once previous stays flat it can be removed.",
		}, []string{"adapter", "secret"}),
		now:     now,
		buckets: map[sms.Class]*[ratioWindow]ratioBucket{},
	}
	for _, c := range []prometheus.Collector{m.receipts, m.unknown, m.early, m.outcomes, m.latency, m.signatures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, a := range rotatingAdapters {
		m.signatures.WithLabelValues(a, secretPrevious)
	}
	for _, a := range receiptAdapters {
		m.unknown.WithLabelValues(a)
		m.early.WithLabelValues(a)
		m.signatures.WithLabelValues(a, secretCurrent)
		for _, s := range receiptStatuses {
			m.receipts.WithLabelValues(a, s)
		}
	}
	for _, c := range sms.Classes {
		m.buckets[c] = &[ratioWindow]ratioBucket{}
		m.latency.WithLabelValues(c.String())
		for _, s := range outcomeStatuses {
			m.outcomes.WithLabelValues(c.String(), string(s))
		}
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smsgw_delivery_ratio", ConstLabels: prometheus.Labels{"class": c.String()},
			Help: "Delivered over all final receipts of the class in the last 15 minutes on this replica (1 when none).",
		}, func() float64 { return m.ratio(c) })
		if err := reg.Register(g); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// signed counts one receipt of adapter whose signature checked, with the
// previous secret or the current one.
func (m *receiptMetrics) signed(adapter string, previous bool) {
	secret := secretCurrent
	if previous {
		secret = secretPrevious
	}
	m.signatures.WithLabelValues(adapter, secret).Inc()
}

// outcome counts one message a receipt moved to status.
func (m *receiptMetrics) outcome(c sms.Class, status sms.Status) {
	if !c.Valid() {
		return
	}
	m.outcomes.WithLabelValues(c.String(), string(status)).Inc()
	minute := m.now().Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.buckets[c][minute%ratioWindow]
	if b.minute != minute {
		*b = ratioBucket{minute: minute}
	}
	b.seen++
	if status == sms.StatusDelivered {
		b.delivered++
	}
}

// ratio is delivered / final receipts of class c within the window, 1
// when there were none (no news is no collapse).
func (m *receiptMetrics) ratio(c sms.Class) float64 {
	if r := m.recentRatio(c); r != nil {
		return *r
	}
	return 1
}

// recentRatio is delivered / final receipts of class c within the window;
// nil when there were none.
func (m *receiptMetrics) recentRatio(c sms.Class) *float64 {
	minute := m.now().Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[c]
	if !ok {
		return nil
	}
	var delivered, seen int64
	for _, x := range b {
		if minute-x.minute < ratioWindow {
			delivered += x.delivered
			seen += x.seen
		}
	}
	if seen == 0 {
		return nil
	}
	r := float64(delivered) / float64(seen)
	return &r
}

// unknownLogEvery is how often the unmatched receipts (and the OTP
// records that failed) are logged: one line per interval with how many
// there were, never a line per receipt.
const unknownLogEvery = 10 * time.Second

// readWebhook reads the body of a provider's webhook (a receipt, an
// inbound message), at most limit bytes. These endpoints take no bearer
// key, so anyone may post to them: a body over the bound (413) or cut
// short by its client (400) is answered without a log line of its own, and
// one line per unknownLogEvery says how many there were, as failed bearer
// keys are sampled (authFailed).
func (s *server) readWebhook(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return raw, nil
	}
	if n, ok := s.webhookBodyLog.Add(s.now(), unknownLogEvery); ok {
		s.log.WarnContext(r.Context(), "provider webhook bodies refused: over the bound or cut short by the client",
			"path", logPath(r), "count", n, "client_ip", clientIP(r.Context()), "err", err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errorf(kindTooLarge, "the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
	}
	return nil, &apiError{Kind: kindInvalid, Detail: "could not read the request body",
		Fields: []fieldProblem{{"request", "unreadable body"}}}
}

// maskID shows the first and last two characters of a vendor's id, enough
// to find it in the vendor's console, not to use it.
func maskID(id string) string {
	if len(id) <= 6 {
		return "***"
	}
	return id[:2] + "***" + id[len(id)-2:]
}

// webhookError is the answer to a vendor's webhook (what: "receipt",
// "message") its adapter refused: 401 for a signature missing, wrong or
// signed too long ago, 400 naming the field of a signed but malformed one,
// else err itself.
func webhookError(what string, err error) error {
	var re *provider.ReceiptError
	switch {
	case errors.Is(err, provider.ErrInboundNotConfirmed):
		return errorf(kindBadSignature, "the provider's API does not confirm the "+what+" as signed; nothing was changed")
	case errors.Is(err, provider.ErrStaleReceipt):
		return errorf(kindBadSignature, "the "+what+"'s signed time is more than "+provider.ReceiptMaxAge.String()+
			" old, or ahead of the gateway's clock: refused as a possible replay; nothing was changed")
	case errors.Is(err, provider.ErrBadSignature):
		return errorf(kindBadSignature, "the "+what+"'s signature is missing or wrong; nothing was changed")
	case errors.As(err, &re):
		return fieldError(re.Field, re.Reason)
	}
	return err
}

// postReceipt is POST /v1/receipts/{adapter}: a provider's delivery
// receipt. No bearer key: the adapter checks its vendor's signature; a bad
// or missing one is 401 and changes nothing. Every signed receipt is
// answered 204, matched or not, so a vendor never retries one in a storm.
func (s *server) postReceipt(w http.ResponseWriter, r *http.Request) {
	adapter := chi.URLParam(r, "adapter")
	if adapter != s.cfg.Provider.Kind || s.receipts == nil {
		s.writeError(w, r, errorf(kindNotFound, "this gateway takes no receipts for adapter "+maskID(adapter)))
		return
	}
	raw, err := s.readWebhook(w, r, maxReceiptBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rc, err := s.receipts.ParseReceipt(r, raw)
	var re *provider.ReceiptError
	if err == nil || errors.As(err, &re) {
		s.metrics.receipts.signed(adapter, rc.PreviousSecret)
	}
	if err != nil {
		s.webhookRefused(w, r, "receipt", err)
		return
	}
	rm := s.metrics.receipts
	if rc.Status == "" {
		rm.receipts.WithLabelValues(adapter, "other").Inc()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	q := queue.Receipt{ProviderID: rc.ProviderID, Reference: rc.Reference, Status: rc.Status, ErrorCode: rc.ErrorCode}
	if !sms.ValidID(q.Reference) {
		q.Reference = "" // not one of ours: match by the provider id
	}
	if err := queue.CheckReceipt(q); err != nil {
		s.writeError(w, r, fieldError("provider_message_id", err.Error()))
		return
	}
	out, err := s.queue.ApplyReceipt(r.Context(), q)
	if err != nil {
		s.writeError(w, r, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the store did not take the receipt; send it again"})
		return
	}
	rm.receipts.WithLabelValues(adapter, string(rc.Status)).Inc()
	switch out.Result {
	case queue.ReceiptUnknown:
		rm.unknown.WithLabelValues(adapter).Inc()
		if n, ok := s.unknownLog.Add(s.now(), unknownLogEvery); ok {
			s.log.Warn("receipts matched no message", "adapter", adapter, "count", n,
				"provider_message_id", maskID(rc.ProviderID), "status", string(rc.Status))
		}
	case queue.ReceiptApplied:
		rm.outcome(out.Message.Class, out.Message.Status)
		if m := out.Message; m.Status == sms.StatusDelivered && !m.SentAt.IsZero() && !m.UpdatedAt.Before(m.SentAt) {
			rm.latency.WithLabelValues(m.Class.String()).Observe(m.UpdatedAt.Sub(m.SentAt).Seconds())
		}
	case queue.ReceiptParked:
		rm.early.WithLabelValues(adapter).Inc()
		if out.Message != nil { // else an OTP not stored yet: counted when it is (recordOTP)
			rm.outcome(out.Message.Class, rc.Status)
		}
	}
	if rc.OptedOut {
		if e := s.receiptOptedOut(r, adapter, rc); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// receiptOptedOut puts the recipient of a receipt that says they opted out
// (Vonage's err-code 9) on the suppression list as the provider's entry.
// The store's failure is a 503, so that the vendor sends the receipt again
// (applying it twice changes nothing); a recipient that is not a number is
// logged, not refused: the receipt itself was taken.
func (s *server) receiptOptedOut(r *http.Request, adapter string, rc provider.Receipt) error {
	err := s.optOuts.providerOptOut(r.Context(), rc.Recipient,
		"the provider reported that the recipient opted out ("+adapter+" receipt, error "+rc.ErrorCode+")")
	var ve *sms.ValidationError
	switch {
	case errors.As(err, &ve):
		s.log.WarnContext(r.Context(), "a receipt reports an opt-out for a recipient that is not an E.164 number; not suppressed",
			"adapter", adapter, "provider_message_id", maskID(rc.ProviderID))
	case err != nil:
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the suppression list did not take the receipt's opt-out; send it again"}
	}
	return nil
}

// deleteMessage is DELETE /v1/messages/{id}: the producer cancels its own
// queued or scheduled message. Another producer's id reads as missing; a
// message sending or done is 409 not-cancelable. Whether a cancel racing
// the send loop's take wins is decided in one atomic step of the queue.
func (s *server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	p := producerFrom(r.Context())
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.writeError(w, r, errorf(kindNotFound, "no such message"))
		return
	}
	m, err := s.queue.Cancel(r.Context(), id, p.Name)
	switch {
	case errors.Is(err, queue.ErrNotCancelable) && m != nil:
		s.writeError(w, r, errorf(kindNotCancelable, "the message is "+string(m.StatusAt(s.now()))+" and can no longer be canceled"))
		return
	case err != nil:
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, s.log, "application/json", http.StatusOK, viewOf(m, s.now()))
}
