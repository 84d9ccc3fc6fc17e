package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// specVerify is a receiver's check written from the Standard Webhooks
// specification's text alone (spec/standard-webhooks.md, "Signature
// scheme", "Webhook headers", "Verifying signatures"), independent of
// Sign and Verify: the secret is "whsec_" and the standard base64 of the
// key; the signed content is "msg_id.timestamp.payload" with the timestamp
// as the integer it is; the header is a space delimited list of
// "version,signature", of which a v1 one must match, compared in constant
// time; the timestamp within tolerance of now either way.
func specVerify(secret string, h http.Header, body []byte, now time.Time) error {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return errors.New("secret without whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return errors.New("secret is not base64")
	}
	id, tsText, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsText == "" || sigs == "" {
		return errors.New("missing header")
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return errors.New("timestamp is not an integer")
	}
	const tolerance = 5 * 60
	if now.Unix()-ts > tolerance || ts > now.Unix()+tolerance {
		return errors.New("timestamp outside tolerance")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + string(body)))
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, vs := range strings.Split(sigs, " ") {
		parts := strings.SplitN(vs, ",", 2)
		if len(parts) != 2 || parts[0] != "v1" {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(parts[1]), []byte(want)) == 1 {
			return nil
		}
	}
	return errors.New("no matching signature")
}

// testSecret is testKey as a producer is given it.
var testSecret = "whsec_" + base64.StdEncoding.EncodeToString(testKey)

// specDelivery is one request a spec receiver got.
type specDelivery struct {
	header http.Header
	body   []byte
	err    error // of specVerify
}

// specReceiver records every request, verified with specVerify, and
// answers answer(id, n) for the n-th attempt (1-based) of webhook-id id.
type specReceiver struct {
	mu     sync.Mutex
	byID   map[string][]specDelivery
	order  []string // the body's type and webhook-id of each 2xx, in arrival order
	answer func(body []byte, n int) int
	srv    *httptest.Server
}

