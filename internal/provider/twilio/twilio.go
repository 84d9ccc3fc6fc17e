// Package twilio is the adapter for Twilio's Programmable Messaging REST API
// (the Message resource):
//
//	POST {BaseURL}/2010-04-01/Accounts/{AccountSid}/Messages.json
//	Authorization: Basic (AccountSid or API key SID : auth token or key secret)
//	form: To, From | MessagingServiceSid, Body[, StatusCallback]
//
// 201 answers the Message resource ({"sid":"SM...",...}); errors answer
// {"code","message","more_info","status"}. 429 / code 20429 is a throttle;
// 10001 and 20005 ("account not active") are a suspension; 21610 (the
// recipient replied STOP to this sender: "Attempt to send to unsubscribed
// recipient") is an opt-out, never retried; 21611 (the sender's queue at
// Twilio holds its limit, 10 hours of its rate) is a long pause, not a
// failure, and the sender's alone (its queue, not the account's); 21609
// (our StatusCallback refused) is our configuration: every replica pauses;
// 21659, 21660 and 21661 (this From cannot send) are the sender's setup:
// that sender pauses; 20404 (no such account) and, for the account's own
// sender, 21606 and 21212 (From not usable) mean every message would fail
// alike: the account's setup, handled like refused credentials. The
// remaining TTL goes as ValidityPeriod, so Twilio drops what it could only
// deliver late.
//
// Twilio has no idempotency key for creating messages. The adapter sends
// the message id, when a StatusCallback is configured, as its smsgw_ref
// query parameter so delivery reports can be matched. A retry after an
// unknown outcome (timeout, reset) can therefore duplicate at Twilio. It
// sends no Idempotency-Key header: Twilio ignores it, and Go's transport
// takes it as leave to send the POST again by itself when a kept-alive
// connection dies after the request went out, a duplicate nobody paced or
// counted; without it that outcome comes back as unknown, like any other.
package twilio

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
)

// defaultBaseURL is Twilio's API host.
const defaultBaseURL = "https://api.twilio.com"

// Twilio error codes the adapter treats specially (twilio.com/docs/api/errors).
const (
	codeTooManyRequests = 20429
	codeAccountInactive = 20005
	codeAccountDisabled = 10001
	codeNotFound        = 20404 // the account in the URL does not exist
	codeQueueFull       = 21611 // this From has exceeded the maximum number of queued messages
	codeFromNotCapable  = 21606 // From is not a message-capable number of this account
	codeInvalidFrom     = 21212 // From is not a valid number, short code or sender id
	codeBadCallback     = 21609 // our StatusCallback URL refused: every send would be
	// The "From" codes Twilio added in 2024: this sender cannot send
	// (not a Twilio number or a short code of another country; owned by
	// another account; not SMS-capable). Every message from it would fail
	// alike: the sender's setup, whichever sender it is.
	codeFromNotTwilio    = 21659
	codeFromOtherAccount = 21660
	codeFromNotSMS       = 21661
	// codeUnsubscribed: "Attempt to send to unsubscribed recipient": the
	// recipient replied STOP (or another opt-out keyword) to this sender or
	// messaging service, and Twilio sends them nothing more until they
	// reply START (twilio.com/docs/api/errors/21610; Twilio support,
	// "Twilio support for opt-out keywords (SMS STOP filtering)"). Not
	// charged; never worth retrying.
	codeUnsubscribed = 21610
)

// DefaultTimeout bounds one send when provider.timeout is 0. Twilio does
// not de-duplicate a message created twice, so a send our own timeout cuts
// off while Twilio is still answering is an unknown outcome whose retry may
// be a duplicate. Twilio's own Go library waits 10 s for an answer; so do
// we: far beyond a healthy answer, well within a lease.
const DefaultTimeout = 10 * time.Second

