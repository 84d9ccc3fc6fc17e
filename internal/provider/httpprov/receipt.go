package httpprov

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// HeaderReceiptSignature carries a generic receipt's signature:
// "sha256=" and the hex HMAC-SHA256 of the raw body keyed with
// provider.receipt_secret (or, while it is rotated,
// provider.previous_receipt_secret).
const HeaderReceiptSignature = "X-Smsgw-Receipt-Signature"

// ReceiptBody is a delivery receipt of the generic protocol, POSTed as JSON
// to /v1/receipts/http. The simulator encodes the same type.
type ReceiptBody struct {
	ProviderMessageID string    `json:"provider_message_id,omitempty"`
	Reference         string    `json:"reference,omitempty"`
	Status            string    `json:"status"` // delivered, undelivered or failed
	ErrorCode         string    `json:"error_code,omitempty"`
	At                time.Time `json:"at,omitzero"`
}

// SignReceipt is the value of HeaderReceiptSignature for body.
func SignReceipt(secret string, body []byte) string { return sign(secret, body) }

// sign is the generic protocol's signature of a webhook's MAC input:
// "sha256=" and its hex HMAC-SHA256 keyed with provider.receipt_secret. A
// receipt's input is its raw body, an inbound message's InboundDomain and
// its raw body (inboundInput).
func sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// signedBy reports whether got, a signature header's value, signs raw with
// secret or, when set, previous (and which: previousUsed), comparing with
// both in constant time, for receipts and inbound messages alike. No
// secret: nothing checks.
func signedBy(secret, previous, got string, raw []byte) (ok, previousUsed bool) {
	if secret == "" || !strings.HasPrefix(got, "sha256=") {
		return false, false
	}
	sig := []byte(strings.ToLower(got))
	cur := hmac.Equal(sig, []byte(sign(secret, raw)))
	if previous != "" && hmac.Equal(sig, []byte(sign(previous, raw))) {
		return true, true
	}
	return cur, false
}

var receiptStatuses = map[string]sms.Status{
	"delivered": sms.StatusDelivered, "undelivered": sms.StatusUndelivered, "failed": sms.StatusFailed,
}

// ParseReceipt implements provider.ReceiptParser for the generic protocol.
func (p *Provider) ParseReceipt(r *http.Request, raw []byte) (provider.Receipt, error) {
	return parseReceipt(p.receiptSecret, p.previousSecret, r, raw)
}

func parseReceipt(secret, previous string, r *http.Request, raw []byte) (provider.Receipt, error) {
	ok, prev := signedBy(secret, previous, r.Header.Get(HeaderReceiptSignature), raw)
	if !ok {
		return provider.Receipt{}, provider.ErrBadSignature
	}
	signed := provider.Receipt{PreviousSecret: prev}
	var b ReceiptBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return signed, &provider.ReceiptError{Field: "body", Reason: "not a JSON receipt"}
	}
	st, ok := receiptStatuses[b.Status]
	if !ok {
		return signed, &provider.ReceiptError{Field: "status", Reason: "must be delivered, undelivered or failed"}
	}
	if b.ProviderMessageID == "" && b.Reference == "" {
		return signed, &provider.ReceiptError{Field: "provider_message_id", Reason: "give provider_message_id or reference"}
	}
	return provider.Receipt{ProviderID: b.ProviderMessageID, Reference: b.Reference, Status: st,
		VendorStatus: b.Status, ErrorCode: b.ErrorCode, At: b.At, PreviousSecret: prev}, nil
}
