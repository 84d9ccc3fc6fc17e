package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

const receiptSecret = "receipt-secret-0123"

func (h *harness) receipt(t testing.TB, secret string, b httpprov.ReceiptBody) reply {
	t.Helper()
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	if secret != "" {
		hdr[httpprov.HeaderReceiptSignature] = httpprov.SignReceipt(secret, raw)
	}
	return h.do(req{method: http.MethodPost, path: "/v1/receipts/http", body: raw, header: hdr})
}

func (h *harness) status(t testing.TB, id string) httpapi.MessageView {
	t.Helper()
	r := h.get("/v1/messages/"+id, keyNotify)
	wantStatus(t, r, http.StatusOK)
	var v httpapi.MessageView
	r.json(t, &v)
	return v
}

func (h *harness) sendAndWait(t testing.TB) httpapi.MessageView {
	t.Helper()
	a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional")))
	var v httpapi.MessageView
	eventually(t, "message sent", func() bool {
		v = h.status(t, a.ID)
		return v.Status == sms.StatusSent
	})
	return v
}

// TestReceipts: a signed receipt moves sent to its status, by our id or by
// the provider's; replays and contradicting receipts change nothing;
// forged or unsigned ones are 401 bad-signature and change nothing; a
// receipt for no message of ours is counted, answered 204.
func TestReceipts(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
		a, b := h.sendAndWait(t), h.sendAndWait(t)

		for _, forged := range []string{"", "not-the-secret"} {
			r := h.receipt(t, forged, httpprov.ReceiptBody{Reference: a.ID, Status: "undelivered"})
			wantStatus(t, r, http.StatusUnauthorized)
			if typ := r.problem(t)["type"]; typ != "urn:smsgw:problem:bad-signature" {
				t.Fatalf("forged receipt: type %v", typ)
			}
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusSent {
			t.Fatalf("after forged receipts: %s, want sent", got)
		}

		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered", At: time.Now()}), http.StatusNoContent)
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "undelivered", ErrorCode: "EC9"}),
			http.StatusNoContent)
		for range 2 {
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered"}), http.StatusNoContent)
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "failed"}), http.StatusNoContent)
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "delivered"}), http.StatusNoContent)
		}
		if got := h.status(t, a.ID); got.Status != sms.StatusDelivered {
			t.Fatalf("a: %s, want delivered", got.Status)
		}
		if got := h.status(t, b.ID); got.Status != sms.StatusUndelivered || got.LastError != "EC9" {
			t.Fatalf("b: %s %q, want undelivered EC9", got.Status, got.LastError)
		}
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-nobody", Status: "delivered"}), http.StatusNoContent)
		bad := h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "read"})
		wantStatus(t, bad, http.StatusBadRequest)
		// only the configured adapter takes receipts.
		wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio", body: "MessageSid=SM1"}), http.StatusNotFound)

		mv := metricValues(string(h.get("/metrics", "").body), "smsgw_receipts_total", "smsgw_receipts_unknown_total",
			"smsgw_receipt_outcomes_total", "smsgw_delivery_ratio", "smsgw_receipt_latency_seconds_count")
		for series, want := range map[string]float64{
			`smsgw_receipts_total{adapter="http",status="delivered"}`:                  6,
			`smsgw_receipts_unknown_total{adapter="http"}`:                             1,
			`smsgw_receipt_outcomes_total{class="transactional",status="delivered"}`:   1,
			`smsgw_receipt_outcomes_total{class="transactional",status="undelivered"}`: 1,
			`smsgw_delivery_ratio{class="transactional"}`:                              0.5,
			`smsgw_receipt_latency_seconds_count{class="transactional"}`:               1,
		} {
			if mv[series] != want {
				t.Errorf("%s = %v, want %v", series, mv[series], want)
			}
		}
	})
}

// TestCancel: a producer cancels its own queued or scheduled message; a
// sent or canceled one is 409 not-cancelable; another producer's is 404.
func TestCancel(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "send_at", later)))
		del := func(id, key string) reply {
			return h.do(req{method: http.MethodDelete, path: "/v1/messages/" + id, key: key})
		}
		wantStatus(t, del(a.ID, keySlow), http.StatusNotFound)
		r := del(a.ID, keyNotify)
		wantStatus(t, r, http.StatusOK)
		var v httpapi.MessageView
		r.json(t, &v)
		if v.Status != sms.StatusCanceled {
			t.Fatalf("DELETE answered %s", v.Status)
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusCanceled {
			t.Fatalf("GET after cancel: %s", got)
		}
		again := del(a.ID, keyNotify)
		wantStatus(t, again, http.StatusConflict)
		if typ := again.problem(t)["type"]; typ != "urn:smsgw:problem:not-cancelable" {
			t.Fatalf("second cancel: type %v", typ)
		}
		sent := h.sendAndWait(t)
		wantStatus(t, del(sent.ID, keyNotify), http.StatusConflict)
		wantStatus(t, del("msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", keyNotify), http.StatusNotFound)
		wantStatus(t, del("nonsense", keyNotify), http.StatusNotFound)
	})
}

