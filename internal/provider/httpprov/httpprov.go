// Package httpprov is the adapter for smsgw's generic provider protocol
// (docs/design.md section 7.2), and holds the HTTP helpers the vendor adapters share.
//
// Wire format: POST {URL} with a JSON body
//
//	{"to":"+81...","from":"...","body":"...","reference":"msg_...","segments":2,"class":"otp"}
//
// and the header Idempotency-Key equal to reference, the gateway's message id,
// the same on every attempt. "segments" and "class" are extensions the
// simulator uses for counting; a provider that does not know them ignores
// them. X-Smsgw-Accepted-At carries the time the gateway accepted the
// message (Unix nanoseconds) so the simulator can measure queue-to-provider
// latency.
//
// Answers: 2xx {"id":"..."} → sent; 429 + Retry-After → throttled, the
// sender's alone when its body says {"scope":"sender"}, else the account's; 403 whose
// {"error"} mentions "suspended" → suspended; 401/403 → auth; 408, 409 (a
// retry while the first request with its key is still processed) and 425
// → temporary; other 4xx → rejected; 5xx, reset, timeout → temporary.
package httpprov

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// Header names of the generic protocol.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderAcceptedAt     = "X-Smsgw-Accepted-At"
)

// SendRequest is the JSON body of a send in the generic protocol. The
// simulator decodes the same type.
type SendRequest struct {
	To        string `json:"to"`
	From      string `json:"from,omitempty"`
	Body      string `json:"body"`
	Reference string `json:"reference"`
	Segments  int    `json:"segments,omitempty"`
	Class     string `json:"class,omitempty"`
}

// SendResponse is the JSON body of a 2xx answer.
type SendResponse struct {
	ID string `json:"id"`
}

// ErrorResponse is the JSON body of an error answer.
type ErrorResponse struct {
	Error string `json:"error"`
	// Scope, on a 429, says whose limit it was: ScopeSender for the
	// sender's (the send's "from"), which pauses that sender alone;
	// anything else, or none, the account's.
	Scope string `json:"scope,omitempty"`
}

// ScopeSender is the Scope of a 429 that only the send's sender is over.
const ScopeSender = "sender"

// Config configures the generic adapter. URL and Token are its Settings.
type Config struct {
	Name    string        // provider name for logs and metrics; default "http"
	URL     string        // the send endpoint, e.g. http://127.0.0.1:9100/send
	Token   string        // optional bearer token; never logged
	Timeout time.Duration // per attempt; default 5 s
	Client  *http.Client  // default NewClient()
	Logger  *slog.Logger  // default: discard
	// ReceiptSecret keys the HMAC of delivery receipts
	// (provider.receipt_secret); empty: every receipt is refused.
	ReceiptSecret string
	// PreviousReceiptSecret, while ReceiptSecret is rotated
	// (provider.previous_receipt_secret), is the secret it replaces: a
	// receipt signed with either is taken. Only beside ReceiptSecret.
	PreviousReceiptSecret string
	// Now is the clock inbound messages' signed times are checked
	// against; default time.Now.
	Now func() time.Time
}

// Provider sends through the generic protocol.
type Provider struct {
	receiptSecret  string
	previousSecret string // the receipt secret being replaced; "" when none
	now            func() time.Time
	name           string
	url            string
	token          string
	tmo            time.Duration
	client         *http.Client
	log            *slog.Logger
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	if err := (Settings{URL: cfg.URL, Token: cfg.Token}).Validate("httpprov"); err != nil {
		return nil, err
	}
	c, err := Setup("httpprov", cfg.Timeout, cfg.Client, cfg.Logger)
	if err != nil {
		return nil, err
	}
	p := &Provider{name: cfg.Name, url: cfg.URL, token: cfg.Token, tmo: c.Timeout, client: c.Client, log: c.Logger,
		receiptSecret: cfg.ReceiptSecret, previousSecret: cfg.PreviousReceiptSecret, now: cfg.Now}
	if p.now == nil {
		p.now = time.Now
	}
	if p.name == "" {
		p.name = "http"
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return p.name }

// CloseIdleConnections releases the client's idle keep-alive connections
// (on shutdown, and in tests that check for leaked goroutines).
func (p *Provider) CloseIdleConnections() { p.client.CloseIdleConnections() }

// Send implements provider.Provider.
func (p *Provider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	payload, err := json.Marshal(SendRequest{To: req.To, From: req.From, Body: req.Body,
		Reference: req.ID, Segments: req.Segments, Class: className(req.Class)})
	if err != nil {
		return provider.Result{}, &provider.Error{Reason: provider.ReasonRejected, Message: "encode request: " + err.Error()}
	}
	ctx, cancel := WithTimeout(ctx, p.tmo)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(payload))
	if err != nil {
		return provider.Result{}, fmt.Errorf("httpprov: build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set(HeaderIdempotencyKey, req.ID)
	// Go's transport takes an Idempotency-Key as leave to send the POST
	// again by itself when a kept-alive connection dies after the request
	// went out: an arrival the provider dedupes but counts against the
	// account's rate, unpaced by the limiter. Without GetBody it cannot;
	// that outcome comes back as unknown and the send loop retries it
	// through the limiter.
	hreq.GetBody = nil
	if !req.AcceptedAt.IsZero() {
		hreq.Header.Set(HeaderAcceptedAt, strconv.FormatInt(req.AcceptedAt.UnixNano(), 10))
	} else if at, ok := IDTime(req.ID); ok {
		// Millisecond precision from the id, when the caller did not say.
		hreq.Header.Set(HeaderAcceptedAt, strconv.FormatInt(at.UnixNano(), 10))
	}
	if p.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.token)
	}
	res, err := p.send(ctx, hreq)
	p.logOutcome(ctx, req, res, err)
	return res, err
}

