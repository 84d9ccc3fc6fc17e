package provider

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name string
		in   string
		want time.Duration
	}{
		{"seconds", "3", 3 * time.Second},
		{"seconds with spaces", " 2 ", 2 * time.Second},
		{"fractional seconds", "1.5", 1500 * time.Millisecond},
		{"missing", "", MinRetryAfter},
		{"garbage", "soon", MinRetryAfter},
		{"zero", "0", MinRetryAfter},
		{"negative", "-5", MinRetryAfter},
		{"below floor", "0.2", MinRetryAfter},
		{"NaN", "NaN", MinRetryAfter},
		{"absurd seconds capped", "999999999", MaxRetryAfter},
		{"infinite capped", "Inf", MaxRetryAfter},
		{"http date", date(7 * time.Second), 7 * time.Second},
		{"http date in the past", date(-time.Minute), MinRetryAfter},
		{"http date a week away capped", date(7 * 24 * time.Hour), MaxRetryAfter},
		{"rfc850 date", now.Add(4 * time.Second).Format(time.RFC850), 4 * time.Second},
		{"asctime date", now.Add(5 * time.Second).Format(time.ANSIC), 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ParseRetryAfter(tt.in, now); got != tt.want {
				t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// Whatever a vendor sends, the pause is within [MinRetryAfter, MaxRetryAfter].
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "", "1e9", "NaN", "Wed, 21 Oct 2015 07:28:00 GMT", "0x10", "+Inf"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, v string) {
		if d := ParseRetryAfter(v, now); d < MinRetryAfter || d > MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v", v, d)
		}
	})
}

// RetryAfterGiven says whether the value gave a time at all; its pause is
// ParseRetryAfter's.
func TestRetryAfterGiven(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]bool{
		"": false, "0": false, "-1": false, "soon": false, "NaN": false,
		now.Add(-time.Minute).Format(http.TimeFormat): false,
		"3": true, "0.2": true, "1e12": true, now.Add(time.Minute).Format(http.TimeFormat): true,
	} {
		d, ok := RetryAfterGiven(in, now)
		if ok != want || d != ParseRetryAfter(in, now) {
			t.Errorf("RetryAfterGiven(%q) = %v, %v; want given=%v and %v", in, d, ok, want, ParseRetryAfter(in, now))
		}
	}
}

// The window of a receipt's signed time, at its edges and far outside
// them, where a duration of the difference would overflow.
func TestCheckReceiptTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		signed time.Time
		ok     bool
	}{
		{"now", now, true},
		{"oldest accepted", now.Add(-ReceiptMaxAge), true},
		{"just too old", now.Add(-ReceiptMaxAge - time.Nanosecond), false},
		{"furthest ahead accepted", now.Add(ReceiptMaxAhead), true},
		{"just too far ahead", now.Add(ReceiptMaxAhead + time.Nanosecond), false},
		{"none", time.Time{}, false},
		{"year 1", time.Unix(-62135596700, 0), false},
		{"beyond a Duration ahead", time.Unix(1<<62, 0), false},
		{"beyond a Duration behind", now.AddDate(-300, 0, 0), false},
	} {
		err := CheckReceiptTime(tc.signed, now)
		if tc.ok && err != nil {
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
		if !tc.ok && (!errors.Is(err, ErrStaleReceipt) || !errors.Is(err, ErrBadSignature)) {
			t.Errorf("%s: %v, want ErrStaleReceipt and ErrBadSignature", tc.name, err)
		}
	}
	if errors.Is(ErrBadSignature, ErrStaleReceipt) {
		t.Error("every bad signature reads as stale")
	}
}
