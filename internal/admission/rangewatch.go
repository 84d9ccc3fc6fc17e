package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/sms"
)

// rangeWatch is what the OTP velocity alarm (prefixAlarm) shows beyond its
// own share test, and the automatic hold of a number range that tripped it
// (docs/design.md, "Protection"):
//
//   - smsgw_protection_otp_ranges: the distinct number ranges
//     (protection.prefix_alarm.digits) among this process's OTPs of the
//     current window. Pumping spreads over many ranges, each too small
//     for the share test; the alert compares the count with its own past.
//   - smsgw_protection_otps_total{region}: OTPs that passed protection,
//     by destination region (ISO 3166-1 region, "001", "unknown": a closed
//     set). The alert on a new country's share reads it.
//   - with protection.prefix_alarm.hold above 0, a range that raises the
//     alarm is held: OTPs to it are refused (429 range-held, with
//     Retry-After) until the hold ends. Per process, like the alarm.
type rangeWatch struct {
	ranges  prometheus.Gauge
	otps    *prometheus.CounterVec
	holding prometheus.Gauge

	mu   sync.Mutex
	held map[string]time.Time // prefix → end of its hold; bounded by maxHeldRanges
}

// maxHeldRanges bounds the ranges held at once. A range raises the alarm
// at most once a window and only with prefix_alarm.share of it, so few are
// ever held; past the bound the oldest hold is dropped.
const maxHeldRanges = 256

func newRangeWatch(reg prometheus.Registerer, countries []string) (*rangeWatch, error) {
	w := &rangeWatch{held: map[string]time.Time{}}
	w.ranges = metricdef.Gauge("smsgw_protection_otp_ranges",
		"Distinct number ranges (protection.prefix_alarm.digits) among this process's OTPs of the alarm's current window.")
	w.otps = metricdef.CounterVec("smsgw_protection_otps_total",
		"OTPs that passed protection, by destination region (ISO 3166-1, 001 for non-geographic, unknown).", "region")
	w.holding = metricdef.Gauge("smsgw_protection_ranges_held",
		"Number ranges this process holds after they raised the OTP velocity alarm (protection.prefix_alarm.hold).")
	if err := metricdef.Register(reg, w.ranges, w.otps, w.holding); err != nil {
		return nil, fmt.Errorf("gateway: protection metrics: %w", err)
	}
	for _, r := range append([]string{"unknown"}, countries...) {
		w.otps.WithLabelValues(r)
	}
	return w, nil
}

// seen counts one OTP to e164 that passed protection; distinct is the
// ranges of the window so far.
func (w *rangeWatch) seen(e164 string, distinct int) {
	w.otps.WithLabelValues(alarmRegion(e164)).Inc()
	w.ranges.Set(float64(distinct))
}

// hold refuses OTPs to prefix until end.
func (w *rangeWatch) hold(prefix string, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.held[prefix]; !ok && len(w.held) >= maxHeldRanges {
		oldest := ""
		for p, e := range w.held {
			if oldest == "" || e.Before(w.held[oldest]) {
				oldest = p
			}
		}
		delete(w.held, oldest)
	}
	w.held[prefix] = end
	w.holding.Set(float64(len(w.held)))
}

// heldFor is how long prefix stays held after now; 0: not held.
func (w *rangeWatch) heldFor(prefix string, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	end, ok := w.held[prefix]
	if !ok {
		return 0
	}
	if !now.Before(end) {
		delete(w.held, prefix)
		w.holding.Set(float64(len(w.held)))
		return 0
	}
	return end.Sub(now)
}

// rangeHeld refuses an OTP to a held range.
func (p *Protector) rangeHeld(cls sms.Class, t Target, wait time.Duration) *Rejection {
	prefix := sms.NumberPrefix(t.To, p.cfg.PrefixAlarm.Digits)
	return p.refuse(refusedRangeHeld, cls, &Rejection{Kind: RejectRangeHeld, RetryAfter: wait,
		Detail: fmt.Sprintf("%s: the number range %s raised the OTP velocity alarm and is held for %s; nothing was sent",
			t.Field, maskPrefix(prefix, len(t.To)), wait.Round(time.Second)),
		Extra: map[string]any{"hold_seconds": int64(wait.Round(time.Second).Seconds())}})
}

// otpCapKey is the key under which protection.otp_per_number counts the
// OTPs producer sends to the number whose id is id: one count per producer
// and number, so that one producer's OTPs (or a flood through one
// producer's key) cannot lock a number out for every other producer. It
// is a hash of the producer's name and the number's id (itself a keyed
// hash of the number), as long as a number id; a target without a
// producer counts under the number's id alone.
func otpCapKey(producer, id string) string {
	if producer == "" {
		return id
	}
	sum := sha256.Sum256([]byte("otp-per-number\x00" + producer + "\x00" + id))
	return hex.EncodeToString(sum[:16])
}
