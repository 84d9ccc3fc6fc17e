package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nyaruka/phonenumbers"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

// premiumGB is a UK premium-rate number (09...), from libphonenumber's own
// example, with its last digit set to d.
func premiumGB(d int) string {
	n := phonenumbers.Format(phonenumbers.GetExampleNumberForType("GB", phonenumbers.PREMIUM_RATE), phonenumbers.E164)
	return n[:len(n)-1] + fmt.Sprint(d%10)
}

func wantProblem(t testing.TB, r reply, status int, kind httpapi.ProblemKind, field string) map[string]any {
	t.Helper()
	wantStatus(t, r, status)
	p := r.problem(t)
	if p["type"] != httpapi.ProblemTypeBase+string(kind) {
		t.Fatalf("problem type %v, want %s; body %s", p["type"], kind, r.body)
	}
	if field != "" {
		if fs := r.fields(t); len(fs) != 1 || fs[0] != field {
			t.Fatalf("problem fields %v, want [%s]", fs, field)
		}
	}
	return p
}

// TestProtectionDestination: a region outside protection.countries and a
// blocked number type are 422s naming the field and the region or type,
// on both paths and for batch items, and the simulator receives nothing.
func TestProtectionDestination(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) { c.Protection.Countries = []string{"JP", "GB"} })
			lv := "+37121234567" // a Latvian mobile
			p := wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", lv)), http.StatusUnprocessableEntity, httpapi.KindDestinationNotAllowed, "to")
			if p["region"] != "LV" || !strings.Contains(p["detail"].(string), "LV") {
				t.Errorf("problem %v does not name the region LV", p)
			}
			p = wantProblem(t, h.post("/v1/messages", keyNotify, msg("transactional", "to", "+88216123456")),
				http.StatusUnprocessableEntity, httpapi.KindDestinationNotAllowed, "to")
			if p["region"] != "none" {
				t.Errorf("a satellite number's region %v, want none", p["region"])
			}
			p = wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", premiumGB(1))), http.StatusUnprocessableEntity, httpapi.KindNumberTypeBlocked, "to")
			if p["number_type"] != "premium_rate" {
				t.Errorf("problem %v does not name premium_rate", p)
			}
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
				msg("marketing"), msg("marketing", "to", premiumGB(2)), msg("transactional", "to", lv)}})
			wantStatus(t, r, http.StatusOK)
			var br httpapi.BatchResponse
			r.json(t, &br)
			if br.Accepted != 1 || br.Results[1].Status != 422 || br.Results[2].Status != 422 ||
				br.Results[1].Error.Errors[0].Field != "messages[1].to" || br.Results[2].Error.Type != httpapi.ProblemTypeBase+string(httpapi.KindDestinationNotAllowed) {
				t.Fatalf("batch %s", r.body)
			}
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			eventually(t, "the allowed message at the provider", func() bool { return len(h.sim.Accepted()) == 2 })
			for _, a := range h.sim.Accepted() {
				if a.To != "+819012345678" {
					t.Errorf("the provider received a message to %s", a.To)
				}
			}
			st := h.stats().Protection.Refused
			if st["country"] != 3 || st["number_type"] != 2 {
				t.Errorf("refused %v, want 3 country and 2 number_type", st)
			}
			mv := metricValues(h.metrics(), "smsgw_protection_refusals_total")
			if mv[`smsgw_protection_refusals_total{class="otp",reason="country"}`] != 1 ||
				mv[`smsgw_protection_refusals_total{class="marketing",reason="number_type"}`] != 1 {
				t.Errorf("refusal metric %v", mv)
			}
		})
	}
}

