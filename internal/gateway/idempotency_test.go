package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
)

func TestIdempotencyKey(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		body := msg("transactional", "reference", "invoice-9")
		first := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, first, http.StatusAccepted)
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Error("first answer marked as replayed")
		}
		again := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, again, http.StatusAccepted)
		if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, again.body) ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Errorf("replay %s %v, want the first answer %s", again.body, again.header, first.body)
		}
		// The same key from another producer is another key.
		other := h.post("/v1/messages", keySlow, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, other, http.StatusAccepted)
		if bytes.Equal(other.body, first.body) {
			t.Error("another producer got this producer's answer")
		}
		changed := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "invoice-10"), "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, changed, http.StatusUnprocessableEntity)
		if p := changed.problem(t); p["type"] != httpapi.ProblemTypeBase+"idempotency-key-reused" {
			t.Errorf("problem %v", p)
		}
		bad := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "")
		wantStatus(t, bad, http.StatusBadRequest)

		var a httpapi.AcceptedMessage
		first.json(t, &a)
		eventually(t, "the send", func() bool { return sentRefs(h.sim)[a.ID] == 1 })
		time.Sleep(200 * time.Millisecond)
		if n := len(h.sim.Accepted()); n != 2 {
			t.Errorf("the provider got %d sends, want 2 (one per producer)", n)
		}
	})
}

// TestIdempotencyInFlight: a retry that races the first request gets 409
// with Retry-After, then the first answer once it is stored. In Redis mode
// a single message has no in-flight step (one script admits, stores and
// keeps the answer: TestIdempotencyRaceOneTrip); there the batch endpoint
// shows the lock.
func TestIdempotencyInFlight(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		p, _ := h.app.srv.Edge.Auth.ProducerFor(config.Producer{Key: keyNotify}.KeyHash())
		path, scope := "/v1/messages", "message"
		var body any = msg("transactional")
		if m == redisMode {
			path, scope = "/v1/messages/batch", "batch"
			body = map[string]any{"messages": []any{msg("transactional")}}
		}
		k := admission.IdemKey(p.Name, scope, "slow-first")
		// Hold the lock as a first request still in progress would.
		_, token, err := h.app.srv.Store.Idem.Acquire(context.Background(), k, time.Minute)
		if err != nil || token == "" {
			t.Fatalf("acquire: %q %v", token, err)
		}
		r := h.post(path, keyNotify, body, "Idempotency-Key", "slow-first")
		wantStatus(t, r, http.StatusConflict)
		if r.header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
		if err := h.app.srv.Store.Idem.Finish(context.Background(), k, token, nil); err != nil {
			t.Fatal(err)
		}
		r = h.post(path, keyNotify, body, "Idempotency-Key", "slow-first")
		if r.status != http.StatusAccepted && r.status != http.StatusOK {
			t.Errorf("after the lock: status %d", r.status)
		}
	})
}

// TestIdempotencyRaceOneTrip: in Redis mode, concurrent retries of one
// single message with one Idempotency-Key, on two replicas, store one
// message; every answer is the first answer byte for byte, and exactly one
// is not marked replayed.
func TestIdempotencyRaceOneTrip(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	var hs []*harness
	for range 2 {
		c := cfg
		c.Store.Path = t.TempDir()
		hs = append(hs, startWith(t, c, s))
	}
	body := msg("transactional", "reference", "race")
	const n = 24
	answers := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = hs[i%2].post("/v1/messages", keyNotify, body, "Idempotency-Key", "race-1") })
	}
	wg.Wait()
	first := 0
	for i, a := range answers {
		wantStatus(t, a, http.StatusAccepted)
		if a.header.Get("Idempotent-Replayed") == "" {
			first++
		}
		if !bytes.Equal(a.body, answers[0].body) {
			t.Errorf("answer %d %s, want %s", i, a.body, answers[0].body)
		}
	}
	if first != 1 {
		t.Errorf("%d answers not marked replayed, want 1", first)
	}
	var a httpapi.AcceptedMessage
	answers[0].json(t, &a)
	eventually(t, "the send", func() bool { return sentRefs(s)[a.ID] == 1 })
	if got := len(s.Accepted()); got != 1 {
		t.Errorf("the provider got %d sends, want 1", got)
	}
}

// TestIdempotencyAcrossReplicas: three replicas on one Redis; a POST
// retried on another replica yields the same id and one send.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	var hs []*harness
	for range 3 {
		c := cfg
		c.Store.Path = t.TempDir()
		hs = append(hs, startWith(t, c, s))
	}
	body := msg("transactional")
	var ids []string
	for i, h := range hs {
		r := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "checkout-42")
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		ids = append(ids, a.ID)
		if replayed := r.header.Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
			t.Errorf("replica %d: Idempotent-Replayed %v", i, replayed)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("ids %v, want one id", ids)
	}
	eventually(t, "the send", func() bool { return sentRefs(s)[ids[0]] >= 1 })
	time.Sleep(300 * time.Millisecond)
	if n := len(s.Accepted()); n != 1 {
		t.Errorf("the provider got %d sends, want 1", n)
	}
	// The batch and OTP endpoints replay too.
	items := map[string]any{"messages": []any{msg("transactional", "reference", "a"), msg("transactional", "to", "bad")}}
	b1 := hs[0].post("/v1/messages/batch", keyNotify, items, "Idempotency-Key", "batch-7")
	b2 := hs[1].post("/v1/messages/batch", keyNotify, items, "Idempotency-Key", "batch-7")
	wantStatus(t, b1, http.StatusOK)
	if !bytes.Equal(b1.body, b2.body) || b2.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("batch replay %s, want %s", b2.body, b1.body)
	}
}

