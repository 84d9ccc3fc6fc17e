package provider

import (
	"net/http"
	"time"
)

// Inbound is one message a recipient sent to the account's number (a
// mobile-originated message, MO), as a vendor posted it, its signature
// checked. The gateway reads only whether Text is an opt-out or opt-in
// keyword; it never stores or forwards From or Text, and shows From masked
// at most.
type Inbound struct {
	// From is the sender's number as the vendor gives it, with a leading
	// '+' (the vendor's own form otherwise: a WhatsApp address, a short
	// code), for the gateway to parse as E.164 when it needs the number.
	From string
	// FromField is the vendor's name of From's field ("From", "msisdn",
	// "from"), for a problem that names it.
	FromField string
	// To is our number the message was sent to, as the vendor gives it
	// ("" when it does not say); Service is the vendor's group of our
	// numbers it came through, where it names one (Twilio's
	// MessagingServiceSid). A reply goes to the producer that last
	// messaged From from one of them.
	To      string
	Service string
	// Text is the whole message body as the recipient typed it; "" when
	// the message has no text the gateway can judge (binary, or one part
	// of a longer message: a keyword is a whole message).
	Text string
	// ProviderID is the vendor's id of the inbound message, in the
	// vendor's own format (checked); for the generic protocol, which has
	// none of its own, the id the body gives or the hash of the signed
	// body. The gateway remembers the ids it applied and applies none
	// twice.
	ProviderID string
	// Keyword is the vendor's own reading of Text, where it sends one:
	// KeywordOptOut or KeywordOptIn when the text was one of the account's
	// opt-out or opt-in keywords at the vendor (Twilio's OptOutType, which
	// covers keywords the account added, in any language, such as ARRET),
	// "" otherwise. The vendor then acts on it itself (Twilio refuses every
	// later send with 21610): the gateway applies it as its own keyword.
	Keyword string
	// At is when the vendor received the message, where it signs a time
	// (Vonage, generic: checked against the replay window); zero where it
	// signs none (Twilio: ConfirmInbound gives it).
	At time.Time
}

// The vendor's readings of an inbound message's text (Inbound.Keyword).
const (
	KeywordOptOut = "opt-out"
	KeywordOptIn  = "opt-in"
)

// InboundParser is what an adapter that takes inbound messages adds to
// Provider: the check of its vendor's signature on the inbound-message
// webhook and the reading of its format, beside its ReceiptParser, with
// the same signature rule. The gateway only routes POST
// /v1/inbound/{adapter} to it.
type InboundParser interface {
	// ParseInbound checks the signature of r, whose body the caller has
	// already read, size-limited, into raw, and reads the message.
	// ErrBadSignature for a missing or wrong signature (checked first,
	// before anything in the body is believed; ErrStaleReceipt for a
	// signed time outside the window where the vendor signs one), a
	// *ReceiptError naming the vendor's field for a signed but malformed
	// message.
	ParseInbound(r *http.Request, raw []byte) (Inbound, error)
}

// DefaultSender is implemented by an adapter that sends a message naming
// no sender from one of its configuration: that sender (a number, or a
// group of numbers such as a Twilio messaging service), where a reply to
// such a message arrives.
type DefaultSender interface {
	DefaultSender() string
}

// InboundAcker is implemented by an adapter whose vendor reads the answer
// to an inbound message as an instruction: the gateway answers 200 with
// this content type and body instead of 204 (Twilio: an empty TwiML
// document, so that Twilio sends no reply).
type InboundAcker interface {
	InboundAck() (contentType string, body []byte)
}