// TestOTPPerNumberAcrossReplicas: two replicas on one Redis account share
// protection.otp_per_number: of 10 concurrent OTPs to one number through
// both, exactly the limit go out; the rest are 429 with Retry-After, and
// another number is unaffected.
func TestOTPPerNumberAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Protection.OTPPerNumber = config.OTPPerNumberConfig{Limit: 3, Window: time.Hour}
	a := startWith(t, cfg, s)
	cfg.Store.Path = t.TempDir()
	b := startWith(t, cfg, s)
	const hammered = "+819055512345"
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 10 {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Go(func() {
			r := h.with(t).post("/v1/otp", keyLogin, otpBody("to", hammered, "deadline_ms", 5000))
			if r.status == http.StatusTooManyRequests {
				wantProblem(t, r, http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
				if r.header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
			}
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 7 {
		t.Fatalf("answers %v, want 3 × 200 and 7 × 429", codes)
	}
	wantStatus(t, b.post("/v1/otp", keyLogin, otpBody("to", "+819055512346")), http.StatusOK)
	if n := len(s.Accepted()); n != 4 {
		t.Fatalf("the provider received %d OTPs, want 4", n)
	}
	if logs := a.logs.String() + b.logs.String(); strings.Contains(logs, "9055512345") {
		t.Error("the hammered number is in the logs")
	}
}

// TestSuppressionList: the admin API adds, lists (masked, with a stable
// id), and removes by number; a message to a suppressed number is
// accepted and ends suppressed unsent (transactional and marketing; OTP
// only with suppress_otp, refused at accept).
func TestSuppressionList(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			const to = "+819012345678"
			r := h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": to, "reason": "asked to stop"})
			wantStatus(t, r, http.StatusCreated)
			var added httpapi.SuppressionView
			r.json(t, &added)
			if added.To != "+8190****5678" || added.ID == "" {
				t.Fatalf("added %+v", added)
			}
			wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": to}), http.StatusOK)
			wantProblem(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": "12345"}), http.StatusBadRequest, httpapi.KindInvalid, "to")
			wantProblem(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": "+819012345679", "reason": "call +819012345679"}),
				http.StatusBadRequest, httpapi.KindInvalid, "reason")

			list := h.get("/v1/admin/suppressions", keyAdmin)
			wantStatus(t, list, http.StatusOK)
			if strings.Contains(string(list.body), "9012345678") || !strings.Contains(string(list.body), added.ID) {
				t.Fatalf("list %s: shows the number or misses the id", list.body)
			}
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("transactional")))
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK) // suppress_otp is off

			del := h.do(req{method: http.MethodDelete, path: "/v1/admin/suppressions/%2B" + to[1:], key: keyAdmin})
			wantStatus(t, del, http.StatusNoContent)
			del = h.do(req{method: http.MethodDelete, path: "/v1/admin/suppressions/" + to, key: keyAdmin})
			wantStatus(t, del, http.StatusNotFound)
			// By id, as the list shows it.
			wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": to}), http.StatusCreated)
			wantStatus(t, h.do(req{method: http.MethodDelete, path: "/v1/admin/suppressions/" + added.ID, key: keyAdmin}), http.StatusNoContent)
			wantProblem(t, h.do(req{method: http.MethodDelete, path: "/v1/admin/suppressions/" + url.PathEscape("not a number"), key: keyAdmin}),
				http.StatusBadRequest, httpapi.KindInvalid, "number")
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
			// Ended at their takes, not refused at accept.
			if n := h.stats().Protection.Refused["suppressed"]; n != 0 {
				t.Errorf("suppressed refusals %d, want 0", n)
			}
		})
	}
}

