package dispatch

import (
	"testing"
	"time"

	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// TestThrottleAllPausesEveryReplica: the provider answers 429 to everything
// for 3 s in the middle of a campaign. The first 429 pauses every replica
// (shared pause), so each replica sees at most one 429, the account is never
// suspended and every message is still delivered exactly once.
func TestThrottleAllPausesEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("7 s campaign")
	}
	t.Parallel()
	const campaign = 250
	acct := newAccount(t)
	s, _, url := startSim(t, sim.Config{Limit: 100})
	producer := acct.queue(t, nil)
	ms := make([]*sms.Message, campaign)
	ids := make([]string, campaign)
	for i := range ms {
		ms[i] = newMsg(sms.ClassMarketing)
		ids[i] = ms[i].ID
	}
	enqueue(t, producer, ms...)
	reps := startReplicas(t, acct, 3, url, &rttHook{}, nil)

	waitUntil(t, "50 accepted", func() bool { return s.Stats().Accepted >= 50 })
	throttleFor := sim.Duration(3 * time.Second)
	// The throttle starts somewhere inside Apply: it surely covers
	// [applied, beforeApply+3s], however long Apply took.
	beforeApply := time.Now()
	if err := s.Apply(sim.Control{ThrottleAllFor: &throttleFor}); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	waitUntil(t, "the campaign to be accepted", func() bool { return s.Stats().Accepted >= campaign })
	msgs := waitTerminal(t, producer, ids...)

	st := s.Stats()
	t.Logf("sim: accepted=%d 429s=%d 403s=%d duplicates=%d max_in_any_1s=%d", st.Accepted, st.Rejected429, st.Rejected403, st.Duplicates, st.MaxMessagesInAny1s)
	if st.Rejected429 < 1 || st.Rejected429 > len(reps) {
		t.Errorf("provider answered %d 429s, want between 1 and %d (at most one per replica)", st.Rejected429, len(reps))
	}
	if st.Rejected403 != 0 || st.Suspended {
		t.Errorf("account suspended (403s=%d)", st.Rejected403)
	}
	if st.Accepted != campaign || st.Duplicates != 0 {
		t.Errorf("accepted %d with %d duplicates, want %d exactly once", st.Accepted, st.Duplicates, campaign)
	}
	for i, r := range reps {
		n := value(r.d.m.throttles)
		paused := value(r.d.m.reservations.WithLabelValues("marketing", reservePaused)) + value(r.d.m.requeues.WithLabelValues("marketing", requeuePaused))
		t.Logf("replica %d: 429s=%v paused reservations/requeues=%v", i, n, paused)
		if n > 1 {
			t.Errorf("replica %d saw %v 429s, want at most 1", i, n)
		}
		if n == 0 && paused == 0 {
			t.Errorf("replica %d neither saw a 429 nor the shared pause", i)
		}
	}
	for _, rec := range s.Accepted() {
		if rec.At.After(applied) && rec.At.Before(beforeApply.Add(time.Duration(throttleFor))) {
			t.Errorf("message %s accepted %s into the 3 s throttle", rec.Reference, rec.At.Sub(beforeApply))
		}
	}
	for _, id := range ids {
		if m := msgs[id]; m.Status != sms.StatusSent || m.Attempts != 1 {
			t.Errorf("message %s: %s after %d attempts, want sent after 1 (throttles spend none)", id, m.Status, m.Attempts)
		}
	}
}
