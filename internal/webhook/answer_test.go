package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
)

// recordingOutbox is the real outbox, with every RetryEvent the deliverer
// asks for recorded: how long an event waits is only seen there.
type recordingOutbox struct {
	queue.Outbox
	mu      sync.Mutex
	retries []queue.EventRetry
}

func (r *recordingOutbox) RetryEvent(ctx context.Context, le *queue.LeasedEvent, o queue.EventRetry) (bool, error) {
	r.mu.Lock()
	r.retries = append(r.retries, o)
	r.mu.Unlock()
	return r.Outbox.RetryEvent(ctx, le, o)
}

// spent returns the retries that spent an attempt (not deferrals).
func (r *recordingOutbox) spent() []queue.EventRetry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []queue.EventRetry
	for _, o := range r.retries {
		if o.SpendAttempt {
			out = append(out, o)
		}
	}
	return out
}

// An endpoint that answers 410 Gone gets the event once: it is dead at
// once (not retried until webhooks.max_age), counted as given up with the
// outcome "gone", and the answer does not count against the endpoint's
// breaker: a later event of the same endpoint is delivered.
func TestGoneStopsRetrying(t *testing.T) {
	var mu sync.Mutex
	gone := true
	r := newReceiver(t, func(string, int) int {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return http.StatusGone
		}
		return http.StatusNoContent
	})
	f := start(t, map[string]string{"notify": r.srv.URL + "/hook"}, func(c *Config) {
		// One failure would open the breaker for an hour: a 410 counted
		// as one would hold the later event back.
		c.BreakerFailures = 1
		c.BreakerOpen = time.Hour
	})
	// The outcome is in the metric's fixed label set before any attempt.
	if got := outcomeLabels(t, f); !slices.Contains(got, OutcomeGone) || len(got) != len(Outcomes) {
		t.Errorf("outcomes exported before any attempt: %q, want the fixed set %q with gone", got, Outcomes)
	}
	const n = 3
	f.sent(t, "notify", n)
	waitFor(t, "every event dead, or one attempted twice", func() bool {
		return f.stats(t).Backlog == 0 || r.mostAttempts() > 1
	})
	if got := r.mostAttempts(); got != 1 {
		t.Fatalf("an event was attempted %d times after 410 Gone, want once", got)
	}
	dead, err := f.q.DeadEvents(t.Context(), 10)
	if err != nil || len(dead) != n {
		t.Fatalf("DeadEvents = %d, %v; want %d", len(dead), err, n)
	}
	for _, e := range dead {
		if e.Attempts != 1 || e.LastError != "endpoint answered 410 Gone" {
			t.Errorf("dead event %s: attempts %d, last error %q", e.ID, e.Attempts, e.LastError)
		}
	}
	waitFor(t, "the deaths counted", func() bool { return value(f.m.dead) == n })
	if got := value(f.m.attempts.WithLabelValues(OutcomeGone)); got != n {
		t.Errorf("gone attempts %v, want %d", got, n)
	}
	if got := value(f.m.attempts.WithLabelValues(OutcomeRejected)); got != 0 {
		t.Errorf("rejected attempts %v, want 0 (410 is gone)", got)
	}

	mu.Lock()
	gone = false
	mu.Unlock()
	f.sent(t, "notify", 1)
	waitFor(t, "the later event delivered, or held by the breaker", func() bool {
		return r.deliveredIDs() == 1 || value(f.m.deferred.WithLabelValues(deferBreaker)) > 0
	})
	if got := value(f.m.deferred.WithLabelValues(deferBreaker)); got != 0 {
		t.Errorf("%v events held by a breaker that 410 answers opened", got)
	}
}

// outcomeLabels are the outcome labels of smsgw_callbacks_attempts_total
// the registry exports.
func outcomeLabels(t *testing.T, f *fixture) []string {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "smsgw_callbacks_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

func (r *receiver) mostAttempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.attempts {
		n = max(n, len(a))
	}
	return n
}

// A 429 or 503 with Retry-After (seconds or an HTTP-date) delays the
// event's next attempt to what it asks, but never past webhooks.backoff_max
// and never sooner than the backoff; other statuses' Retry-After, a date
// past and a value that is neither are ignored.
func TestRetryAfterDelaysTheNextAttempt(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		base       time.Duration
		lo, hi     time.Duration // the wait, lo <= wait <= hi
	}{
		{"503 seconds", 503, "120", 10 * time.Millisecond, 120 * time.Second, 120 * time.Second},
		{"429 seconds", 429, " 300 ", 10 * time.Millisecond, 300 * time.Second, 300 * time.Second},
		{"503 HTTP-date", 503, t0.Add(90 * time.Second).UTC().Format(http.TimeFormat), 10 * time.Millisecond, 90 * time.Second, 90 * time.Second},
		{"capped at backoff_max", 503, "864000", 10 * time.Millisecond, time.Hour, time.Hour},
		{"a number too large for a Duration", 429, "99999999999999999999999", 10 * time.Millisecond, time.Hour, time.Hour},
		{"a date far ahead", 503, "Fri, 31 Dec 9999 23:59:59 GMT", 10 * time.Millisecond, time.Hour, time.Hour},
		{"never sooner than the backoff", 503, "1", 10 * time.Minute, 5 * time.Minute, 10 * time.Minute},
		{"ignored on a 500", 500, "120", 10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{"a date past", 503, t0.Add(-time.Hour).UTC().Format(http.TimeFormat), 10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{"neither seconds nor a date", 429, "soon", 10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{"negative", 503, "-120", 10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", c.retryAfter)
				w.WriteHeader(c.status)
			}))
			t.Cleanup(srv.Close)
			var rec *recordingOutbox
			f := start(t, map[string]string{"notify": srv.URL}, func(cfg *Config) {
				rec = &recordingOutbox{Outbox: cfg.Outbox}
				cfg.Outbox = rec
				cfg.BackoffBase, cfg.BackoffMax = c.base, time.Hour
				cfg.Now = func() time.Time { return t0 }
			})
			f.sent(t, "notify", 1)
			waitFor(t, "the failed attempt rescheduled", func() bool { return len(rec.spent()) > 0 })
			got := rec.spent()[0]
			if got.After < c.lo || got.After > c.hi {
				t.Errorf("next attempt after %s, want %s to %s", got.After, c.lo, c.hi)
			}
			// The status, and nothing the endpoint wrote.
			if !strings.HasPrefix(got.LastError, "HTTP "+strconv.Itoa(c.status)) ||
				strings.Contains(got.LastError, "GMT") || strings.Contains(got.LastError, "soon") {
				t.Errorf("last error %q", got.LastError)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                               0,
		"0":                              0,
		"120":                            120 * time.Second,
		"\t7 ":                           7 * time.Second,
		"1.5":                            0,
		"-3":                             0,
		"+3":                             0,
		"3s":                             0,
		"Fri, 02 Jan 2026 03:05:05 GMT":  time.Minute,     // IMF-fixdate
		"Friday, 02-Jan-26 03:06:05 GMT": 2 * time.Minute, // RFC 850
		"Fri Jan  2 03:07:05 2026":       3 * time.Minute, // asctime
		"Fri, 02 Jan 2026 03:00:00 GMT":  0,               // past
		"99999999999999999999":           time.Duration(1<<63-1) / time.Second * time.Second,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
