// Package vonage is the adapter for the Vonage (Nexmo) SMS API:
//
//	POST {BaseURL}/sms/json
//	form: api_key, api_secret, from, to (E.164 without '+'), text,
//	      type=unicode for UCS-2 bodies, client-ref=<message id>
//
// Vonage answers HTTP 200 for most failures and puts the outcome in each
// part's "status": {"message-count":"1","messages":[{"status":"0",
// "message-id":"..."}]}. Status "1" (Throttled) arrives as a 200 and is a
// throttle of the sender (scope sender: that sender pauses, not the
// account); its text says how long to wait ("Throughput Rate
// Exceeded - please wait [ 978 ] and retry", in milliseconds). A long text
// is split into parts, each with its own status: when some were accepted
// and others not, the accepted ones will be delivered and billed, so the
// message must never be sent again (ReasonPartial, as Vonage's own
// libraries raise a distinct partial-failure error). A 200 with
// {"error-code","error-code-label"} and no messages is an error of the
// request. Status 2 (Missing Parameters: we always send to, text and the
// keys, so the missing one is the sender) and 15 for the account's own
// sender are the account's setup, handled like refused credentials. The
// remaining TTL goes as ttl. client-ref carries our message id; Vonage does
// not de-duplicate on it, so a retry after an unknown outcome can duplicate.
package vonage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

// defaultBaseURL is the SMS API host.
const defaultBaseURL = "https://rest.nexmo.com"

// DefaultTimeout bounds one send when provider.timeout is 0. Vonage does
// not de-duplicate on client-ref, so a send our own timeout cuts off while
// Vonage is still answering is an unknown outcome whose retry may be a
// duplicate. Vonage's own libraries set no timeout (Python) or leave it to
// the HTTP client; 10 s is far beyond a healthy answer and well within a
// lease, as for Twilio.
const DefaultTimeout = 10 * time.Second

// The bounds of the SMS API's ttl: 20 s to 7 days (default 72 h).
const (
	minTTL = 20 * time.Second
	maxTTL = 7 * 24 * time.Hour
)

// throttleWait finds the wait in a status-1 text: "please wait [ 978 ]"
// (milliseconds). Other bracketed numbers of such texts ("MAX [ 30 ]")
// are not waits.
var throttleWait = regexp.MustCompile(`wait \[\s*(\d{1,9})\s*\]`)

// Settings are the Vonage account keys of the configuration
// (provider.vonage.*).
type Settings struct {
	APIKey    string `yaml:"api_key"`
	APISecret string `yaml:"api_secret"` // never logged
	From      string `yaml:"from"`       // sender when a request has none; Vonage needs one or the other
	// SignatureSecret checks the signature of delivery receipts (signed
	// webhooks); empty: every receipt is refused. Never logged.
	SignatureSecret string `yaml:"signature_secret"`
	// SignatureMethod is the account's signing method: md5hash (Vonage's
	// default), md5, sha1, sha256 or sha512 (HMACs).
	SignatureMethod string `yaml:"signature_method"`
}

// Validate reports every problem of s, each an *httpprov.SettingError
// naming its key under prefix.
func (s Settings) Validate(prefix string) error {
	var errs []error
	if s.APIKey == "" {
		errs = append(errs, httpprov.Required(prefix, "api_key"))
	}
	if s.APISecret == "" {
		errs = append(errs, httpprov.Required(prefix, "api_secret"))
	}
	// Vonage refuses a message without one (status 2, Missing Parameters);
	// a request's own sender is optional, so the account must have one to
	// fall back on.
	if s.From == "" {
		errs = append(errs, &httpprov.SettingError{Key: httpprov.KeyPath(prefix, "from"),
			Problem: "must be set (the sender of a message that names none; Vonage requires one)"})
	}
	if s.SignatureMethod != "" && !slices.Contains(Methods, s.SignatureMethod) {
		errs = append(errs, &httpprov.SettingError{Key: httpprov.KeyPath(prefix, "signature_method"),
			Problem: "must be one of " + strings.Join(Methods, ", ")})
	}
	return errors.Join(errs...)
}

