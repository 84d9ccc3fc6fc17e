package provider

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps any pause taken from a provider answer. A Retry-After of
// days is either a vendor bug or an HTTP-date from a skewed clock; pausing
// every replica that long on its word would stop all traffic silently, so we
// pause an hour at most and let the next answer decide again.
const MaxRetryAfter = time.Hour

// ParseRetryAfter turns a Retry-After header value (delta-seconds or an
// HTTP-date, RFC 9110 section 10.2.3) into a pause measured from now. A
// missing, unparseable, zero or negative value becomes MinRetryAfter, never
// zero, so a throttle always pauses; values above MaxRetryAfter are capped.
// Fractional seconds ("1.5") are accepted because some vendors send them.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	d, _ := RetryAfterGiven(v, now)
	return d
}

// RetryAfterGiven is ParseRetryAfter that also says whether v gave a time
// to wait at all: false for a missing, unparseable, zero or negative value
// (or a date already past), which callers with a default of their own
// (a suspension's minute) use instead of MinRetryAfter.
func RetryAfterGiven(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return MinRetryAfter, false
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case secs != secs || secs <= 0: // NaN or non-positive
			return MinRetryAfter, false
		case secs >= MaxRetryAfter.Seconds():
			return MaxRetryAfter, true
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
		if d <= 0 {
			return MinRetryAfter, false
		}
	} else {
		return MinRetryAfter, false
	}
	return ClampRetryAfter(d), true
}

// ClampRetryAfter applies the floor and cap of ParseRetryAfter to a pause an
// adapter derived some other way (a vendor body field, a suspension window).
func ClampRetryAfter(d time.Duration) time.Duration {
	switch {
	case d < MinRetryAfter:
		return MinRetryAfter
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}
