// Package vonage is the adapter for the Vonage (Nexmo) SMS API:
//
//	POST {BaseURL}/sms/json
//	form: api_key, api_secret, from, to (E.164 without '+'), text,
//	      type=unicode for UCS-2 bodies, client-ref=<message id>
//
// Vonage answers HTTP 200 for most failures and puts the outcome in each
// part's "status": {"message-count":"1","messages":[{"status":"0",
// "message-id":"..."}]}. Status "1" (Throttled) arrives as a 200 and is a
// throttle like any 429. client-ref carries our message id; Vonage does not
// de-duplicate on it, so a retry after an unknown outcome can duplicate.
package vonage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

// defaultBaseURL is the SMS API host.
const defaultBaseURL = "https://rest.nexmo.com"

// Settings are the Vonage account keys of the configuration
// (provider.vonage.*).
type Settings struct {
	APIKey    string `yaml:"api_key"`
	APISecret string `yaml:"api_secret"` // never logged
	From      string `yaml:"from"`       // sender when a request has none; Vonage needs one or the other
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
	return errors.Join(errs...)
}

// Config configures the Vonage adapter.
type Config struct {
	Settings
	BaseURL string // default https://rest.nexmo.com; tests point it at a fake
	Timeout time.Duration
	Client  *http.Client
	Logger  *slog.Logger
}

// Provider sends through Vonage.
type Provider struct {
	cfg      Config
	endpoint string
	client   *http.Client
	log      *slog.Logger
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = defaultBaseURL
	}
	if err := errors.Join(cfg.Settings.Validate("vonage"), httpprov.CheckURL("vonage.base_url", cfg.BaseURL)); err != nil {
		return nil, err
	}
	c, err := httpprov.Setup("vonage", cfg.Timeout, cfg.Client, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.Timeout
	return &Provider{cfg: cfg, client: c.Client, log: c.Logger,
		endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/sms/json"}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "vonage" }

// CloseIdleConnections releases idle keep-alive connections.
func (p *Provider) CloseIdleConnections() { p.client.CloseIdleConnections() }

type answer struct {
	MessageCount string `json:"message-count"`
	Messages     []part `json:"messages"`
}

type part struct {
	Status    string `json:"status"`
	MessageID string `json:"message-id"`
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
	if sms.CountSegments(req.Body).Encoding == sms.UCS2 {
		// Without it Vonage sends the text as GSM-7 and mangles it.
		form.Set("type", "unicode")
	}
	ctx, cancel := httpprov.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return provider.Result{}, fmt.Errorf("vonage: build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Accept", "application/json")

	res, err := p.send(ctx, hreq)
	if pe := provider.AsError(err); pe != nil {
		p.log.Debug("provider send failed", "provider", "vonage", "id", req.ID, "to", sms.MaskPhone(req.To),
			"reason", pe.Reason, "status", pe.Status, "error", pe.Message)
	}
	return res, err
}

func (p *Provider) send(ctx context.Context, hreq *http.Request) (provider.Result, error) {
	resp, err := p.client.Do(hreq)
	if err != nil {
		return provider.Result{}, httpprov.TransportError(ctx, err)
	}
	body, rerr := httpprov.ReadBody(resp)
	now := time.Now()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Gateway-level answers (429 from Vonage's edge, 5xx, 401) carry
		// no per-message status.
		return provider.Result{}, httpprov.StatusError(resp.StatusCode, resp.Header, now, problemTitle(body))
	}
	if rerr != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, rerr.Error())
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "decode answer: "+err.Error())
	}
	if len(a.Messages) == 0 {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "answer has no messages")
	}
	// A long text is split into parts, each with its own status. The first
	// failing part decides; parts before it were accepted and will arrive,
	// which a retry cannot undo (say so in the message).
	for i, m := range a.Messages {
		if m.Status == "0" {
			continue
		}
		pe := classify(m.Status, resp.Header, now)
		pe.Status = resp.StatusCode
		pe.Message = httpprov.Safe(fmt.Sprintf("vonage status %s: %s", m.Status, m.ErrorText))
		if i > 0 {
			pe.Message = httpprov.Safe(fmt.Sprintf("part %d of %d: %s", i+1, len(a.Messages), pe.Message))
		}
		return provider.Result{}, pe
	}
	if a.Messages[0].MessageID == "" {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "answer has no message-id")
	}
	return provider.Result{ProviderID: a.Messages[0].MessageID}, nil
}

// classify maps a non-zero SMS API status to our reasons. Sources: Vonage
// "SMS API error codes" (developer.vonage.com/messaging/sms/guides/troubleshooting-sms).
func classify(status string, h http.Header, now time.Time) *provider.Error {
	switch status {
	case "1", "10": // Throttled; Too Many Existing Binds ("back off and retry")
		return &provider.Error{Reason: provider.ReasonThrottled, Temporary: true,
			RetryAfter: provider.ParseRetryAfter(h.Get("Retry-After"), now)}
	case "5": // Internal Error
		return &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true}
	case "8", "9": // Partner Account Barred (suspended); Partner Quota Violation (no credit: top up and retry)
		return httpprov.Suspended(0, h, now, "")
	case "4", "11", "14", "32": // Invalid Credentials; not enabled for HTTP; Invalid Signature; signature and secret disallowed
		return &provider.Error{Reason: provider.ReasonAuth}
	}
	// 2 Missing Parameters, 3 Invalid Parameters, 6 Invalid Message, 7 Number
	// Barred, 12 Message Too Long, 15 Invalid Sender Address, 22 Invalid
	// Network Code, 23 Invalid Callback Url, 29 Non-Whitelisted Destination,
	// 33 Number De-activated, and anything undocumented: this message will
	// not go through as it is.
	return &provider.Error{Reason: provider.ReasonRejected}
}

// problemTitle extracts a description from Vonage's RFC 7807 error bodies.
func problemTitle(body []byte) string {
	var pb struct {
		Title     string `json:"title"`
		ErrorText string `json:"error-text"`
	}
	_ = json.Unmarshal(body, &pb)
	if pb.Title != "" {
		return pb.Title
	}
	return pb.ErrorText
}
