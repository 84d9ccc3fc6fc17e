package provider

import (
	"errors"
	"net/http"
	"time"

	"smsgw/internal/sms"
)

// Receipt is one delivery report as a vendor sent it, its signature checked.
type Receipt struct {
	ProviderID   string     // the vendor's message id
	Reference    string     // our message id as the vendor echoes it; "" when it has none
	Status       sms.Status // delivered, undelivered or failed; "" for a status on the way (queued, sent, buffered) that changes nothing
	VendorStatus string     // the vendor's own word, for metrics: a closed set per adapter
	ErrorCode    string     // the vendor's error code, if any
	At           time.Time  // when the vendor says it happened; zero if it does not say
}

// ErrBadSignature means a receipt request's signature is missing or
// wrong: nothing in it may be trusted or applied.
var ErrBadSignature = errors.New("provider: receipt signature missing or wrong")

// ReceiptError is a signed receipt whose content is malformed; Field names
// the vendor's field.
type ReceiptError struct {
	Field  string
	Reason string
}

func (e *ReceiptError) Error() string { return "provider: receipt " + e.Field + ": " + e.Reason }

// ReceiptParser is what an adapter that takes delivery receipts adds to
// Provider: the check of its vendor's signature and the reading of its
// vendor's format. The gateway only routes POST /v1/receipts/{adapter} to
// it.
type ReceiptParser interface {
	// ParseReceipt checks the signature of r, whose body the caller has
	// already read, size-limited, into raw, and reads the receipt.
	// ErrBadSignature for a missing or wrong signature (checked first,
	// before anything in the body is believed), a *ReceiptError for a
	// signed but malformed receipt.
	ParseReceipt(r *http.Request, raw []byte) (Receipt, error)
}