func (p *Provider) send(ctx context.Context, hreq *http.Request) (provider.Result, error) {
	resp, err := p.client.Do(hreq) //nolint:bodyclose // ReadBody closes it, on every path
	if err != nil {
		return provider.Result{}, TransportError(ctx, err)
	}
	body, rerr := ReadBody(resp)
	now := time.Now()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var eb ErrorResponse
		_ = json.Unmarshal(body, &eb)
		// The provider's error text is read for a suspension only, never
		// kept: it may quote the number or the body in a form no scrub
		// finds. What is kept is the status and a fixed text.
		if resp.StatusCode == http.StatusForbidden && strings.Contains(strings.ToLower(eb.Error), "suspend") {
			return provider.Result{}, Suspended(resp.StatusCode, resp.Header, now, "account suspended")
		}
		pe := StatusError(resp.StatusCode, resp.Header, now, "")
		if resp.StatusCode == http.StatusTooManyRequests && eb.Scope == ScopeSender {
			pe.Scope, pe.Message = provider.ScopeSender, "sender rate limit exceeded"
		}
		return provider.Result{}, pe
	}
	if rerr != nil {
		return provider.Result{}, BadResponse(resp.StatusCode, rerr.Error())
	}
	var ok SendResponse
	if err := json.Unmarshal(body, &ok); err != nil {
		return provider.Result{}, BadResponse(resp.StatusCode, "decode answer: "+err.Error())
	}
	if ok.ID == "" {
		return provider.Result{}, BadResponse(resp.StatusCode, "answer has no id")
	}
	return provider.Result{ProviderID: ok.ID}, nil
}

func (p *Provider) logOutcome(ctx context.Context, req *provider.Request, res provider.Result, err error) {
	if !p.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []any{"provider", p.name, "id", req.ID, "to", sms.MaskPhone(req.To)}
	err = provider.Scrubbed(err, req.Body)
	if pe := provider.AsError(err); pe != nil {
		p.log.Debug("provider send failed", append(attrs, "reason", pe.Reason, "status", pe.Status, "error", pe.Message)...)
		return
	}
	if err != nil {
		p.log.Debug("provider send failed", append(attrs, "error", err)...)
		return
	}
	p.log.Debug("provider send", append(attrs, "provider_id", res.ProviderID)...)
}

func className(c sms.Class) string {
	if !c.Valid() {
		return ""
	}
	return c.String()
}

// IDTime returns the creation time a gateway message id carries (sms.NewID
// puts Unix milliseconds in its first 48 bits), i.e. when the gateway accepted
// the message. It lets the adapter tell the provider simulator when a message
// arrived without widening the Provider seam.
func IDTime(id string) (time.Time, bool) {
	if !sms.ValidID(id) {
		return time.Time{}, false
	}
	// 26 base32 characters hold 130 bits whose top two are zero, so the
	// first ten characters (50 bits) are exactly the 48-bit millisecond value.
	var ms int64
	for i := 4; i < 14; i++ {
		v := strings.IndexByte("0123456789ABCDEFGHJKMNPQRSTVWXYZ", id[i])
		if v < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | int64(v)
	}
	return time.UnixMilli(ms), true
}
