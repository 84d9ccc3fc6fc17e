package httpprov

import (
	"encoding/json"
	"net/http"
	"time"

	"smsgw/internal/provider"
)

// HeaderInboundSignature carries a generic inbound message's signature,
// made as a receipt's is: "sha256=" and the hex HMAC-SHA256 of the raw
// body keyed with provider.receipt_secret.
const HeaderInboundSignature = "X-Smsgw-Inbound-Signature"

// InboundBody is a message a recipient sent to the account's number,
// POSTed as JSON to /v1/inbound/http by a provider of the generic
// protocol.
type InboundBody struct {
	From string    `json:"from"`         // the sender, E.164
	To   string    `json:"to,omitempty"` // our number or sender id
	Text string    `json:"text"`
	At   time.Time `json:"at,omitzero"` // when the provider received it
}

// SignInbound is the value of HeaderInboundSignature for body.
func SignInbound(secret string, body []byte) string { return sign(secret, body) }

var _ provider.InboundParser = (*Provider)(nil)

// ParseInbound implements provider.InboundParser for the generic protocol.
func (p *Provider) ParseInbound(r *http.Request, raw []byte) (provider.Inbound, error) {
	if ok, _ := signedBy(p.receiptSecret, p.previousSecret, r.Header.Get(HeaderInboundSignature), raw); !ok {
		return provider.Inbound{}, provider.ErrBadSignature
	}
	var b InboundBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return provider.Inbound{}, &provider.ReceiptError{Field: "body", Reason: "not a JSON inbound message"}
	}
	if b.From == "" {
		return provider.Inbound{}, &provider.ReceiptError{Field: "from", Reason: "missing"}
	}
	return provider.Inbound{From: b.From, FromField: "from", Text: b.Text}, nil
}