// TestSuppressionsPersistAndPage: embedded, the list survives a restart of
// the gateway on the same store; it pages by id; with suppress_otp the
// otp is refused too.
func TestSuppressionsPersistAndPage(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	cfg.Protection.SuppressOTP = true
	h := startWith(t, cfg, s)
	for i := range 5 {
		wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": fmt.Sprintf("+81901234567%d", i)}), http.StatusCreated)
	}
	ctx := t.Context()
	if err := h.app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h = startWith(t, cfg, s)
	wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", "+819012345673")), http.StatusUnprocessableEntity, httpapi.KindSuppressed, "to")
	seen := map[string]bool{}
	after := ""
	for range 4 {
		r := h.get("/v1/admin/suppressions?limit=2&after="+after, keyAdmin)
		wantStatus(t, r, http.StatusOK)
		var page httpapi.SuppressionList
		r.json(t, &page)
		if page.Total != 5 {
			t.Fatalf("total %d after a restart, want 5", page.Total)
		}
		for _, e := range page.Suppressions {
			seen[e.ID] = true
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if len(seen) != 5 {
		t.Fatalf("paged %d entries, want 5", len(seen))
	}
	wantProblem(t, h.get("/v1/admin/suppressions?limit=0", keyAdmin), http.StatusBadRequest, httpapi.KindInvalid, "limit")
}

// pumpingRequest is one request of TestPumpingRun.
type pumpingRequest struct {
	kind, to string // kind: real, premium, foreign, hammered, campaign
}

// TestPumpingRun is an SMS pumping attack mixed with real traffic, over
// real HTTP against the simulator: OTPs to premium-rate numbers, to
// foreign and satellite numbers, and to one number over and over, among
// 60 real OTPs and a 40-message marketing campaign. The provider receives
// exactly the real traffic and the hammered number's allowance; the stats
// and the metric count every refusal by reason.
func TestPumpingRun(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Protection.Countries = []string{"JP", "GB"}
	cfg.Protection.OTPPerNumber = config.OTPPerNumberConfig{Limit: 3, Window: time.Hour}
	cfg.Protection.PrefixAlarm = config.PrefixAlarmConfig{Window: time.Hour, Share: 0.5, MinOTP: 20, Digits: 5}
	cfg.Producers[1].Rate, cfg.Producers[1].Burst = 1000, 1000
	h := startWith(t, cfg, s)

	rng := rand.New(rand.NewPCG(1, 2))
	var reqs []pumpingRequest
	for i := range 60 {
		reqs = append(reqs, pumpingRequest{"real", fmt.Sprintf("+81901%07d", i*7919%10_000_000)})
	}
	for i := range 30 {
		reqs = append(reqs, pumpingRequest{"premium", premiumGB(i)})
		foreign := fmt.Sprintf("+88216%06d", rng.IntN(1_000_000)) // Thuraya satellite
		if i%2 == 1 {
			foreign = fmt.Sprintf("+3712%07d", rng.IntN(10_000_000)) // Latvian mobiles
		}
		reqs = append(reqs, pumpingRequest{"foreign", foreign})
	}
	const hammered = "+819055512345"
	for range 20 {
		reqs = append(reqs, pumpingRequest{"hammered", hammered})
	}
	for i := range 40 {
		reqs = append(reqs, pumpingRequest{"campaign", fmt.Sprintf("+447400%06d", i*104729%1_000_000)})
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })

	statuses := runPumping(t, h, reqs)
	allowed := map[string]int{}
	for _, r := range reqs {
		if r.kind == "real" || r.kind == "campaign" {
			allowed[r.to]++
		}
	}
	allowed[hammered] = 3
	eventually(t, "the allowed messages at the provider", func() bool { return len(s.Accepted()) == 60+40+3 })
	got := map[string]int{}
	for _, a := range s.Accepted() {
		got[a.To]++
		if got[a.To] > allowed[a.To] {
			t.Errorf("the provider received a message to %s, which was not allowed that many times", a.To)
		}
	}
	st := h.stats().Protection.Refused
	t.Logf("requests %d: answers %v; provider received %d (60 real OTPs, 40 campaign, 3 of 20 to the hammered number); refused %v",
		len(reqs), statuses, len(s.Accepted()), st)
	if st["number_type"] != 30 || st["country"] != 30 || st["otp_per_number"] != 17 || st["suppressed"] != 0 {
		t.Errorf("refusals %v, want 30 number_type, 30 country, 17 otp_per_number", st)
	}
	if statuses[http.StatusOK] != 63 || statuses[http.StatusAccepted] != 40 || statuses[http.StatusUnprocessableEntity] != 60 ||
		statuses[http.StatusTooManyRequests] != 17 {
		t.Errorf("answers %v, want 63 × 200, 40 × 202, 60 × 422, 17 × 429", statuses)
	}
	mv := metricValues(h.metrics(), "smsgw_protection_refusals_total")
	if mv[`smsgw_protection_refusals_total{class="otp",reason="otp_per_number"}`] != 17 ||
		mv[`smsgw_protection_refusals_total{class="otp",reason="country"}`] != 30 ||
		mv[`smsgw_protection_refusals_total{class="otp",reason="number_type"}`] != 30 {
		t.Errorf("refusal metric %v", mv)
	}
}

// runPumping sends reqs with 8 concurrent clients and counts the answers.
func runPumping(t *testing.T, h *harness, reqs []pumpingRequest) map[int]int {
	statuses := map[int]int{}
	var mu sync.Mutex
	work := make(chan pumpingRequest)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for r := range work {
				var res reply
				if r.kind == "campaign" {
					res = h.with(t).post("/v1/messages", keyNotify, msg("marketing", "to", r.to))
				} else {
					res = h.with(t).post("/v1/otp", keyLogin, otpBody("to", r.to, "deadline_ms", 5000))
				}
				mu.Lock()
				statuses[res.status]++
				mu.Unlock()
			}
		})
	}
	for _, r := range reqs {
		work <- r
	}
	close(work)
	wg.Wait()
	if statuses[http.StatusInternalServerError] > 0 || statuses[http.StatusServiceUnavailable] > 0 {
		t.Errorf("answers %v: an error or an unavailable", statuses)
	}
	return statuses
}