// Config configures the Vonage adapter.
type Config struct {
	Settings
	BaseURL string // default https://rest.nexmo.com; tests point it at a fake
	// Callback is the delivery receipt webhook (provider.receipt_url),
	// sent with each message; empty: the account's default.
	Callback string
	Timeout  time.Duration
	Client   *http.Client
	Logger   *slog.Logger
	// Now is the clock a receipt's signed timestamp is checked against;
	// nil: time.Now. Tests set it.
	Now func() time.Time
}

// Provider sends through Vonage.
type Provider struct {
	cfg  Config
	send httpprov.FormSend // the POST of a send: its endpoint, client, timeout and log
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	cfg.BaseURL = cmp.Or(cfg.BaseURL, defaultBaseURL)
	//nolint:staticcheck // QF1008: the shared settings' check, by name
	if err := errors.Join(cfg.Settings.Validate("vonage"), httpprov.CheckURL("vonage.base_url", cfg.BaseURL)); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c, err := httpprov.Setup("vonage", cmp.Or(cfg.Timeout, DefaultTimeout), cfg.Client, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.Timeout
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/sms/json"
	return &Provider{cfg: cfg, send: httpprov.FormSend{Vendor: "vonage", Client: c.Client, Endpoint: endpoint, Timeout: c.Timeout, Log: c.Logger}}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "vonage" }

// now is the receipts' clock.
func (p *Provider) now() time.Time { return p.cfg.Now() }

// CloseIdleConnections releases idle keep-alive connections.
func (p *Provider) CloseIdleConnections() { p.send.Client.CloseIdleConnections() }

type answer struct {
	MessageCount string `json:"message-count"`
	Messages     []part `json:"messages"`
	// A request refused as a whole: {"error-code":"420","error-code-label":"..."};
	// the label is the vendor's text, never kept (errorCodeMessage).
	ErrorCode string `json:"error-code"`
}

type part struct {
	Status    string `json:"status"`
	MessageID string `json:"message-id"`
	// ErrorText is read for a throttle's wait only, never kept
	// (statusMessage).
	ErrorText string `json:"error-text"`
}

// Send implements provider.Provider.
func (p *Provider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	from := req.From
	if from == "" {
		from = p.cfg.From
	}
	form := url.Values{
		"api_key":    {p.cfg.APIKey},
		"api_secret": {p.cfg.APISecret},
		"from":       {strings.TrimPrefix(from, "+")},
		"to":         {strings.TrimPrefix(req.To, "+")},
		"text":       {req.Body},
		"client-ref": {req.ID},
	}
	if p.cfg.Callback != "" {
		// The delivery receipt's webhook for this message, over the
		// account's default.
		form.Set("callback", p.cfg.Callback)
	}
	if sms.CountSegments(req.Body).Encoding == sms.UCS2 {
		// Without it Vonage sends the text as GSM-7 and mangles it.
		form.Set("type", "unicode")
	}
	if req.Validity > 0 {
		// In ms; below the minimum it may arrive up to 20 s later than
		// our TTL, above the maximum Vonage stops earlier.
		form.Set("ttl", strconv.FormatInt(min(max(req.Validity, minTTL), maxTTL).Milliseconds(), 10))
	}
	ownSender := req.From != ""
	return p.send.Do(ctx, req, form, func(resp *http.Response, body []byte, rerr error) (provider.Result, error) {
		return readAnswer(resp, body, rerr, ownSender)
	})
}

// readAnswer reads Vonage's answer to a send; ownSender says the request named
// its own sender (not the account's).
func readAnswer(resp *http.Response, body []byte, rerr error, ownSender bool) (provider.Result, error) {
	now := time.Now()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Gateway-level answers (429 from Vonage's edge, 5xx, 401) carry
		// no per-message status.
		// The status's own text; never the body's title or error-text.
		return provider.Result{}, httpprov.StatusError(resp.StatusCode, resp.Header, now, "")
	}
	if rerr != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, rerr.Error())
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "decode answer: "+err.Error())
	}
	if len(a.Messages) == 0 {
		if a.ErrorCode != "" {
			return provider.Result{}, requestError(resp.StatusCode, a, resp.Header, now)
		}
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "answer has no messages")
	}
	return outcome(resp.StatusCode, a.Messages, resp.Header, now, ownSender)
}

