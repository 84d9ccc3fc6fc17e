package gateway

import (
	"net/http"
	"net/url"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/provider/twilio"
)

// Twilio reads the account's own opt-out and opt-in keywords (Advanced
// Opt-Out: custom ones, other languages) and says so in OptOutType; it
// then refuses every send to the number itself. The gateway follows it:
// ARRET with OptOutType STOP lists the number at once, not after a send
// fails with 21610; the opt-in with START lifts it; HELP changes nothing.
func TestTwilioOptOutTypeIsAKeyword(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			twilioAdapter := inboundAdapters[1]
			if twilioAdapter.name != "twilio" {
				t.Fatalf("inboundAdapters[1] is %s", twilioAdapter.name)
			}
			h := start(t, m, func(c *config.Config) { twilioAdapter.edit(t, c) })
			post := func(text, optOutType string) {
				t.Helper()
				form := url.Values{"MessageSid": {twilioInbound(inboundFrom, text)}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"},
					"From": {inboundFrom}, "To": {"+15005550006"}, "Body": {text}, "NumMedia": {"0"}}
				if optOutType != "" {
					form.Set("OptOutType", optOutType)
				}
				twilioAdapter.ok(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/twilio", body: form.Encode(),
					header: map[string]string{"Content-Type": "application/x-www-form-urlencoded",
						twilio.HeaderSignature: twilio.Signature(twilioToken, twilioPublic, form)}}))
			}
			post("ARRET", "") // not one of the gateway's keywords, and Twilio did not read it as one
			if l := h.suppressionsOf(t); len(l) != 0 {
				t.Fatalf("ARRET without OptOutType changed the list: %+v", l)
			}
			post("AIDE", "HELP")
			if l := h.suppressionsOf(t); len(l) != 0 {
				t.Fatalf("HELP changed the list: %+v", l)
			}
			post("ARRET", "STOP")
			l := h.suppressionsOf(t)
			if len(l) != 1 || l[0].Source != "recipient" {
				t.Fatalf("after ARRET read by Twilio as STOP the list is %+v; want the recipient's entry", l)
			}
			wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
			post("REPRENDRE", "START")
			if l := h.suppressionsOf(t); len(l) != 0 {
				t.Fatalf("the opt-in Twilio read as START left %+v", l)
			}
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
		})
	}
}
