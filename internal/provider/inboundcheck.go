package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"time"
)

// The checks every inbound-message adapter makes once a message's
// signature holds, so that one captured, correctly signed request cannot
// be made into another message: the names a vendor documents and each
// only once (a signature over names and values joined without a
// separator, as Twilio's is, can otherwise be re-cut into other
// parameters), the vendor's message id in its own format, the gateway's
// own account, and (where the vendor signs one) a recent time. The
// gateway adds the rest: an id it applied before is not applied again,
// and an entry changes only for a message newer than it.

// maxFieldName bounds a parameter name quoted in a problem.
const maxFieldName = 64

// fieldName is name as a problem may quote it.
func fieldName(name string) string {
	if len(name) > maxFieldName {
		return name[:maxFieldName]
	}
	return name
}

// CheckFormNames refuses a form that gives a name more than once or a name
// known does not accept, as a *ReceiptError naming it.
func CheckFormNames(form url.Values, known func(string) bool) error {
	for name, vs := range form {
		if len(vs) > 1 {
			return &ReceiptError{Field: fieldName(name), Reason: "given more than once"}
		}
		if !known(name) {
			return &ReceiptError{Field: fieldName(name), Reason: "not a parameter of the vendor's inbound-message webhook"}
		}
	}
	return nil
}

// CheckJSONNames refuses a JSON object that gives a member more than once
// or a member known does not accept, as a *ReceiptError naming it (what
// names the body for one that is not a JSON object). Nested values are
// skipped whole.
func CheckJSONNames(raw []byte, known func(string) bool, what string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	bad := &ReceiptError{Field: "body", Reason: "not a JSON " + what}
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return bad
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return bad
		}
		switch {
		case seen[name]:
			return &ReceiptError{Field: fieldName(name), Reason: "given more than once"}
		case !known(name):
			return &ReceiptError{Field: fieldName(name), Reason: "not a member of " + what}
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return bad
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad
	}
	return nil
}

// InboundConfirmer is implemented by an adapter that asks its vendor's API
// whether an inbound message is real before a keyword in it is applied
// (Twilio: the Message resource of its sid). Its vendor signs no time, so
// a captured request stays valid for ever and only the vendor can say
// that the message exists, came from From and says Text.
type InboundConfirmer interface {
	// ConfirmInbound returns when the vendor received in (its own record
	// of the message); ErrInboundNotConfirmed when the vendor has no such
	// message or its record differs, ErrConfirmUnavailable when the vendor
	// could not be asked.
	ConfirmInbound(ctx context.Context, in Inbound) (time.Time, error)
}

// ErrInboundNotConfirmed means the vendor's API has no record of an
// inbound message as signed, or one that differs (another sender or
// text, not inbound, another account): a forgery or a re-cut capture.
// errors.Is(err, ErrBadSignature) holds for it: nothing in it is applied.
var ErrInboundNotConfirmed error = notConfirmed{}

type notConfirmed struct{}

func (notConfirmed) Error() string {
	return "provider: the vendor's API does not confirm the inbound message"
}

func (notConfirmed) Is(target error) bool { return target == ErrBadSignature }

// ErrConfirmUnavailable means the vendor's API could not be asked about an
// inbound message (unreachable, timed out, throttled, 5xx): nothing is
// applied, the message may be sent again.
var ErrConfirmUnavailable = errors.New("provider: the vendor's API could not confirm the inbound message now")
