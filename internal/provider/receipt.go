package provider

import (
	"errors"
	"fmt"
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
	// PreviousSecret: the signature checked with the adapter's previous
	// secret, not its current one (a rotation under way; the generic
	// adapter's provider.previous_receipt_secret).
	PreviousSecret bool
	// OptedOut: the vendor says the message was not delivered because its
	// recipient opted out of the sender's messages (Vonage: err-code 9);
	// Recipient is then the recipient's number, with '+', as the signed
	// receipt gives it, for the suppression list. Never logged or stored
	// in clear.
	OptedOut  bool
	Recipient string
	// Said is what the receipt says beyond its message, classified as a
	// send's answer would be (nil: nothing): a sender's queue overflowing
	// at the vendor (Twilio 30001) pauses that sender, an account
	// suspended or at its daily limit (Twilio 30002, 63038) pauses every
	// send. Sender is the send's sender lane it concerns ("" for the
	// account's own sender), when Said's scope is the sender's.
	Said   *Error
	Sender string
}

// ErrBadSignature means a receipt request's signature is missing or
// wrong: nothing in it may be trusted or applied.
var ErrBadSignature = errors.New("provider: receipt signature missing or wrong")

// The window a receipt's signed time must fall in, on our clock: at most
// ReceiptMaxAge before now and at most ReceiptMaxAhead after it (the
// vendor's clock may run a little ahead of ours). Outside it the receipt is
// refused like a bad signature, so a captured one cannot be replayed later.
// Only a vendor that signs a time can be held to it: Vonage signs
// "timestamp", Unix seconds, "to protect against replay attacks" (Vonage's
// "Signing messages" guide, developer.nexmo.com/concepts/guides/signing-messages,
// now developer.vonage.com/getting-started/concepts/signing-messages).
//
// Vonage retries a receipt answered 429 or 5xx (ours: 503 when the store
// did not take it) after 5 s, doubling up to every 15 min, for 24 h
// (Vonage API Support, "How long does Vonage retry inbound messages for the
// SMS, Messages and Dispatch APIs?"), and a receipt's message-timestamp is
// when Vonage "started to push" it (SMS API delivery-receipt reference),
// timestamp its Unix form (Vonage's Node SDK types), so a retry may carry
// the first push's time: Vonage does not say it signs each retry anew. 15
// minutes lets the first seven retries (about 10.5 minutes) through while a
// capture still goes stale within a quarter of an hour; a receipt still
// unanswered after that is refused (401, which Vonage does not retry) and
// its message stays sent. A replay inside the window changes nothing: a
// receipt moves a message only forward and the first one decides.
const (
	ReceiptMaxAge   = 15 * time.Minute
	ReceiptMaxAhead = time.Minute
)

// ErrStaleReceipt means a receipt's signature checks but the time it was
// signed at is missing or outside [now-ReceiptMaxAge, now+ReceiptMaxAhead]:
// possibly a replay. errors.Is(err, ErrBadSignature) holds for it too, so it
// is answered like any refused signature (401) and changes nothing.
var ErrStaleReceipt error = staleReceipt{}

type staleReceipt struct{}

func (staleReceipt) Error() string {
	return "provider: receipt's signed time is missing or outside the accepted window (a replay?)"
}

func (staleReceipt) Is(target error) bool { return target == ErrBadSignature }

// CheckReceiptTime is nil when signed (the time a receipt's signature
// covers) lies within the window around now, else ErrStaleReceipt saying
// on which side it misses. A zero signed means the receipt carried none.
func CheckReceiptTime(signed, now time.Time) error {
	switch {
	case signed.IsZero():
		return fmt.Errorf("%w: no signed time", ErrStaleReceipt)
	case signed.Before(now.Add(-ReceiptMaxAge)):
		return fmt.Errorf("%w: signed more than %s ago", ErrStaleReceipt, ReceiptMaxAge)
	case signed.After(now.Add(ReceiptMaxAhead)):
		return fmt.Errorf("%w: signed more than %s ahead of our clock", ErrStaleReceipt, ReceiptMaxAhead)
	}
	return nil
}

// ReceiptError is a signed webhook (a receipt, or an inbound message)
// whose content is malformed; Field names the vendor's field.
type ReceiptError struct {
	Field  string
	Reason string
}

func (e *ReceiptError) Error() string { return "provider: webhook field " + e.Field + ": " + e.Reason }

// ReceiptParser is what an adapter that takes delivery receipts adds to
// Provider: the check of its vendor's signature and the reading of its
// vendor's format. The gateway only routes POST /v1/receipts/{adapter} to
// it.
type ReceiptParser interface {
	// ParseReceipt checks the signature of r, whose body the caller has
	// already read, size-limited, into raw, and reads the receipt.
	// ErrBadSignature for a missing or wrong signature (checked first,
	// before anything in the body is believed), a *ReceiptError for a
	// signed but malformed receipt; with it, the Receipt still says
	// which secret signed (PreviousSecret).
	ParseReceipt(r *http.Request, raw []byte) (Receipt, error)
}