// TestIdempotencySurvivesRestart: the embedded answer store is memory, but
// the queue keeps (producer, key) → id on disk; after a restart a replay
// still gets the first id (and a changed body still gets 422).
func TestIdempotencySurvivesRestart(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	h1 := startWith(t, cfg, s)
	body := msg("marketing", "reference", "promo-1")
	first := h1.post("/v1/messages", keyNotify, body, "Idempotency-Key", "promo-1")
	wantStatus(t, first, http.StatusAccepted)
	if err := h1.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := startWith(t, cfg, s)
	// A changed body first, so that it is told apart by the stored
	// message, not by an answer cached by the replay below.
	changed := h2.post("/v1/messages", keyNotify, msg("marketing", "reference", "promo-2"), "Idempotency-Key", "promo-1")
	wantStatus(t, changed, http.StatusUnprocessableEntity)
	again := h2.post("/v1/messages", keyNotify, body, "Idempotency-Key", "promo-1")
	wantStatus(t, again, http.StatusAccepted)
	var a, b httpapi.AcceptedMessage
	first.json(t, &a)
	again.json(t, &b)
	if a.ID != b.ID || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after restart: %s %v, want id %s replayed", again.body, again.header, a.ID)
	}
}

// TestIdemKeyStable pins the store key of an Idempotency-Key: keys live in
// Redis for the idempotency window, so a release that changed them would
// let a retry across an upgrade queue a second message.
func TestIdemKeyStable(t *testing.T) {
	t.Parallel()
	if got, want := admission.IdemKey("notify", "message", "order-9"), "2fa6f4fcfa9fa4ac7d325921d9f75074db7ef67a"; got != want {
		t.Errorf("idemKey = %s, want %s", got, want)
	}
}

// postKeys posts body to path with the Idempotency-Key header once per
// key (the harness's header map holds one value a name).
func (h *harness) postKeys(path, key string, body any, idemKeys ...string) reply {
	h.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	hr, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.base+path, bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+key)
	for _, k := range idemKeys {
		hr.Header.Add("Idempotency-Key", k)
	}
	resp, err := h.client.Do(hr)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
	checkSpec(h.t, hr, out)
	return out
}

// An Idempotency-Key sent twice is a 400 naming the header, on every
// endpoint that takes one, whether the values differ or not: nothing is
// sent, queued or kept under either key, so a later request with one of
// them is answered as a first request.
func TestIdempotencyKeyTwiceRefused(t *testing.T) {
	otpBody := map[string]any{"to": "+819012345678", "body": "code 1234"}
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		cases := []struct {
			path, key string
			body      any
			ok        int
		}{
			{"/v1/messages", keyNotify, msg("transactional"), http.StatusAccepted},
			{"/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, http.StatusOK},
			{"/v1/otp", keyLogin, otpBody, http.StatusOK},
		}
		for _, c := range cases {
			for _, keys := range [][]string{{"k-first", "k-second"}, {"k-same", "k-same"}} {
				r := h.postKeys(c.path, c.key, c.body, keys...)
				wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "Idempotency-Key")
			}
		}
		if n := len(h.sim.Accepted()); n != 0 {
			t.Errorf("%d sends after refused requests", n)
		}
		if st := h.stats(); st.Classes["transactional"].Ready+st.Classes["transactional"].Leased != 0 {
			t.Errorf("refused requests queued messages: %+v", st.Classes["transactional"])
		}
		for _, c := range cases {
			for _, k := range []string{"k-first", "k-second", "k-same"} {
				r := h.postKeys(c.path, c.key, c.body, k)
				wantStatus(t, r, c.ok)
				if r.header.Get("Idempotent-Replayed") != "" {
					t.Errorf("%s with key %s: replayed an answer kept for a refused request", c.path, k)
				}
			}
		}
	})
}

// TestKeyedRequestsBounded, in both modes, through real HTTP: what a
// producer can make the gateway keep for the idempotency window is
// bounded by producers[].max_keyed_per_day. Within it, keyed requests
// (single and batch) are accepted; past it a keyed request with a new key
// is 429 too-many-keyed-requests naming the key and the header, with
// Retry-After; a retry of a key already answered
// still gets its first answer, byte for byte, and a request without a key
// is accepted. Another producer has its own bound.
func TestKeyedRequestsBounded(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) { c.Producers[0].MaxKeyedPerDay = 3 })
		keyed := func(key string) reply {
			return h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", key)
		}
		first := keyed("order-1")
		wantStatus(t, first, http.StatusAccepted)
		wantStatus(t, keyed("order-2"), http.StatusAccepted)
		b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, "Idempotency-Key", "batch-1")
		wantStatus(t, b, http.StatusOK)

		over := keyed("order-3")
		p := wantProblem(t, over, http.StatusTooManyRequests, httpapi.ProblemKind("too-many-keyed-requests"), "Idempotency-Key")
		if d, _ := p["detail"].(string); !strings.Contains(d, "producers[].max_keyed_per_day") {
			t.Errorf("detail %q does not name the key", d)
		}
		if ra, err := strconv.Atoi(over.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After %q", over.header.Get("Retry-After"))
		}
		again := keyed("order-1")
		wantStatus(t, again, http.StatusAccepted)
		if string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry of an answered key: %s (replayed %q), first %s", again.body, again.header.Get("Idempotent-Replayed"), first.body)
		}
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		wantStatus(t, h.post("/v1/messages", keyLogin, msg("otp"), "Idempotency-Key", "order-3"), http.StatusAccepted)
	})
}
