package gateway

import (
	"net/http"
	"slices"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestProducerSenders: a producer with senders may
// send only as those; without from it sends as the first; any other from
// is a 403 naming from, on the queued path, in a batch and on the OTP path.
func TestProducerSenders(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].Senders = []string{"Shop", "ShopNews"} // notify
		c.Producers[1].Senders = []string{"Bank"}             // login
	})
	r := h.post("/v1/messages", keyNotify, msg("transactional"))
	wantStatus(t, r, http.StatusAccepted)
	def := accepted(t, r).ID
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "from", "ShopNews")), http.StatusAccepted)
	for _, tc := range []struct{ path, key string }{{"/v1/messages", keyNotify}, {"/v1/otp", keyLogin}} {
		body := msg("transactional", "from", "Bank")
		if tc.path == "/v1/otp" {
			body = otpBody("from", "Shop")
		}
		r := h.post(tc.path, tc.key, body)
		wantStatus(t, r, http.StatusForbidden)
		if f := r.fields(t); !slices.Contains(f, "from") {
			t.Errorf("%s: errors name %v, want from", tc.path, f)
		}
	}
	r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "from", "Bank"), msg("transactional")}})
	wantStatus(t, r, http.StatusOK)
	var b httpapi.BatchResponse
	r.json(t, &b)
	if b.Results[0].Status != http.StatusForbidden || b.Results[0].Error.Errors[0].Field != "messages[0].from" || b.Results[1].Status != http.StatusAccepted {
		t.Errorf("batch: %s", r.body)
	}
	var v httpapi.MessageView
	eventually(t, "the default-sender message to be sent", func() bool {
		h.get("/v1/messages/"+def, keyNotify).json(t, &v)
		return v.Status == "sent"
	})
	if v.From != "Shop" {
		t.Errorf("from %q, want the producer's first sender Shop", v.From)
	}
	for _, rec := range h.sim.Accepted() {
		if rec.From == "Bank" {
			t.Error("the provider got a message from Bank")
		}
	}
	ot := h.post("/v1/otp", keyLogin, otpBody())
	wantStatus(t, ot, http.StatusOK)
}

// TestE164SenderNormalized: an E.164 sender is one sender however it is
// written (a trunk 0 after the country code, as many write UK numbers):
// it matches the producer's senders written the other way, and goes to
// the provider normalized, on the queued and the OTP path.
func TestE164SenderNormalized(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].Senders = []string{"+4402079460000"} // notify
		c.Producers[1].Senders = []string{"+442079460001"}  // login
	})
	r := h.post("/v1/messages", keyNotify, msg("transactional", "from", "+442079460000"))
	wantStatus(t, r, http.StatusAccepted)
	id := accepted(t, r).ID
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("from", "+4402079460001")), http.StatusOK)
	var v httpapi.MessageView
	eventually(t, "the message to be sent", func() bool {
		h.get("/v1/messages/"+id, keyNotify).json(t, &v)
		return v.Status == "sent"
	})
	if v.From != "+442079460000" {
		t.Errorf("stored from %q, want +442079460000", v.From)
	}
	froms := map[string]bool{}
	for _, rec := range h.sim.Accepted() {
		froms[rec.From] = true
	}
	if !froms["+442079460000"] || !froms["+442079460001"] || len(froms) != 2 {
		t.Errorf("the provider got senders %v, want the two normalized numbers", froms)
	}
}
