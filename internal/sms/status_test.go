package sms

import "testing"

// TestStatusDoneAndFinal: sent is done (nothing more is sent) but not
// final (a receipt still moves it); every other end is both.
func TestStatusDoneAndFinal(t *testing.T) {
	for _, tc := range []struct {
		s           Status
		done, final bool
	}{
		{StatusQueued, false, false},
		{StatusScheduled, false, false},
		{StatusSending, false, false},
		{StatusSent, true, false},
		{StatusDelivered, true, true},
		{StatusUndelivered, true, true},
		{StatusFailed, true, true},
		{StatusExpired, true, true},
		{StatusCanceled, true, true},
		{StatusSuppressed, true, true},
		{StatusUnknown, false, false},
	} {
		if tc.s.Done() != tc.done || tc.s.Final() != tc.final {
			t.Errorf("%s: done %v final %v, want %v %v", tc.s, tc.s.Done(), tc.s.Final(), tc.done, tc.final)
		}
	}
}

// TestStatusOnlyForward: a receipt moves sent only; a late sent, a
// duplicate receipt or a second, different receipt changes nothing; only
// queued can be canceled; a take ends a queued message suppressed when its
// number is on the suppression list.
func TestStatusOnlyForward(t *testing.T) {
	all := []Status{StatusQueued, StatusSending, StatusSent, StatusDelivered, StatusUndelivered,
		StatusFailed, StatusExpired, StatusCanceled, StatusSuppressed}
	allowed := map[[2]Status]bool{
		{StatusQueued, StatusSending}:     true,
		{StatusQueued, StatusCanceled}:    true,
		{StatusQueued, StatusSuppressed}:  true, // taken while the number is on the suppression list
		{StatusSending, StatusQueued}:     true,
		{StatusSending, StatusSent}:       true,
		{StatusSending, StatusFailed}:     true,
		{StatusSending, StatusExpired}:    true,
		{StatusSending, StatusSuppressed}: true,
		{StatusSent, StatusDelivered}:     true,
		{StatusSent, StatusUndelivered}:   true,
		{StatusSent, StatusFailed}:        true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := from.CanMoveTo(to); got != allowed[[2]Status{from, to}] {
				t.Errorf("%s → %s: %v", from, to, got)
			}
		}
	}
}