// outcome reads the parts of a 200 answer. All accepted: sent, under the
// first part's id. None: the first refusal decides. Some: a partial
// failure that records the accepted parts and must not be sent again.
func outcome(status int, parts []part, h http.Header, now time.Time, ownSender bool) (provider.Result, error) {
	var accepted []string
	var refused *provider.Error
	for i, m := range parts {
		if m.Status == "0" {
			if m.MessageID != "" {
				accepted = append(accepted, m.MessageID)
			}
			continue
		}
		if refused == nil {
			refused = classify(m.Status, m.ErrorText, h, now, ownSender)
			refused.Status = status
			refused.Message = statusMessage(m.Status)
			if len(parts) > 1 {
				refused.Message = httpprov.Safe(fmt.Sprintf("part %d of %d: %s", i+1, len(parts), refused.Message))
			}
		}
	}
	switch {
	case refused == nil && parts[0].MessageID == "":
		return provider.Result{}, httpprov.BadResponse(status, "answer has no message-id")
	case refused == nil:
		return provider.Result{ProviderID: parts[0].MessageID}, nil
	case len(accepted) == 0:
		return provider.Result{}, refused
	}
	return provider.Result{}, &provider.Error{Reason: provider.ReasonPartial, Status: status,
		RetryAfter: refused.RetryAfter, Accepted: accepted, PartReason: refused.Reason, Scope: refused.Scope,
		Message: httpprov.Safe(fmt.Sprintf("%d of %d parts accepted (not sent again); %s", len(accepted), len(parts), refused.Message))}
}

// requestError is a 200 that refuses the request as a whole, with an
// HTTP-like error-code: classified as that status would be.
func requestError(status int, a answer, h http.Header, now time.Time) *provider.Error {
	code, err := strconv.Atoi(a.ErrorCode)
	msg := errorCodeMessage(code, err == nil && code >= 100 && code <= 999)
	if err != nil || code < 400 || code > 599 {
		return &provider.Error{Reason: provider.ReasonRejected, Status: status, Message: msg}
	}
	pe := httpprov.StatusError(code, h, now, msg)
	pe.Status = status
	return pe
}

// classify maps a non-zero SMS API status to our reasons. Sources: Vonage
// "SMS API error codes" (developer.vonage.com/api-errors/sms).
func classify(status, text string, h http.Header, now time.Time, ownSender bool) *provider.Error {
	switch status {
	case "1": // Throttled: the sender's rate ("Throughput Rate Exceeded" for a US number over 1/s); the text may say how long to wait, in ms
		ra := provider.ParseRetryAfter(h.Get("Retry-After"), now)
		if m := throttleWait.FindStringSubmatch(text); m != nil {
			ms, _ := strconv.ParseInt(m[1], 10, 64)
			ra = provider.ClampRetryAfter(time.Duration(ms) * time.Millisecond)
		}
		return &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: ra, Scope: provider.ScopeSender}
	case "10": // Too Many Existing Binds ("back off and retry")
		return &provider.Error{Reason: provider.ReasonThrottled, Temporary: true,
			RetryAfter: provider.ParseRetryAfter(h.Get("Retry-After"), now)}
	case "5": // Internal Error
		return &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true}
	case "8", "9": // Partner Account Barred (suspended); Partner Quota Violation (no credit: top up and retry)
		return httpprov.Suspended(0, h, now, "")
	case "4", "11", "14", "32": // Invalid Credentials; not enabled for HTTP; Invalid Signature; signature and secret disallowed
		return &provider.Error{Reason: provider.ReasonAuth}
	case "2", "23": // Missing Parameters: we always send to, text and the keys; Invalid Callback Url: our own receipt URL
		return &provider.Error{Reason: provider.ReasonSetup}
	case "15": // Invalid Sender Address: the account's, or this message's
		if !ownSender {
			return &provider.Error{Reason: provider.ReasonSetup}
		}
	}
	// 3 Invalid Parameters, 6 Invalid Message, 7 Number Barred, 12 Message
	// Too Long, 15 for a producer's own sender, 22 Invalid Network Code,
	// 29 Non-Whitelisted Destination, 33 Number
	// De-activated, and anything undocumented: this message will not go
	// through as it is.
	return &provider.Error{Reason: provider.ReasonRejected}
}
