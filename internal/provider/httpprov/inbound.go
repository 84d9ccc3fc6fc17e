package httpprov

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"time"

	"smsgw/internal/provider"
)

// HeaderInboundSignature carries a generic inbound message's signature:
// "sha256=" and the hex HMAC-SHA256, keyed with provider.receipt_secret
// (or, while it is rotated, provider.previous_receipt_secret), of
// InboundDomain followed by the raw body. The prefix keeps the MAC inputs
// of inbound messages and receipts apart: a receipt's signature (over the
// body alone) never checks as an inbound message's, nor the other way.
const HeaderInboundSignature = "X-Smsgw-Inbound-Signature"

// InboundDomain is the domain-separation prefix of an inbound message's
// MAC input.
const InboundDomain = "smsgw-inbound-v1\n"

// InboundBody is a message a recipient sent to the account's number,
// POSTed as JSON to /v1/inbound/http by a provider of the generic
// protocol. Only these members, each once; at is required and must lie
// within provider.ReceiptMaxAge before and provider.ReceiptMaxAhead after
// the gateway's clock.
type InboundBody struct {
	// ID is the provider's id of the message (1 to 64 of A-Z a-z 0-9 . _
	// : -), optional: without one the message is known by its signed
	// body's hash. A message whose id was applied before is not applied
	// again.
	ID   string    `json:"id,omitempty"`
	From string    `json:"from"`         // the sender, E.164
	To   string    `json:"to,omitempty"` // our number or sender id
	Text string    `json:"text"`
	At   time.Time `json:"at,omitzero"` // when the provider received it; required
}

var inboundMembers = map[string]bool{"id": true, "from": true, "to": true, "text": true, "at": true}

var inboundID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// SignInbound is the value of HeaderInboundSignature for body.
func SignInbound(secret string, body []byte) string { return sign(secret, inboundInput(body)) }

// inboundInput is the MAC input of an inbound message's body.
func inboundInput(body []byte) []byte {
	return append([]byte(InboundDomain), body...)
}

var _ provider.InboundParser = (*Provider)(nil)

// ParseInbound implements provider.InboundParser for the generic protocol.
func (p *Provider) ParseInbound(r *http.Request, raw []byte) (provider.Inbound, error) {
	if ok, _ := signedBy(p.receiptSecret, p.previousSecret, r.Header.Get(HeaderInboundSignature), inboundInput(raw)); !ok {
		return provider.Inbound{}, provider.ErrBadSignature
	}
	if err := provider.CheckJSONNames(raw, func(n string) bool { return inboundMembers[n] }, "inbound message"); err != nil {
		return provider.Inbound{}, err
	}
	var b InboundBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return provider.Inbound{}, &provider.ReceiptError{Field: "body", Reason: "not a JSON inbound message"}
	}
	if err := provider.CheckReceiptTime(b.At, p.now()); err != nil {
		return provider.Inbound{}, err
	}
	if b.From == "" {
		return provider.Inbound{}, &provider.ReceiptError{Field: "from", Reason: "missing"}
	}
	id := b.ID
	switch {
	case id == "":
		sum := sha256.Sum256(raw)
		id = "sha256:" + hex.EncodeToString(sum[:16])
	case !inboundID.MatchString(id):
		return provider.Inbound{}, &provider.ReceiptError{Field: "id", Reason: "must be 1 to 64 of A-Z a-z 0-9 . _ : -"}
	}
	return provider.Inbound{From: b.From, FromField: "from", To: b.To, Text: b.Text, ProviderID: id, At: b.At}, nil
}
