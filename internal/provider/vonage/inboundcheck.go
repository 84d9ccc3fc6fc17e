package vonage

import (
	"mime"
	"net/http"
	"net/url"
	"regexp"

	"smsgw/internal/provider"
)

// inboundNames are the parameters of the SMS API's inbound-message
// webhook ("Inbound SMS", developer.vonage.com/messaging/sms/guides/inbound-sms,
// and its webhook reference): the account, the sender and recipient, the
// message's id, text and type, the parts of a concatenated or binary
// message, and the signing parameters. Any other name, or a name given
// twice, is refused.
var inboundNames = map[string]bool{
	"api-key": true, "msisdn": true, "to": true, "messageId": true, "text": true, "type": true, "keyword": true,
	"message-timestamp": true, "timestamp": true, "nonce": true, "sig": true,
	"concat": true, "concat-ref": true, "concat-total": true, "concat-part": true, "data": true, "udh": true,
}

func knownInbound(name string) bool { return inboundNames[name] }

// messageID is the format of the SMS API's message ids: 16 to 20
// hexadecimal digits (0A0000001234ABCD), or a UUID on newer accounts.
var messageID = regexp.MustCompile(`^([0-9A-Fa-f]{16,20}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)

// checkInbound checks a signed inbound message's parameters: Vonage's
// names, each once; this account's api-key; a messageId in Vonage's
// format.
func (p *Provider) checkInbound(r *http.Request, raw []byte, ps map[string]string) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		if err := provider.CheckJSONNames(raw, knownInbound, "inbound message"); err != nil {
			return err
		}
	} else {
		form, err := url.ParseQuery(string(raw))
		if err != nil {
			return provider.ErrBadSignature // params read it: not reached
		}
		if err := provider.CheckFormNames(form, knownInbound); err != nil {
			return err
		}
	}
	if ps["api-key"] != p.cfg.APIKey {
		return &provider.ReceiptError{Field: "api-key", Reason: "not this gateway's account (provider.vonage.api_key)"}
	}
	if !messageID.MatchString(ps["messageId"]) {
		return &provider.ReceiptError{Field: "messageId", Reason: "missing, or not a Vonage message id"}
	}
	return nil
}