// QueueFullPause is how long every replica pauses after 21611. Twilio
// answers it when the sender's queue at Twilio holds its limit (10 hours of
// the sender's rate, or the validity period); Twilio keeps sending from
// that queue meanwhile, so a pause of minutes loses no throughput, keeps
// our messages in our priority queue (where their TTL still counts)
// rather than at the end of Twilio's, and asks again rarely. 21611 is not
// a 429: it does not count towards the suspension guard.
const QueueFullPause = 10 * time.Minute

// maxValidity is Twilio's largest ValidityPeriod, which is also its
// default: 36,000 s.
const maxValidity = 36000 * time.Second

// Settings are the Twilio account keys of the configuration
// (provider.twilio.*).
type Settings struct {
	AccountSID          string `yaml:"account_sid"`           // AC...
	AuthToken           string `yaml:"auth_token"`            // with APIKeySID set, the API key's secret; never logged
	From                string `yaml:"from"`                  // sender when a request has none
	MessagingServiceSID string `yaml:"messaging_service_sid"` // MG...: used when neither the request nor From gives a sender
	// APIKeySID (SK...), when set, authenticates the API calls with that
	// API key instead of the account: the key's SID and auth_token (its
	// secret) as Basic credentials, the account still in the URL. Twilio
	// signs webhooks with the account's auth token whatever key the
	// requests use, so receipts and inbound messages then need
	// webhook_auth_token.
	APIKeySID string `yaml:"api_key_sid"`
	// WebhookAuthToken is the account's auth token, which signs
	// StatusCallbacks, when auth_token is an API key's secret; empty:
	// auth_token. Never logged.
	WebhookAuthToken string `yaml:"webhook_auth_token"`
}

// sidForm is the form of a Twilio resource SID: a two-letter prefix
// naming its kind (AC an account, MG a messaging service, SK an API key)
// and 32 hex digits, as Twilio's OpenAPI description gives it. A SID in
// another form is refused at start-up: Twilio would answer every send 404
// (20404, a wrong account) or 21xxx.
var sidForm = regexp.MustCompile(`^[A-Z]{2}[0-9a-fA-F]{32}$`)

// checkSID is the rule of one SID key: empty (checked by the caller when
// required) or kind's two letters and 32 hex digits. The value is not
// quoted: an API key's SID is half a credential.
func checkSID(prefix, name, value, kind, letters string) error {
	if value == "" || strings.HasPrefix(value, letters) && sidForm.MatchString(value) {
		return nil
	}
	return &httpprov.SettingError{Key: httpprov.KeyPath(prefix, name),
		Problem: "is not a Twilio " + kind + " SID (" + letters + " and 32 hex digits)"}
}

// Validate reports every problem of s, each an *httpprov.SettingError
// naming its key under prefix.
func (s Settings) Validate(prefix string) error {
	var errs []error
	if s.AccountSID == "" {
		errs = append(errs, httpprov.Required(prefix, "account_sid"))
	}
	if s.AuthToken == "" {
		errs = append(errs, httpprov.Required(prefix, "auth_token"))
	}
	errs = append(errs,
		checkSID(prefix, "account_sid", s.AccountSID, "account", "AC"),
		checkSID(prefix, "messaging_service_sid", s.MessagingServiceSID, "messaging service", "MG"),
		checkSID(prefix, "api_key_sid", s.APIKeySID, "API key", "SK"))
	// Twilio refuses a message with neither; a request's own sender is
	// optional, so the account must have one to fall back on.
	if s.From == "" && s.MessagingServiceSID == "" {
		errs = append(errs, &httpprov.SettingError{Key: httpprov.KeyPath(prefix, "from"),
			Problem: "set from or messaging_service_sid (the sender of a message that names none)"})
	}
	return errors.Join(errs...)
}

// basicUser is the user of the API calls' Basic credentials: the API key
// when one is set, else the account (auth_token is the password).
func (s Settings) basicUser() string {
	if s.APIKeySID != "" {
		return s.APIKeySID
	}
	return s.AccountSID
}

