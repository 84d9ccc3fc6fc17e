package provider_test

import (
	"errors"
	"testing"
	"time"

	"smsgw/internal/provider"
)

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
		{"oldest accepted", now.Add(-provider.ReceiptMaxAge), true},
		{"just too old", now.Add(-provider.ReceiptMaxAge - time.Nanosecond), false},
		{"furthest ahead accepted", now.Add(provider.ReceiptMaxAhead), true},
		{"just too far ahead", now.Add(provider.ReceiptMaxAhead + time.Nanosecond), false},
		{"none", time.Time{}, false},
		{"year 1", time.Unix(-62135596700, 0), false},
		{"beyond a Duration ahead", time.Unix(1<<62, 0), false},
		{"beyond a Duration behind", now.AddDate(-300, 0, 0), false},
	} {
		err := provider.CheckReceiptTime(tc.signed, now)
		if tc.ok && err != nil {
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
		if !tc.ok && (!errors.Is(err, provider.ErrStaleReceipt) || !errors.Is(err, provider.ErrBadSignature)) {
			t.Errorf("%s: %v, want ErrStaleReceipt and ErrBadSignature", tc.name, err)
		}
	}
	if errors.Is(provider.ErrBadSignature, provider.ErrStaleReceipt) {
		t.Error("every bad signature reads as stale")
	}
}
