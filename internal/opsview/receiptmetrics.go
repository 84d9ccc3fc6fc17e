package opsview

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/sms"
)

// ReceiptAdapters and receiptStatuses are the closed label sets of the
// receipt metrics; "other" is a vendor status on the way (queued, sent,
// buffered, ...) that changes nothing.
var (
	ReceiptAdapters = []string{"http", "twilio", "vonage"}
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
	Receipts *prometheus.CounterVec   // smsgw_receipts_total{adapter,status}
	Unknown  *prometheus.CounterVec   // smsgw_receipts_unknown_total{adapter}
	Early    *prometheus.CounterVec   // smsgw_receipts_early_total{adapter}
	outcomes *prometheus.CounterVec   // smsgw_receipt_outcomes_total{class,status}
	Latency  *prometheus.HistogramVec // smsgw_receipt_latency_seconds{class}
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
		Receipts:   metricdef.CounterVec("smsgw_receipts_total", "Signed provider receipts received, by adapter and the status they report.", "adapter", "status"),
		Unknown:    metricdef.CounterVec("smsgw_receipts_unknown_total", "Signed receipts that matched no stored message (pruned, an OTP of the fast path whose record was not stored, or not ours).", "adapter"),
		Early:      metricdef.CounterVec("smsgw_receipts_early_total", "Receipts that came before the send was recorded: kept on the message and applied when it is.", "adapter"),
		outcomes:   metricdef.CounterVec("smsgw_receipt_outcomes_total", "Messages a receipt moved (or will move, parked until the send is recorded) to a final status, by class; the delivery ratio is delivered over all.", "class", "status"),
		Latency:    metricdef.HistogramVec("smsgw_receipt_latency_seconds", "Time from sent to the delivered receipt, by class.", []float64{.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600, 4 * 3600}, "class"),
		signatures: metricdef.CounterVec("smsgw_receipt_signatures_total", "Receipts whose signature checked, by adapter and the secret that checked it: current, or previous while provider.previous_receipt_secret is set; once previous stays flat it can be removed.", "adapter", "secret"),
		now:        now,
		buckets:    map[sms.Class]*[ratioWindow]ratioBucket{},
	}
	if err := metricdef.Register(reg, m.Receipts, m.Unknown, m.Early, m.outcomes, m.Latency, m.signatures); err != nil {
		return nil, err
	}
	for _, a := range rotatingAdapters {
		m.signatures.WithLabelValues(a, secretPrevious)
	}
	for _, a := range ReceiptAdapters {
		m.Unknown.WithLabelValues(a)
		m.Early.WithLabelValues(a)
		m.signatures.WithLabelValues(a, secretCurrent)
		for _, s := range receiptStatuses {
			m.Receipts.WithLabelValues(a, s)
		}
	}
	for _, c := range sms.Classes {
		m.buckets[c] = &[ratioWindow]ratioBucket{}
		m.Latency.WithLabelValues(c.String())
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
func (m *receiptMetrics) Signed(adapter string, previous bool) {
	secret := secretCurrent
	if previous {
		secret = secretPrevious
	}
	m.signatures.WithLabelValues(adapter, secret).Inc()
}

// outcome counts one message a receipt moved to status.
func (m *receiptMetrics) Outcome(c sms.Class, status sms.Status) {
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
	if r := m.RecentRatio(c); r != nil {
		return *r
	}
	return 1
}

// recentRatio is delivered / final receipts of class c within the window;
// nil when there were none.
func (m *receiptMetrics) RecentRatio(c sms.Class) *float64 {
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
