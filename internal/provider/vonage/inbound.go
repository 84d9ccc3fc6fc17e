package vonage

import (
	"net/http"
	"strings"

	"smsgw/internal/provider"
)

// Inbound messages (POST /v1/inbound/vonage). Vonage posts each SMS to one
// of the account's virtual numbers to the account's inbound webhook with
// type (text, unicode or binary), to (our number), msisdn (the sender),
// messageId, message-timestamp, and for text and unicode text and keyword
// (the first word); a message longer than one part arrives part by part
// with concat, concat-ref, concat-total and concat-part; a signed one adds
// timestamp, nonce and sig ("Inbound SMS", developer.vonage.com/messaging/sms/guides/inbound-sms),
// checked here exactly as a delivery receipt is (verified, replay window
// included). Vonage resends a message it got no 200 or 204 for during 24
// hours (same guide): the gateway answers 204.

var (
	_ provider.InboundParser = (*Provider)(nil)
	_ provider.DefaultSender = (*Provider)(nil)
)

// DefaultSender implements provider.DefaultSender: vonage.from, the sender
// of a message that names none.
func (p *Provider) DefaultSender() string { return p.cfg.From }

// ParseInbound implements provider.InboundParser for the SMS API's inbound
// message webhook, a form or JSON POST (configure the account's webhook
// for POST: a GET has no body to sign here). The text of a binary message
// or of one part of a concatenated message is not read: a keyword is a
// whole, one-part message. The parameters are checked (checkInbound):
// Vonage's names, each once, this account's api-key, a messageId in
// Vonage's format.
func (p *Provider) ParseInbound(r *http.Request, raw []byte) (provider.Inbound, error) {
	ps, err := p.verified(r, raw)
	if err != nil {
		return provider.Inbound{}, err
	}
	if err := p.checkInbound(r, raw, ps); err != nil {
		return provider.Inbound{}, err
	}
	msisdn := ps["msisdn"]
	if msisdn == "" {
		return provider.Inbound{}, &provider.ReceiptError{Field: "msisdn", Reason: "missing"}
	}
	in := provider.Inbound{From: "+" + strings.TrimPrefix(msisdn, "+"), FromField: "msisdn", To: ps["to"], ProviderID: ps["messageId"],
		At: signedAt(ps["timestamp"])}
	if t := ps["type"]; (t == "text" || t == "unicode" || t == "") && ps["concat"] != "true" {
		in.Text = ps["text"]
	}
	return in, nil
}