// fakeTwilio answers Twilio's Messages endpoint with a new SID and keeps
// each message's StatusCallback.
type fakeTwilio struct {
	mu        sync.Mutex
	n         int
	callbacks map[string]string // SID -> StatusCallback
}

// serveTwilioMessage answers a GET of an incoming message's Message
// resource (twilioInbound) as Twilio does: the record, or 404. false: r
// is not such a GET.
func serveTwilioMessage(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	sid, _ := strings.CutSuffix(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], ".json")
	m, ok := twilioMessages.Load(sid)
	if u, p, auth := r.BasicAuth(); !ok || !auth || u != "AC0123456789abcdef0123456789abcdef" || p == "" ||
		!strings.HasPrefix(r.URL.Path, "/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages/") {
		http.NotFound(w, r)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
	return true
}

func (f *fakeTwilio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if serveTwilioMessage(w, r) {
		return
	}
	_ = r.ParseForm()
	f.mu.Lock()
	f.n++
	sid := fmt.Sprintf("SM%032d", f.n)
	f.callbacks[sid] = r.PostForm.Get("StatusCallback")
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"sid":%q,"status":"queued"}`, sid)
}

// TestTwilioReceipts: behind a proxy (Twilio calls the public
// provider.receipt_url, the gateway sees another host), each send asks for
// a StatusCallback carrying our id, and a StatusCallback signed over the
// public URL moves the message; one signed over the URL the gateway sees,
// or with another token, is 401.
func TestTwilioReceipts(t *testing.T) {
	const token = "twilio-auth-token-0123"
	const public = "https://sms.example.com/v1/receipts/twilio"
	fake := &fakeTwilio{callbacks: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Provider.Kind = "twilio"
		c.Provider.HTTP.URL = srv.URL
		c.Provider.ReceiptURL = public
		c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: token, From: "+15005550006"}
	})
	v := h.sendAndWait(t)
	fake.mu.Lock()
	callback := fake.callbacks[v.ProviderMessageID]
	fake.mu.Unlock()
	u, err := url.Parse(callback)
	if err != nil || u.Query().Get("smsgw_ref") != v.ID || !strings.HasPrefix(callback, public+"?") {
		t.Fatalf("StatusCallback %q: want %s?smsgw_ref=%s", callback, public, v.ID)
	}
	form := url.Values{"MessageSid": {v.ProviderMessageID}, "MessageStatus": {"delivered"}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}}
	post := func(sig string) reply {
		return h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio?" + u.RawQuery, body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", twilio.HeaderSignature: sig}})
	}
	wantStatus(t, post(twilio.Signature(token, h.base+"/v1/receipts/twilio?"+u.RawQuery, form)), http.StatusUnauthorized)
	wantStatus(t, post(twilio.Signature("another-token", callback, form)), http.StatusUnauthorized)
	if got := h.status(t, v.ID).Status; got != sms.StatusSent {
		t.Fatalf("after forged callbacks: %s", got)
	}
	wantStatus(t, post(twilio.Signature(token, callback, form)), http.StatusNoContent)
	if got := h.status(t, v.ID).Status; got != sms.StatusDelivered {
		t.Fatalf("after the signed callback: %s, want delivered", got)
	}
}

// TestUnknownReceiptsLogSampled: a storm of receipts for no message of ours
// writes one log line per interval, never the vendor's whole id, and a body
// over the receipt bound is 413 before any signature work.
func TestUnknownReceiptsLogSampled(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	for i := range 50 {
		r := h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: fmt.Sprintf("vendor-id-%06d", i), Status: "delivered"})
		wantStatus(t, r, http.StatusNoContent)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "receipts matched no message"); n != 1 {
		t.Errorf("%d log lines for 50 unknown receipts within one interval, want 1", n)
	}
	if strings.Contains(logs, "vendor-id-0000") {
		t.Error("a vendor's id in the log unmasked")
	}
	mv := metricValues(string(h.get("/metrics", "").body), "smsgw_receipts_unknown_total")
	if got := mv[`smsgw_receipts_unknown_total{adapter="http"}`]; got != 50 {
		t.Errorf("unknown receipts counted %v, want 50", got)
	}
	big := `{"status":"delivered","reference":"` + strings.Repeat("x", httpapi.MaxReceiptBytes) + `"}`
	wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/http", body: big,
		header: map[string]string{"Content-Type": "application/json"}}), http.StatusRequestEntityTooLarge)
}

// TestStaleVonageReceipt: a Vonage receipt whose signature checks but
// whose signed timestamp is older than provider.ReceiptMaxAge (a captured
// receipt replayed) is 401 with a detail that says why, and a fresh one
// signed the same way is taken: an operator can tell a replayed or
// late-retried receipt from a wrong secret.
func TestStaleVonageReceipt(t *testing.T) {
	const secret = "vonage-signature-secret"
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Provider.Kind = "vonage"
		c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: secret}
	})
	post := func(at time.Time) reply {
		ps := map[string]string{"messageId": "0B00000012345678", "status": "delivered", "err-code": "0",
			"client-ref": sms.NewID(time.Now()), "nonce": "n1", "timestamp": strconv.FormatInt(at.Unix(), 10)}
		form := url.Values{}
		for k, v := range ps {
			form.Set(k, v)
		}
		form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, secret, ps))
		return h.do(req{method: http.MethodPost, path: "/v1/receipts/vonage", body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
	}
	stale := post(time.Now().Add(-provider.ReceiptMaxAge - time.Minute))
	wantStatus(t, stale, http.StatusUnauthorized)
	if !strings.Contains(string(stale.body), "signed time") {
		t.Errorf("stale receipt: %s; want a detail naming the signed time", stale.body)
	}
	wantStatus(t, post(time.Now()), http.StatusNoContent) // no such message: taken and counted as unknown
}

// TestReceiptPreviousSecret: while provider.receipt_secret is rotated a
// receipt signed with previous_receipt_secret is taken and applied, one
// signed with the current secret too, and one signed with an unrelated
// secret is 401 and changes nothing; smsgw_receipt_signatures_total says
// which secret checked each. Without previous_receipt_secret a receipt
// signed with it is 401.
func TestReceiptPreviousSecret(t *testing.T) {
	const previousSecret = "receipt-secret-old-0123"
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Provider.ReceiptSecret = receiptSecret
			c.Provider.PreviousReceiptSecret = previousSecret
		})
		a, b := h.sendAndWait(t), h.sendAndWait(t)

		forged := h.receipt(t, "an-unrelated-secret", httpprov.ReceiptBody{Reference: a.ID, Status: "undelivered"})
		wantStatus(t, forged, http.StatusUnauthorized)
		if typ := forged.problem(t)["type"]; typ != "urn:smsgw:problem:bad-signature" {
			t.Fatalf("forged receipt: type %v", typ)
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusSent {
			t.Fatalf("after a forged receipt: %s, want sent", got)
		}
		wantStatus(t, h.receipt(t, previousSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered"}), http.StatusNoContent)
		if got := h.status(t, a.ID).Status; got != sms.StatusDelivered {
			t.Fatalf("after a receipt signed with the previous secret: %s, want delivered", got)
		}
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "undelivered"}),
			http.StatusNoContent)
		if got := h.status(t, b.ID).Status; got != sms.StatusUndelivered {
			t.Fatalf("after a receipt signed with the current secret: %s, want undelivered", got)
		}
		wantStatus(t, h.receipt(t, previousSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "read"}), http.StatusBadRequest)

		got := metricValues(h.metrics(), "smsgw_receipt_signatures_total")
		for series, want := range map[string]float64{
			`smsgw_receipt_signatures_total{adapter="http",secret="previous"}`: 2, // delivered, and the malformed one
			`smsgw_receipt_signatures_total{adapter="http",secret="current"}`:  1,
		} {
			if got[series] != want {
				t.Errorf("%s = %v, want %v", series, got[series], want)
			}
		}
		if strings.Contains(h.logs.String(), previousSecret) || strings.Contains(h.logs.String(), receiptSecret) {
			t.Error("a receipt secret in the log")
		}

		after := start(t, m, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
		wantStatus(t, after.receipt(t, previousSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-1", Status: "delivered"}), http.StatusUnauthorized)
		wantStatus(t, after.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-1", Status: "delivered"}), http.StatusNoContent)
	})
}
