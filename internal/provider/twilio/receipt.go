package twilio

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio signs its webhooks with HMAC-SHA1; we only check it
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// HeaderSignature is the header Twilio signs its webhooks with.
const HeaderSignature = "X-Twilio-Signature"

// refParam is the query parameter of the StatusCallback that carries our
// message id (withRef).
const refParam = "smsgw_ref"

// Signature is X-Twilio-Signature of a webhook to fullURL with the POST
// form params, as Twilio documents it: the full URL Twilio requested
// (scheme to query string), each POST parameter's name and value appended
// without delimiters in the names' sorted order, HMAC-SHA1 keyed with the
// account's auth token, base64.
func Signature(authToken, fullURL string, params url.Values) string {
	var b strings.Builder
	b.WriteString(fullURL)
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := slices.Clone(params[k])
		slices.Sort(vs)
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(v)
		}
	}
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// callbackURL is the URL Twilio requested, as it signed it: the configured
// StatusCallback's scheme, host and path (what Twilio was told, which a
// proxy in front of us may have rewritten) and the query string as it
// arrived.
func (p *Provider) callbackURL(r *http.Request) string {
	base := p.cfg.StatusCallback
	if i := strings.IndexByte(base, '?'); i >= 0 {
		base = base[:i]
	}
	if r.URL.RawQuery != "" {
		return base + "?" + r.URL.RawQuery
	}
	return base
}

// statuses maps Twilio's MessageStatus values that end a message; the others
// (queued, sending, sent, accepted, scheduled, read, canceled, ...) change
// nothing.
var statuses = map[string]sms.Status{
	"delivered": sms.StatusDelivered, "undelivered": sms.StatusUndelivered, "failed": sms.StatusFailed,
}

// ParseReceipt implements provider.ReceiptParser for Twilio's StatusCallback
// (a form POST: MessageSid, MessageStatus, ErrorCode, ...), signed with
// X-Twilio-Signature.
func (p *Provider) ParseReceipt(r *http.Request, raw []byte) (provider.Receipt, error) {
	form, err := url.ParseQuery(string(raw))
	token := p.cfg.WebhookAuthToken
	if token == "" {
		token = p.cfg.AuthToken
	}
	got := r.Header.Get(HeaderSignature)
	if err != nil || p.cfg.StatusCallback == "" || got == "" ||
		!hmac.Equal([]byte(got), []byte(Signature(token, p.callbackURL(r), form))) {
		return provider.Receipt{}, provider.ErrBadSignature
	}
	sid := form.Get("MessageSid")
	if sid == "" {
		sid = form.Get("SmsSid")
	}
	if sid == "" {
		return provider.Receipt{}, &provider.ReceiptError{Field: "MessageSid", Reason: "missing"}
	}
	word := form.Get("MessageStatus")
	if word == "" {
		word = form.Get("SmsStatus")
	}
	vendor := word
	if _, known := statuses[word]; !known {
		vendor = "other"
	}
	return provider.Receipt{ProviderID: sid, Reference: r.URL.Query().Get(refParam), Status: statuses[word],
		VendorStatus: vendor, ErrorCode: form.Get("ErrorCode")}, nil
}