func newSpecReceiver(t *testing.T, answer func(body []byte, n int) int) *specReceiver {
	r := &specReceiver{byID: map[string][]specDelivery{}, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		d := specDelivery{header: req.Header.Clone(), body: body, err: specVerify(testSecret, req.Header, body, time.Now())}
		r.mu.Lock()
		id := req.Header.Get("webhook-id")
		r.byID[id] = append(r.byID[id], d)
		code := r.answer(body, len(r.byID[id]))
		if code/100 == 2 {
			var p struct{ Type string }
			_ = json.Unmarshal(body, &p)
			r.order = append(r.order, p.Type)
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *specReceiver) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// A receiver that verifies as the Standard Webhooks spec says accepts
// every delivery, first attempts and retries alike; a retry has the same
// webhook-id and body; the id and timestamp are what the spec asks for
// (no ".", an integer of Unix seconds); and the body has exactly the
// fields docs/callbacks.md documents, with their types.
func TestDeliveriesPassAnIndependentSpecVerifier(t *testing.T) {
	r := newSpecReceiver(t, func(_ []byte, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	f := start(t, map[string]string{"notify": r.srv.URL + "/hook?token=x"}, nil)
	const n = 5
	f.sent(t, "notify", n)
	// One failure with an error object: a message refused for good.
	f.ended(t, newCallbackMessage("notify"), queue.Outcome{Status: sms.StatusFailed, Reason: "provider refused: invalid number", Attempts: 1})
	waitFor(t, "every event delivered", func() bool { return r.delivered() == n+1 && f.stats(t).Backlog == 0 })

	r.mu.Lock()
	defer r.mu.Unlock()
	for id, ds := range r.byID {
		if strings.Contains(id, ".") || id == "" {
			t.Errorf("webhook-id %q: empty or with a '.'", id)
		}
		if len(ds) != 2 {
			t.Errorf("event %s: %d attempts, want 2", id, len(ds))
			continue
		}
		for i, d := range ds {
			if d.err != nil {
				t.Errorf("event %s attempt %d: spec verifier: %v", id, i+1, d.err)
			}
			ts := d.header.Get("webhook-timestamp")
			if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || strconv.FormatInt(sec, 10) != ts {
				t.Errorf("event %s: webhook-timestamp %q is not plain Unix seconds", id, ts)
			}
			if got := d.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("event %s: Content-Type %q", id, got)
			}
			if sigs := d.header.Values("webhook-signature"); len(sigs) != 1 || !strings.HasPrefix(sigs[0], "v1,") {
				t.Errorf("event %s: webhook-signature %q", id, sigs)
			}
			checkDocumentedBody(t, id, d.body)
		}
		if string(ds[0].body) != string(ds[1].body) {
			t.Errorf("event %s: the retry's body differs", id)
		}
	}
}

func newCallbackMessage(producer string) *sms.Message {
	m := smstest.Message(producer, sms.ClassTransactional)
	m.Callbacks = true
	m.Reference = "ref-" + m.ID
	return m
}

// checkDocumentedBody checks body has exactly the fields of
// docs/callbacks.md ("What you receive") with their JSON types, and
// nothing else: no number, no text, no destination.
func checkDocumentedBody(t *testing.T, id string, body []byte) {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(body, &top); err != nil {
		t.Errorf("event %s: body is not a JSON object: %v", id, err)
		return
	}
	data, _ := top["data"].(map[string]any)
	if got, want := keys(top), []string{"data", "timestamp", "type"}; !reflect.DeepEqual(got, want) {
		t.Errorf("event %s: top-level fields %v, want %v", id, got, want)
	}
	want := []string{"at", "class", "error", "id", "provider_message_id", "reference", "segments", "status"}
	if got := keys(data); !reflect.DeepEqual(got, want) {
		t.Errorf("event %s: data fields %v, want %v", id, got, want)
	}
	for _, k := range []string{"at", "class", "id", "provider_message_id", "reference", "status"} {
		if _, ok := data[k].(string); !ok {
			t.Errorf("event %s: data.%s is %T, want a string", id, k, data[k])
		}
	}
	if s, ok := data["segments"].(float64); !ok || s < 1 {
		t.Errorf("event %s: data.segments %v", id, data["segments"])
	}
	typ, _ := top["type"].(string)
	if status, _ := data["status"].(string); typ != "message."+status {
		t.Errorf("event %s: type %q for status %q", id, typ, status)
	}
	for _, k := range []string{"timestamp"} {
		if _, err := time.Parse(time.RFC3339Nano, top[k].(string)); err != nil {
			t.Errorf("event %s: %s: %v", id, k, err)
		}
	}
	switch e := data["error"].(type) {
	case nil:
		if data["status"] == "failed" {
			t.Errorf("event %s: a failure with a null error", id)
		}
	case map[string]any:
		if got := keys(e); !reflect.DeepEqual(got, []string{"code", "message"}) {
			t.Errorf("event %s: error fields %v", id, got)
		}
	default:
		t.Errorf("event %s: error is %T", id, e)
	}
	if strings.Contains(string(body), "token") || strings.Contains(string(body), "notify") {
		t.Errorf("event %s: the body carries the destination or the producer: %s", id, body)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Verify accepts what the spec's receiver accepts, including a header with
// the signatures of two secrets during a rotation (either one is enough),
// and refuses what it refuses.
func TestVerifyAgreesWithTheSpecVerifier(t *testing.T) {
	oldKey := []byte("old-key-old-key-old-key-old-key!")
	now := time.Unix(1_767_323_045, 0)
	body := []byte(`{"type":"message.sent"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	cur, old := Sign(testKey, "evt_1", now, body), Sign(oldKey, "evt_1", now, body)
	for name, tc := range map[string]struct {
		sigs string
		ok   bool
	}{
		"current":              {cur, true},
		"old then current":     {old + " " + cur, true},
		"current then old":     {cur + " " + old, true},
		"asymmetric then v1":   {"v1a,AAAA " + cur, true},
		"old only":             {old, false},
		"v2 with current's":    {"v2," + strings.TrimPrefix(cur, "v1,"), false},
		"current without v1,":  {strings.TrimPrefix(cur, "v1,"), false},
		"current, other body":  {Sign(testKey, "evt_1", now, []byte(`{}`)), false},
		"current, other stamp": {Sign(testKey, "evt_1", now.Add(time.Second), body), false},
	} {
		h := http.Header{}
		h.Set("webhook-id", "evt_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", tc.sigs)
		spec := specVerify(testSecret, h, body, now) == nil
		ours := Verify(testKey, "evt_1", ts, tc.sigs, body, now, 5*time.Minute) == nil
		if spec != tc.ok || ours != tc.ok {
			t.Errorf("%s: spec verifier %v, Verify %v, want %v", name, spec, ours, tc.ok)
		}
	}
	// The tolerance, both ways, as the spec's receiver applies it.
	for _, skew := range []time.Duration{-6 * time.Minute, -4 * time.Minute, 4 * time.Minute, 6 * time.Minute} {
		h := http.Header{}
		h.Set("webhook-id", "evt_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", cur)
		spec := specVerify(testSecret, h, body, now.Add(skew)) == nil
		ours := Verify(testKey, "evt_1", ts, cur, body, now.Add(skew), 5*time.Minute) == nil
		if spec != ours || ours != (skew.Abs() < 5*time.Minute) {
			t.Errorf("clock %v off: spec verifier %v, Verify %v", skew, spec, ours)
		}
	}
}

// Events of one message are not delivered in order: a sent event whose
// first attempt failed arrives after the delivered event that follows it
// (docs/callbacks.md says so; a receiver orders by data.status, not by
// arrival).
func TestEventsOfOneMessageMayArriveOutOfOrder(t *testing.T) {
	r := newSpecReceiver(t, func(body []byte, n int) int {
		if n == 1 && strings.Contains(string(body), `"type":"message.sent"`) {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	f := start(t, map[string]string{"notify": r.srv.URL + "/hook"}, func(c *Config) {
		c.BackoffBase, c.BackoffMax = 400*time.Millisecond, 400*time.Millisecond
	})
	ctx := t.Context()
	m := newCallbackMessage("notify")
	f.ended(t, m, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + m.ID, Attempts: 1})
	waitFor(t, "the sent event's first attempt", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.byID) == 1
	})
	if _, err := f.q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm-" + m.ID, Status: sms.StatusDelivered}); err != nil {
		t.Fatal(err)
	}
	f.d.Wake()
	waitFor(t, "both events delivered", func() bool { return r.delivered() == 2 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []string{"message.delivered", "message.sent"}; !reflect.DeepEqual(r.order, want) {
		t.Errorf("arrival order %v, want %v", r.order, want)
	}
}

// ended stores m through the queue's own transitions (enqueue, take,
// complete with o) and wakes the deliverer for its event.
func (f *fixture) ended(t *testing.T, m *sms.Message, o queue.Outcome) {
	t.Helper()
	ctx := t.Context()
	if _, err := f.q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	l, _, err := f.q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.q.Complete(ctx, l, o); err != nil {
		t.Fatal(err)
	}
	f.d.Wake()
}

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