// CheckWebhooks is the rule of the URLs Twilio is given (the adapter's
// and the configuration's): statusCallback, sent as each message's
// StatusCallback and checked under callbackKey, must be an absolute
// http(s) URL whose host has no underscore (Twilio refuses such a
// StatusCallback with 21609, every send); and with an API key (api_key_sid)
// and either webhook URL set, webhook_auth_token must be set, since Twilio
// signs webhooks with the account's auth token, never the key's secret.
func (s Settings) CheckWebhooks(prefix, callbackKey, statusCallback, inboundURL string) error {
	var errs []error
	if statusCallback != "" {
		if err := httpprov.CheckURL(callbackKey, statusCallback); err != nil {
			errs = append(errs, err)
		} else if u, _ := url.Parse(statusCallback); strings.Contains(u.Hostname(), "_") {
			errs = append(errs, &httpprov.SettingError{Key: callbackKey,
				Problem: "has an underscore in its host name, which Twilio refuses as a StatusCallback (error 21609): every send would fail"})
		}
	}
	if s.APIKeySID != "" && s.WebhookAuthToken == "" && (statusCallback != "" || inboundURL != "") {
		errs = append(errs, &httpprov.SettingError{Key: httpprov.KeyPath(prefix, "webhook_auth_token"),
			Problem: "must be set with api_key_sid when receipts or inbound messages are taken: Twilio signs them with the account's auth token, not the API key's secret"})
	}
	return errors.Join(errs...)
}

// Config configures the Twilio adapter.
type Config struct {
	Settings
	BaseURL        string // default https://api.twilio.com; tests point it at a fake
	StatusCallback string // optional delivery-report URL (provider.receipt_url); smsgw_ref=<message id> is appended; receipts are refused without it
	// InboundURL is the public URL of the gateway's inbound endpoint
	// (provider.inbound_url, .../v1/inbound/twilio), as configured for the
	// account's number or messaging service: the URL Twilio's signature of
	// an incoming message covers; incoming messages are refused without it.
	InboundURL string

	Timeout time.Duration
	Client  *http.Client
	Logger  *slog.Logger
}

// Provider sends through Twilio.
type Provider struct {
	cfg  Config
	send httpprov.FormSend // the POST of a send: its endpoint, credentials, client, timeout and log
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	cfg.BaseURL = cmp.Or(cfg.BaseURL, defaultBaseURL)
	errs := []error{cfg.Settings.Validate("twilio"), //nolint:staticcheck // QF1008: the shared settings' check, by name
		httpprov.CheckURL("twilio.base_url", cfg.BaseURL),
		cfg.Settings.CheckWebhooks("twilio", "twilio.status_callback", cfg.StatusCallback, cfg.InboundURL)} //nolint:staticcheck // QF1008: as above
	if cfg.InboundURL != "" {
		errs = append(errs, httpprov.CheckURL("twilio.inbound_url", cfg.InboundURL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c, err := httpprov.Setup("twilio", cmp.Or(cfg.Timeout, DefaultTimeout), cfg.Client, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.Timeout
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Messages.json"
	return &Provider{cfg: cfg, send: httpprov.FormSend{Vendor: "twilio", Client: c.Client, Endpoint: endpoint, Timeout: c.Timeout, Log: c.Logger,
		Authorize: func(r *http.Request) { r.SetBasicAuth(cfg.basicUser(), cfg.AuthToken) }}}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "twilio" }

// CloseIdleConnections releases idle keep-alive connections.
func (p *Provider) CloseIdleConnections() { p.send.Client.CloseIdleConnections() }

// apiError is Twilio's error body.
type apiError struct {
	Code   int `json:"code"`
	Status int `json:"status"`
}

// message is the part of the Message resource we read.
type message struct {
	SID    string `json:"sid"`
	Status string `json:"status"`
}

// Send implements provider.Provider.
func (p *Provider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	form := url.Values{"To": {req.To}, "Body": {req.Body}}
	switch {
	case req.From != "":
		form.Set("From", req.From)
	case p.cfg.From != "":
		form.Set("From", p.cfg.From)
	case p.cfg.MessagingServiceSID != "":
		form.Set("MessagingServiceSid", p.cfg.MessagingServiceSID)
	}
	if p.cfg.StatusCallback != "" {
		form.Set("StatusCallback", withRef(p.cfg.StatusCallback, req.ID))
	}
	if v := req.Validity; v > 0 && v < maxValidity {
		// Whole seconds, rounded down (never past the TTL), at least 1.
		form.Set("ValidityPeriod", strconv.Itoa(max(1, int(v/time.Second))))
	}
	// The failure logged is scrubbed: Twilio quotes the number it refused
	// (21211) and may quote the text.
	ownSender := req.From != ""
	return p.send.Do(ctx, req, form, func(resp *http.Response, body []byte, rerr error) (provider.Result, error) {
		return readAnswer(resp, body, rerr, ownSender)
	})
}

// readAnswer reads Twilio's answer to a send; ownSender says the request named
// its own From (not the account's).
func readAnswer(resp *http.Response, body []byte, rerr error, ownSender bool) (provider.Result, error) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return provider.Result{}, classify(resp, body, ownSender, time.Now())
	}
	if rerr != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, rerr.Error())
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "decode message resource: "+err.Error())
	}
	if m.SID == "" {
		return provider.Result{}, httpprov.BadResponse(resp.StatusCode, "message resource has no sid")
	}
	return provider.Result{ProviderID: m.SID}, nil
}

