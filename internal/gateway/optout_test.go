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
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

// optOutTwilio speaks Twilio's Messages API: while optedOut, a send to
// inboundFrom is refused as Twilio refuses a recipient who replied STOP
// (400, code 21610); anything else is accepted. It counts the sends to
// that number.
type optOutTwilio struct {
	optedOut atomic.Bool
	toNumber atomic.Int64
	n        atomic.Int64
}

func (f *optOutTwilio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if serveTwilioMessage(w, r) {
		return
	}
	_ = r.ParseForm()
	w.Header().Set("Content-Type", "application/json")
	if r.PostForm.Get("To") == inboundFrom {
		f.toNumber.Add(1)
		if f.optedOut.Load() {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, `{"code":21610,"message":"Attempt to send to unsubscribed recipient","more_info":"https://www.twilio.com/docs/errors/21610","status":400}`)
			return
		}
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"sid":"SM%032d","status":"queued"}`, f.n.Add(1))
}

// TestProviderOptOut, in both modes, through real HTTP: Twilio refuses a
// marketing message with 21610 (the recipient replied STOP at Twilio). The
// message ends suppressed after one send (never retried, not a dead
// letter), its last error says the recipient opted out, the producer's
// webhook gets one signed message.suppressed event with error code
// opted_out; the number is on the list as the provider's entry, and the
// next marketing and transactional messages to it are accepted and end
// suppressed at their takes, spending no send. The recipient's START then lifts the provider's entry.
func TestProviderOptOut(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			fake := &optOutTwilio{}
			fake.optedOut.Store(true)
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			hook := newHookReceiver(t)
			h := start(t, m, func(c *config.Config) {
				c.Provider.Kind = "twilio"
				c.Provider.HTTP.URL = srv.URL
				c.Provider.InboundURL = twilioPublic
				c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: twilioToken, From: "+15005550006"}
				c.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
				c.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
			})
			a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "reference", "spring-sale",
				"body", "Spring sale! Reply STOP to opt out")))
			var v httpapi.MessageView
			eventually(t, "the message suppressed", func() bool {
				v = h.status(t, a.ID)
				return v.Status.Done()
			})
			if v.Status != sms.StatusSuppressed || v.Attempts != 1 || v.To != "+8190****5678" ||
				!strings.HasPrefix(v.LastError, "the recipient opted out at the provider: ") || !strings.Contains(v.LastError, "21610") {
				t.Fatalf("GET %+v; want suppressed after one attempt, saying the recipient opted out", v)
			}
			if n := fake.toNumber.Load(); n != 1 {
				t.Errorf("Twilio got %d sends to the number, want 1", n)
			}
			if dl := h.get("/v1/admin/dead-letters", keyAdmin); strings.Contains(string(dl.body), a.ID) {
				t.Errorf("a suppressed message among the dead letters: %s", dl.body)
			}

			eventually(t, "the status event", func() bool { return len(hook.events()) == 1 })
			doc, err := specDoc()
			if err != nil {
				t.Fatal(err)
			}
			for id, bodies := range hook.events() {
				var ev map[string]any
				if err := json.Unmarshal([]byte(bodies[0]), &ev); err != nil {
					t.Fatal(err)
				}
				if err := doc.Components.Schemas["StatusEvent"].Value.VisitJSON(ev); err != nil {
					t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, bodies[0])
				}
				data := ev["data"].(map[string]any)
				errObj, _ := data["error"].(map[string]any)
				if ev["type"] != "message.suppressed" || data["id"] != a.ID || data["status"] != "suppressed" || data["reference"] != "spring-sale" ||
					errObj == nil || errObj["code"] != "opted_out" || !strings.Contains(errObj["message"].(string), "opted out") {
					t.Errorf("event %s: %s", id, bodies[0])
				}
				if strings.Contains(bodies[0], "9012345678") || strings.Contains(bodies[0], "Spring sale") {
					t.Errorf("event %s carries the number or the text: %s", id, bodies[0])
				}
			}
			if hook.bad != 0 {
				t.Errorf("%d deliveries with a bad signature", hook.bad)
			}

			l := h.suppressionsOf(t)
			if len(l) != 1 || l[0].Source != "provider" || l[0].To != "+8190****5678" || !strings.Contains(l[0].Reason, "opted out") {
				t.Fatalf("the list %+v; want the provider's entry", l)
			}
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("transactional")))
			if n := fake.toNumber.Load(); n != 1 {
				t.Errorf("Twilio got %d sends to the number after it was suppressed, want still 1", n)
			}
			mv := metricValues(h.metrics(), "smsgw_dispatch_messages_total")
			if got := mv[`smsgw_dispatch_messages_total{class="marketing",outcome="suppressed"}`]; got != 2 {
				t.Errorf("suppressed outcomes %v, want 2 (the refused send, and the next marketing message ended at its take)", got)
			}

			// The recipient texts START (Twilio lifts its own block too): the
			// provider's entry goes, and messages flow again.
			fake.optedOut.Store(false)
			tw := inboundAdapters[1]
			tw.ok(t, tw.post(h, inboundFrom, "START", true))
			if l := h.suppressionsOf(t); len(l) != 0 {
				t.Fatalf("START left %+v", l)
			}
			b := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing")))
			eventually(t, "the next message sent", func() bool { return h.status(t, b.ID).Status == sms.StatusSent })
		})
	}
}

// fakeVonage speaks the SMS API: every send is accepted (status 0).
type fakeVonage struct {
	mu  sync.Mutex
	ids map[string]string // client-ref -> message-id
}

func (f *fakeVonage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f.mu.Lock()
	id := fmt.Sprintf("0B%014d", len(f.ids)+1)
	f.ids[r.PostForm.Get("client-ref")] = id
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"message-count":"1","messages":[{"status":"0","message-id":%q}]}`, id)
}

// TestVonageReceiptOptOut, in both modes: Vonage accepts a send and then
// reports in its signed delivery receipt that the recipient opted out
// (status failed, err-code 9, as its Opt-Out Assist guide documents). The
// message takes the receipt's status, and the recipient's number goes on
// the list as the provider's entry, so the next marketing message to it
// ends suppressed, unsent.
func TestVonageReceiptOptOut(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			fake := &fakeVonage{ids: map[string]string{}}
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			h := start(t, m, func(c *config.Config) {
				c.Provider.Kind = "vonage"
				c.Provider.HTTP.URL = srv.URL
				c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: vonageSecret}
			})
			v := h.sendAndWait(t)
			ps := map[string]string{"messageId": v.ProviderMessageID, "status": "failed", "err-code": "9", "msisdn": "819012345678",
				"to": "ACME", "client-ref": v.ID, "price": "0.00000000", "message-timestamp": time.Now().UTC().Format(time.DateTime),
				"timestamp": strconv.FormatInt(time.Now().Unix(), 10), "nonce": "n9"}
			form := url.Values{}
			for k, s := range ps {
				form.Set(k, s)
			}
			form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, vonageSecret, ps))
			wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/vonage", body: form.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}), http.StatusNoContent)
			if got := h.status(t, v.ID); got.Status != sms.StatusUndelivered || got.LastError != "9" {
				t.Fatalf("after the receipt: %s %q, want undelivered 9", got.Status, got.LastError)
			}
			l := h.suppressionsOf(t)
			if len(l) != 1 || l[0].Source != "provider" || l[0].To != "+8190****5678" {
				t.Fatalf("the list %+v; want the provider's entry", l)
			}
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
		})
	}
}
