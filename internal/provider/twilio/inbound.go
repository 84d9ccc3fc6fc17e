package twilio

import (
	"net/http"

	"smsgw/internal/provider"
)

// Incoming messages (POST /v1/inbound/twilio). Twilio posts each message
// to a number (or messaging service) to the webhook configured for it, as
// a form: MessageSid (SmsSid, the same, deprecated), AccountSid, From, To,
// Body, NumMedia, ... ("Twilio's request to your incoming message Webhook
// URL", twilio.com/docs/messaging/guides/webhook-request), signed with
// X-Twilio-Signature exactly as a StatusCallback is (verified). Twilio
// "expects to receive TwiML in response" and sends what a text/plain answer
// holds back to the sender as a reply ("TwiML Message: Your Response",
// twilio.com/docs/api/twiml/sms/your_response): the answer is an empty
// <Response/> as text/xml, which asks for nothing.

// emptyTwiML is the answer to every incoming message: no reply.
const emptyTwiML = `<?xml version="1.0" encoding="UTF-8"?><Response/>`

var (
	_ provider.InboundParser = (*Provider)(nil)
	_ provider.InboundAcker  = (*Provider)(nil)
	_ provider.DefaultSender = (*Provider)(nil)
)

// ParseInbound implements provider.InboundParser for Twilio's
// incoming-message webhook, signed over Config.InboundURL, its form
// checked (checkInbound). Twilio signs no time: the gateway confirms a
// keyword with Twilio's API (ConfirmInbound) before applying it.
func (p *Provider) ParseInbound(r *http.Request, raw []byte) (provider.Inbound, error) {
	form, err := p.verified(r, raw, p.cfg.InboundURL)
	if err != nil {
		return provider.Inbound{}, err
	}
	sid, err := p.checkInbound(form)
	if err != nil {
		return provider.Inbound{}, err
	}
	from := form.Get("From")
	if from == "" {
		return provider.Inbound{}, &provider.ReceiptError{Field: "From", Reason: "missing"}
	}
	return provider.Inbound{From: from, FromField: "From", To: form.Get("To"), Service: form.Get("MessagingServiceSid"),
		Text: form.Get("Body"), ProviderID: sid,
		Keyword: optOutKeywords[form.Get("OptOutType")]}, nil
}

// optOutKeywords reads OptOutType, which Twilio adds to an incoming
// message whose text was one of the opt-out (STOP) or opt-in (START)
// keywords it handles for the account: the standard English ones and,
// with Advanced Opt-Out on a messaging service, the account's own, in any
// language ("Customize users' opt-in and opt-out experience with Advanced
// Opt-Out", twilio.com/docs/messaging/tutorials/advanced-opt-out). Twilio
// has then listed or unlisted the sender itself; HELP changes nothing.
var optOutKeywords = map[string]string{"STOP": provider.KeywordOptOut, "START": provider.KeywordOptIn}

// DefaultSender implements provider.DefaultSender: the configured From,
// else the messaging service, as a send without its own sender uses them.
func (p *Provider) DefaultSender() string {
	if p.cfg.From != "" {
		return p.cfg.From
	}
	return p.cfg.MessagingServiceSID
}

// InboundAck implements provider.InboundAcker: an empty TwiML document,
// so that Twilio sends no reply of ours (its own answer to STOP and START,
// where its opt-out handling is on, is its business).
func (p *Provider) InboundAck() (string, []byte) {
	return "text/xml", []byte(emptyTwiML)
}