// classify reads an error answer: the code first, then the status.
func classify(resp *http.Response, body []byte, ownSender bool, now time.Time) *provider.Error {
	var ae apiError
	_ = json.Unmarshal(body, &ae)
	// The code and its fixed text, never Twilio's message (codeText).
	msg := codeMessage(ae.Code)
	switch ae.Code {
	case codeTooManyRequests:
		pe := httpprov.StatusError(http.StatusTooManyRequests, resp.Header, now, msg)
		pe.Status = resp.StatusCode
		return pe
	case codeAccountInactive, codeAccountDisabled:
		return httpprov.Suspended(resp.StatusCode, resp.Header, now, msg)
	case codeQueueFull:
		// The queue of this sender (or its Messaging Service) at Twilio:
		// the sender's alone.
		return &provider.Error{Reason: provider.ReasonQueueFull, Temporary: true, RetryAfter: QueueFullPause,
			Status: resp.StatusCode, Message: httpprov.Safe(msg), Scope: provider.ScopeSender}
	case codeBadCallback:
		// Our own configuration (provider.receipt_url), not the message:
		// every replica pauses and the log says what to fix.
		return &provider.Error{Reason: provider.ReasonSetup, Status: resp.StatusCode, Message: httpprov.Safe(msg)}
	case codeFromNotTwilio, codeFromOtherAccount, codeFromNotSMS:
		return &provider.Error{Reason: provider.ReasonSetup, Status: resp.StatusCode, Message: httpprov.Safe(msg),
			Scope: provider.ScopeSender}
	case codeNotFound:
		return &provider.Error{Reason: provider.ReasonSetup, Status: resp.StatusCode, Message: httpprov.Safe(msg)}
	case codeUnsubscribed:
		return &provider.Error{Reason: provider.ReasonOptedOut, Status: resp.StatusCode, Message: httpprov.Safe(msg)}
	case codeFromNotCapable, codeInvalidFrom:
		if !ownSender {
			// The account's From or messaging service: every message
			// would be refused the same way. A producer's own From is
			// that message's fault (a rejection, below).
			return &provider.Error{Reason: provider.ReasonSetup, Status: resp.StatusCode, Message: httpprov.Safe(msg)}
		}
	}
	return httpprov.StatusError(resp.StatusCode, resp.Header, now, msg)
}

// withRef appends smsgw_ref=id to a callback URL.
func withRef(callback, id string) string {
	u, err := url.Parse(callback)
	if err != nil {
		return callback // validated in New
	}
	q := u.Query()
	q.Set(refParam, id)
	u.RawQuery = q.Encode()
	return u.String()
}