// TestPrefixAlarm: when one number range takes most OTPs of a window the
// alarm counts once by region and logs once, the prefix masked.
func TestPrefixAlarm(t *testing.T) {
	t.Parallel()
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Protection.PrefixAlarm = config.PrefixAlarmConfig{Window: time.Hour, Share: 0.6, MinOTP: 10, Digits: 5}
	})
	for i := range 4 {
		wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", fmt.Sprintf("+44791234%04d", i))), http.StatusOK)
	}
	for i := range 12 {
		wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", fmt.Sprintf("+81901234%04d", i))), http.StatusOK)
	}
	mv := metricValues(h.metrics(), "smsgw_protection_prefix_alarms_total")
	if mv[`smsgw_protection_prefix_alarms_total{region="JP"}`] != 1 || mv[`smsgw_protection_prefix_alarms_total{region="unknown"}`] != 0 || len(mv) != 2 {
		t.Fatalf("alarms %v, want one for JP", mv)
	}
	logs := grepLines(h.logs.String(), "velocity alarm")
	if strings.Count(logs, "\n")+1 != 1 || !strings.Contains(logs, `"prefix":"+81901*******"`) {
		t.Fatalf("alarm log lines:\n%s", logs)
	}
}

// TestProtectionWithRedisDown: with Redis down the OTP fast path keeps
// sending and keeps being protected: a premium-rate number is still
// refused, the per-number limit is counted by this replica alone (and
// counted as a fallback), while transactional messages and the admin list
// answer 503 with Retry-After, never 500.
func TestProtectionWithRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	cfg.Redis.Timeout = 200 * time.Millisecond
	cfg.Protection.OTPPerNumber = config.OTPPerNumberConfig{Limit: 2, Window: time.Hour}
	h := startWith(t, cfg, s)
	const to = "+819055512345"
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", to)), http.StatusOK)
	srv.Stop()
	wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", premiumGB(3), "deadline_ms", 2000)),
		http.StatusUnprocessableEntity, httpapi.KindNumberTypeBlocked, "to")
	// This replica alone counts now: 2 more, whatever Redis held. As in
	// TestOTPWithRedisDown, a send may find no slot while the limiter's
	// breaker opens: a 503 with nothing sent gives its place back.
	codes := map[int]int{}
	for try := 0; codes[http.StatusOK] < 2; try++ {
		if try == 20 {
			t.Fatalf("OTPs with Redis down: %v after %d tries, want 2 × 200", codes, try)
		}
		r := h.post("/v1/otp", keyLogin, otpBody("to", to, "deadline_ms", 2000))
		codes[r.status]++
		switch r.status {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			t.Logf("503 with Redis down: %s", r.body)
		default:
			t.Fatalf("OTP %d with Redis down: %d %s, want 200 (or 503)", try+1, r.status, r.body)
		}
	}
	for range 2 {
		wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", to, "deadline_ms", 2000)), http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
	}
	for _, r := range []reply{
		h.post("/v1/messages", keyNotify, msg("transactional")),
		h.get("/v1/admin/suppressions", keyAdmin),
	} {
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("with Redis down: %d %s, want 503 with Retry-After", r.status, r.body)
		}
	}
	if v := metricValues(h.metrics(), "smsgw_protection_fallback_total")["smsgw_protection_fallback_total"]; v < 4 {
		t.Errorf("smsgw_protection_fallback_total %v, want at least 4", v)
	}
	if n := len(s.Accepted()); n != 1+codes[http.StatusOK] {
		t.Errorf("the provider received %d OTPs, want %d", n, 1+codes[http.StatusOK])
	}
}

// TestNumberIDReusedHMAC: numberID, which reuses keyed HMACs, answers
// HMAC-SHA256(key, number) for keys that alternate, from many goroutines.
func TestNumberIDReusedHMAC(t *testing.T) {
	keys := [][]byte{[]byte("account-key-1"), []byte("local-key-22"), []byte("account-key-1")}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key, to := keys[(g+i)%len(keys)], "+8190"+strconv.Itoa(10000000+i)
				m := hmac.New(sha256.New, key)
				m.Write([]byte(to))
				if got, want := admission.NumberID(key, to), hex.EncodeToString(m.Sum(nil)[:16]); got != want {
					t.Errorf("numberID(%s, %s) = %s, want %s", key, to, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
