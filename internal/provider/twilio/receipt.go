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
	"smsgw/internal/provider/httpprov"
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

// callbackURLs are the URLs Twilio may have signed for a request r to the
// webhook configured as base (the StatusCallback, or the number's
// inbound-message webhook): base's scheme, host and path (what Twilio was
// told, which a proxy in front of us may have rewritten) with the query
// string as it arrived. Twilio signs without the username and password of
// a URL (they only authenticate its request), and over https it has signed
// both with and without the port: its own validators accept the URL with
// the default port and without any, and so do we. Every form still needs
// the HMAC of the auth token; none comes from the request's own Host.
func callbackURLs(r *http.Request, base string) []string {
	u, err := url.Parse(base)
	if err != nil {
		return nil // validated in New
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, r.URL.RawQuery, false, "", ""
	hosts := []string{u.Host}
	name, port := u.Hostname(), u.Port()
	if strings.Contains(name, ":") {
		name = "[" + name + "]" // an IPv6 literal
	}
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	switch {
	case port == "":
		hosts = append(hosts, name+":"+def)
	case port == def || u.Scheme == "https":
		hosts = append(hosts, name)
	}
	// The configured text as it is first (the form this adapter always
	// accepted), then the normalised forms.
	text, _, _ := strings.Cut(base, "?")
	if r.URL.RawQuery != "" {
		text += "?" + r.URL.RawQuery
	}
	out := make([]string, 0, 1+len(hosts))
	out = append(out, text)
	for _, h := range hosts {
		v := *u
		v.Host = h
		out = append(out, v.String())
	}
	return out
}

// signedBy reports whether got is the signature of form over one of the
// URLs Twilio may have signed for base; every candidate is compared in
// constant time.
func signedBy(r *http.Request, base, token, got string, form url.Values) bool {
	ok := false
	for _, u := range callbackURLs(r, base) {
		if hmac.Equal([]byte(got), []byte(Signature(token, u, form))) {
			ok = true
		}
	}
	return ok
}

// verified checks X-Twilio-Signature of r, a form POST (its body raw) to
// the webhook configured as base, and returns the form. Refused
// (provider.ErrBadSignature): no base configured, no signature, a body
// that is not a form, a wrong signature. The key is the account's auth
// token (WebhookAuthToken when auth_token is an API key's secret): Twilio
// signs every webhook of the account with it, status callbacks and
// incoming messages alike ("Webhooks security", twilio.com/docs/usage/webhooks/webhooks-security).
func (p *Provider) verified(r *http.Request, raw []byte, base string) (url.Values, error) {
	form, err := url.ParseQuery(string(raw))
	token := p.cfg.WebhookAuthToken
	if token == "" {
		token = p.cfg.AuthToken
	}
	got := r.Header.Get(HeaderSignature)
	if err != nil || base == "" || got == "" || !signedBy(r, base, token, got, form) {
		return nil, provider.ErrBadSignature
	}
	return form, nil
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
	form, err := p.verified(r, raw, p.cfg.StatusCallback)
	if err != nil {
		return provider.Receipt{}, err
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
	rc := provider.Receipt{ProviderID: sid, Reference: r.URL.Query().Get(refParam), Status: statuses[word],
		VendorStatus: vendor, ErrorCode: form.Get("ErrorCode")}
	rc.Said, rc.Sender = p.receiptSaid(rc.ErrorCode, form)
	return rc, nil
}

// The receipt error codes that concern more than their message
// (twilio.com/docs/api/errors).
const (
	codeServiceQueueOverflow = "30001" // the sender's (or its Messaging Service's) queue at Twilio overflowed
	codeAccountSuspended     = "30002" // the account is suspended
	codeDailyLimit           = "63038" // the account's daily message limit is reached
)

// receiptSaid is what a receipt's error code says beyond its message, and
// the sender lane it concerns ("" for the account's own sender or
// Messaging Service): 30001 pauses that sender; 30002 and 63038 the
// account, with an alert. Nil for any other code.
func (p *Provider) receiptSaid(code string, form url.Values) (*provider.Error, string) {
	msg := "twilio receipt " + code
	switch code {
	case codeServiceQueueOverflow:
		sender := form.Get("From")
		if svc := form.Get("MessagingServiceSid"); svc != "" && svc == p.cfg.MessagingServiceSID || sender == p.cfg.From {
			sender = ""
		}
		return &provider.Error{Reason: provider.ReasonQueueFull, Temporary: true, RetryAfter: QueueFullPause,
			Message: msg + ": the queue of this sender overflowed", Scope: provider.ScopeSender}, sender
	case codeAccountSuspended:
		return &provider.Error{Reason: provider.ReasonSuspended, Temporary: true, RetryAfter: httpprov.SuspendedPause,
			Message: msg + ": the account is suspended"}, ""
	case codeDailyLimit:
		return &provider.Error{Reason: provider.ReasonSuspended, Temporary: true, RetryAfter: httpprov.SuspendedPause,
			Message: msg + ": the account's daily message limit is reached"}, ""
	}
	return nil, ""
}
