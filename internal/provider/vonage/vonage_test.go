package vonage_test

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/md5" //nolint:gosec // the vendor's method
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"smsgw/internal/provider"
	"smsgw/internal/provider/providertest"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	apiKey    = "a1b2c3d4"
	apiSecret = "vonage-api-secret-xyz"
)

// decode reads a send as the SMS API does.
func decode(r *http.Request) (providertest.Sent, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/sms/json" {
		return providertest.Sent{}, fmt.Errorf("%s %s, want POST /sms/json", r.Method, r.URL.Path)
	}
	if err := r.ParseForm(); err != nil {
		return providertest.Sent{}, err
	}
	f := r.PostForm
	for k := range f {
		switch k {
		case "api_key", "api_secret", "from", "to", "text", "type", "client-ref":
		case "ttl":
			// Milliseconds, 20,000 to 604,800,000.
			if v, err := strconv.ParseInt(f.Get(k), 10, 64); err != nil || v < 20000 || v > 604800000 {
				return providertest.Sent{}, fmt.Errorf("ttl %q", f.Get(k))
			}
		default:
			return providertest.Sent{}, fmt.Errorf("unknown parameter %q", k)
		}
	}
	if len(f.Get("client-ref")) > 100 {
		return providertest.Sent{}, fmt.Errorf("client-ref longer than 100 characters")
	}
	return providertest.Sent{To: f.Get("to"), From: f.Get("from"), Body: f.Get("text"),
		Reference:  f.Get("client-ref"),
		Authorized: f.Get("api_key") == apiKey && f.Get("api_secret") == apiSecret}, nil
}

// writeStatus answers HTTP 200 with one part of the given status, as the SMS
// API does for both success and most failures.
func writeStatus(w http.ResponseWriter, status, id, errText string) {
	m := map[string]string{"to": "819012345678", "status": status}
	if status == "0" {
		m["message-id"], m["remaining-balance"], m["message-price"], m["network"] = id, "15.53590000", "0.03330000", "44010"
	} else {
		m["error-text"] = errText
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"message-count": "1", "messages": []any{m}})
}

func writeProblem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"type": "https://developer.vonage.com/api-errors", "title": title})
}

func respond(w http.ResponseWriter, s providertest.Step) {
	switch s.Kind {
	case providertest.Accept:
		writeStatus(w, "0", s.ProviderID, "")
	case providertest.Throttle:
		if s.RetryAfter != "" {
			w.Header().Set("Retry-After", s.RetryAfter)
		}
		writeProblem(w, http.StatusTooManyRequests, "Too Many Requests")
	case providertest.VendorThrottle:
		writeStatus(w, "1", "", "Throughput Rate Exceeded - please wait [ 10 ] and retry")
	case providertest.Unavailable:
		writeProblem(w, s.Status, "Service Unavailable")
	case providertest.Rejected:
		writeStatus(w, "3", "", "Invalid to address")
	case providertest.Unauthorized:
		writeStatus(w, "4", "", "Bad Credentials")
	case providertest.Suspended:
		writeStatus(w, "8", "", "Account barred")
	case providertest.Garbage:
		_, _ = io.WriteString(w, `{"message-count":`)
	}
}

func newProvider(t *testing.T, baseURL string, timeout time.Duration) *vonage.Provider {
	t.Helper()
	p, err := vonage.New(vonage.Config{BaseURL: baseURL, Timeout: timeout,
		Settings: vonage.Settings{APIKey: apiKey, APISecret: apiSecret, From: "ACME"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// statusServer is a provider whose vendor answers each send with the next
// status written to the returned channel, errorText its error-text.
func statusServer(t *testing.T, errorText string) (*vonage.Provider, chan<- string) {
	t.Helper()
	status := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, <-status, "", errorText)
	}))
	t.Cleanup(srv.Close)
	p := newProvider(t, srv.URL, 0)
	t.Cleanup(p.CloseIdleConnections)
	return p, status
}

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Decode:  decode,
		Respond: respond,
		New: func(t *testing.T, baseURL string, timeout time.Duration) provider.Provider {
			return newProvider(t, baseURL, timeout)
		},
		Secrets: []string{apiSecret},
	})
}

// Every documented status lands in the right class, including the ones that
// arrive as HTTP 200.
func TestStatusTable(t *testing.T) {
	t.Parallel()
	// Sent without a sender of their own: 2 and 15 are the account's.
	want := map[string]provider.Reason{
		"1": provider.ReasonThrottled, "10": provider.ReasonThrottled,
		"2": provider.ReasonSetup, "15": provider.ReasonSetup,
		"3": provider.ReasonRejected, "6": provider.ReasonRejected,
		"7": provider.ReasonRejected, "12": provider.ReasonRejected,
		"22": provider.ReasonRejected, "23": provider.ReasonSetup, "29": provider.ReasonRejected,
		"33": provider.ReasonRejected, "99": provider.ReasonRejected,
		"4": provider.ReasonAuth, "11": provider.ReasonAuth, "14": provider.ReasonAuth, "32": provider.ReasonAuth,
		"5": provider.ReasonUnavailable,
		"8": provider.ReasonSuspended, "9": provider.ReasonSuspended,
	}
	p, status := statusServer(t, "x")
	for st, reason := range want {
		status <- st
		_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != reason {
			t.Errorf("status %s: got %v, want %s", st, err, reason)
			continue
		}
		temporary := reason == provider.ReasonThrottled || reason == provider.ReasonUnavailable || reason == provider.ReasonSuspended
		if pe.Temporary != temporary {
			t.Errorf("status %s: Temporary = %v", st, pe.Temporary)
		}
		if (reason == provider.ReasonThrottled || reason == provider.ReasonSuspended) != (pe.RetryAfter > 0) {
			t.Errorf("status %s: RetryAfter = %v", st, pe.RetryAfter)
		}
	}
}

// A UCS-2 body must be sent with type=unicode, a GSM-7 one without ("Ç"
// is GSM-7 0x09, "ç" is not: see sms.gsmBasic), its text unchanged; a
// multi-part answer whose second part is throttled is a partial failure.
func TestUnicodeAndMultipart(t *testing.T) {
	t.Parallel()
	forms := make(chan url.Values, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		forms <- r.PostForm
		_, _ = io.WriteString(w, `{"message-count":"2","messages":[{"status":"0","message-id":"A1"},{"status":"1","error-text":"Throttled"}]}`)
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, 0)
	defer p.CloseIdleConnections()
	for _, tc := range []struct{ body, typ string }{{"こんにちは", "unicode"}, {"hello {world}", ""}, {"ÇA VA", ""}, {"Ça va, reçu", "unicode"}} {
		_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "+15550001111", Body: tc.body})
		if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonPartial || pe.PartReason != provider.ReasonThrottled {
			t.Errorf("%q: got %v, want partly accepted, then throttled", tc.body, err)
		}
		f := <-forms
		if f.Get("type") != tc.typ || f.Get("text") != tc.body || f.Get("to") != "819012345678" || f.Get("from") != "15550001111" {
			t.Errorf("%q: sent type %q, text %q (the numbers and keys not shown)", tc.body, f.Get("type"), f.Get("text"))
		}
	}
}

// One rule for the account settings: Validate names each missing key under
// the prefix it is given (the configuration passes "provider.vonage"), and
// New refuses exactly the same settings, naming them under "vonage".
func TestSettingsOneRule(t *testing.T) {
	t.Parallel()
	providertest.SettingsOneRule(t, "vonage", []providertest.SettingsCase[vonage.Settings]{
		{Settings: vonage.Settings{}, Missing: []string{"api_key", "api_secret", "from"}},
		{Settings: vonage.Settings{APIKey: apiKey, From: "ACME"}, Missing: []string{"api_secret"}},
		{Settings: vonage.Settings{APISecret: apiSecret, From: "ACME"}, Missing: []string{"api_key"}},
		{Settings: vonage.Settings{APIKey: apiKey, APISecret: apiSecret}, Missing: []string{"from"}},
		{Settings: vonage.Settings{APIKey: apiKey, APISecret: apiSecret, From: "ACME"}, Missing: nil},
	}, vonage.Settings.Validate, func(s vonage.Settings) error {
		return providertest.Closing(vonage.New)(vonage.Config{Settings: s, BaseURL: "http://127.0.0.1:1"})
	})
}

func TestNewRejectsBadConnection(t *testing.T) {
	t.Parallel()
	ok := vonage.Settings{APIKey: apiKey, APISecret: apiSecret, From: "ACME"}
	providertest.NamesBadSetting(t, []providertest.BadSetting[vonage.Config]{
		{Config: vonage.Config{Settings: ok, BaseURL: "rest.nexmo.com"}, Key: "vonage.base_url"},
		{Config: vonage.Config{Settings: ok, Timeout: -time.Second}, Key: "vonage.timeout"},
	}, providertest.Closing(vonage.New))
}

// answering is a fake SMS API that answers every send with body and keeps
// the last form.
func answering(t *testing.T, body string) (*vonage.Provider, func() url.Values) {
	t.Helper()
	forms := make(chan url.Values, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := decode(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		forms <- r.PostForm
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	p := newProvider(t, srv.URL, 0)
	t.Cleanup(p.CloseIdleConnections)
	return p, func() url.Values { return <-forms }
}

func send(p *vonage.Provider, from string, validity time.Duration) error {
	_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678",
		From: from, Body: "x", Validity: validity})
	return err
}

// A long text whose parts were accepted only in part: the accepted parts
// will arrive and be billed, so the send is a partial failure, never
// retried, recording the accepted parts' ids; a throttle in a refused part
// still pauses everyone, for the wait its text gives. Vonage's Python
// library raises a distinct PartialFailureError for the same answer.
func TestPartlyAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		reason     provider.Reason
		part       provider.Reason
		accepted   []string
		retryAfter time.Duration
	}{
		{"part 2 throttled", `{"message-count":"3","messages":[{"status":"0","message-id":"A1"},` +
			`{"status":"1","error-text":"Throughput Rate Exceeded - please wait [ 2500 ] and retry"},{"status":"0","message-id":"A3"}]}`,
			provider.ReasonPartial, provider.ReasonThrottled, []string{"A1", "A3"}, 2500 * time.Millisecond},
		{"part 1 refused, part 2 accepted", `{"message-count":"2","messages":[{"status":"6","error-text":"Invalid Message"},{"status":"0","message-id":"B2"}]}`,
			provider.ReasonPartial, provider.ReasonRejected, []string{"B2"}, 0},
		{"every part refused", `{"message-count":"2","messages":[{"status":"1","error-text":"Throttled"},{"status":"1","error-text":"Throttled"}]}`,
			provider.ReasonThrottled, "", nil, provider.MinRetryAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := answering(t, tc.body)
			pe := provider.AsError(send(p, "", 0))
			if pe == nil || pe.Reason != tc.reason || pe.PartReason != tc.part || !slices.Equal(pe.Accepted, tc.accepted) || pe.RetryAfter != tc.retryAfter {
				t.Fatalf("got %+v, want %s (part %s) accepting %v, pausing %v", pe, tc.reason, tc.part, tc.accepted, tc.retryAfter)
			}
			if tc.reason == provider.ReasonPartial && pe.Temporary {
				t.Error("a partial failure is temporary: it would be sent again")
			}
		})
	}
	p, _ := answering(t, `{"message-count":"2","messages":[{"status":"0","message-id":"C1"},{"status":"0","message-id":"C2"}]}`)
	if _, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"}); err != nil {
		t.Errorf("every part accepted: %v", err)
	}
}

// The wait a throttle's text gives, in ms, within the pause bounds; only
// "wait [ n ]" is a wait (another text carries MAX [ 30 ], a rate).
func TestThrottleWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want time.Duration
	}{
		{"Throughput Rate Exceeded - please wait [ 978 ] and retry", time.Second},
		{"Throughput Rate Exceeded - please wait [ 4500 ] and retry", 4500 * time.Millisecond},
		{"Throughput Rate Exceeded - please wait [ 99999999 ] and retry", provider.MaxRetryAfter},
		{"Exceeded maximum MT throughput[ MAX [ 30 ] INTERVAL [ 1000 ] COUNT [ 30 ] TIME_SINCE_LAST_INTERVAL_START [ 529 ] ]", time.Second},
		{"Throttled", time.Second},
	} {
		body, _ := json.Marshal(map[string]any{"message-count": "1", "messages": []any{map[string]string{"status": "1", "error-text": tc.text}}})
		p, _ := answering(t, string(body))
		if pe := provider.AsError(send(p, "", 0)); pe == nil || pe.Reason != provider.ReasonThrottled || pe.RetryAfter != tc.want {
			t.Errorf("%q: %+v, want a throttle of %v", tc.text, pe, tc.want)
		}
	}
}

// A 200 refusing the request as a whole ({"error-code","error-code-label"},
// no messages) is classified by its code, not retried as unreadable.
func TestErrorCodeAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code      string
		reason    provider.Reason
		temporary bool
	}{
		{"401", provider.ReasonAuth, false},
		{"420", provider.ReasonRejected, false},
		{"429", provider.ReasonThrottled, true},
		{"500", provider.ReasonUnavailable, true},
		{"oops", provider.ReasonRejected, false},
	} {
		p, _ := answering(t, `{"error-code":"`+tc.code+`","error-code-label":"refused: Your c0de is 4 8 2 9 1 3"}`)
		pe := provider.AsError(send(p, "", 0))
		if pe == nil || pe.Reason != tc.reason || pe.Temporary != tc.temporary ||
			!strings.HasPrefix(pe.Message, "vonage error-code") || strings.Contains(pe.Message, "refused") {
			t.Errorf("error-code %s: %+v, want %s", tc.code, pe, tc.reason)
		}
	}
}

// The sender refused (15) is the account's setup for the account's sender
// and the message's fault for a producer's own; Missing Parameters (2) is
// always the setup (we send everything else).
func TestSenderRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, from string
		reason       provider.Reason
	}{
		{"15", "", provider.ReasonSetup},
		{"15", "NOTOURS", provider.ReasonRejected},
		{"2", "", provider.ReasonSetup},
		{"2", "NOTOURS", provider.ReasonSetup},
	} {
		body, _ := json.Marshal(map[string]any{"message-count": "1", "messages": []any{map[string]string{"status": tc.status, "error-text": "x"}}})
		p, form := answering(t, string(body))
		pe := provider.AsError(send(p, tc.from, 0))
		if pe == nil || pe.Reason != tc.reason {
			t.Errorf("status %s from %q: %+v, want %s", tc.status, tc.from, pe, tc.reason)
		}
		want := cmp.Or(tc.from, "ACME") // the account's sender when the request names none
		if got := form().Get("from"); got != want {
			t.Errorf("status %s: sent from %q, want %q", tc.status, got, want)
		}
	}
}

// The remaining TTL goes as ttl in ms, within the API's 20 s to 7 days;
// none without a TTL. With provider.timeout 0 a send waits 10 s.
func TestTTLAndDefaultTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		validity time.Duration
		want     string
	}{
		{0, ""}, {90 * time.Second, "90000"}, {5 * time.Second, "20000"}, {30 * 24 * time.Hour, "604800000"},
	} {
		p, form := answering(t, `{"message-count":"1","messages":[{"status":"0","message-id":"D1"}]}`)
		if err := send(p, "", tc.validity); err != nil {
			t.Fatal(err)
		}
		if f := form(); f.Get("ttl") != tc.want || tc.want == "" && f.Has("ttl") {
			t.Errorf("validity %v: ttl %q, want %q", tc.validity, f.Get("ttl"), tc.want)
		}
	}
	p := newProvider(t, "http://127.0.0.1:1", 0)
	defer p.CloseIdleConnections()
	if got := vonage.TimeoutOf(p); got != 10*time.Second {
		t.Errorf("timeout %v, want 10s", got)
	}
}

// What a refused part keeps is its status and the gateway's fixed text for
// it, never Vonage's error-text: an echo of the body cut short or
// re-encoded passes any scrub. An unknown status keeps a generic text; a
// status that is not a short number is not echoed at all.
func TestRefusalKeepsFixedText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ status, text, want string }{
		{"6", "Invalid Message: 'Your login code is 48291…'", "vonage status 6: invalid message"},
		{"3", "Invalid to: %2B81%2090%201234%205678", "vonage status 3: invalid parameters"},
		{"97", "Y o u r  l o g i n  c o d e", "vonage status 97: code not known to the gateway"},
		{"Your code 482913", "x", "vonage status: code not known to the gateway"},
	} {
		b, _ := json.Marshal(map[string]any{"message-count": "1", "messages": []any{map[string]string{"status": tc.status, "error-text": tc.text}}})
		p, _ := answering(t, string(b))
		if pe := provider.AsError(send(p, "", 0)); pe == nil || pe.Message != tc.want {
			t.Errorf("status %q: kept %+v, want the text %q", tc.status, pe, tc.want)
		}
	}
}

// An answer refused at Vonage's edge (a non-2xx with an RFC 7807 body)
// keeps the HTTP status's own text, never the body's title.
func TestEdgeRefusalKeepsStatusText(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"title":"Invalid to: 81 90 1234 5678 'Your login c'","error-text":"x"}`)
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, 0)
	defer p.CloseIdleConnections()
	if pe := provider.AsError(send(p, "", 0)); pe == nil || pe.Message != "Unprocessable Entity" {
		t.Errorf("kept %+v, want the status's text", pe)
	}
}

// TestParseInbound: a signed inbound SMS (form or JSON) is read with its
// sender as E.164; an unsigned, tampered or stale one is refused like a
// receipt; binary messages and parts of a concatenated one carry no text;
// a message without msisdn is a problem naming msisdn.
func TestParseInbound(t *testing.T) {
	now := time.Unix(1800000000, 0)
	p := signedWith(t, vonage.MethodSHA256, func() time.Time { return now })
	base := func() map[string]string {
		return map[string]string{"api-key": "k", "msisdn": "447700900123", "to": "447700900000", "messageId": "0A0000001234ABCD",
			"text": "stop", "type": "text", "keyword": "STOP", "message-timestamp": "2027-01-15 08:00:00",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n-1"}
	}
	parse := func(ps map[string]string, asJSON bool) (provider.Inbound, error) {
		var body, ct string
		if asJSON {
			var b strings.Builder
			b.WriteString("{")
			first := true
			for k, v := range ps {
				if !first {
					b.WriteString(",")
				}
				first = false
				b.WriteString(strconv.Quote(k) + ":" + strconv.Quote(v))
			}
			b.WriteString("}")
			body, ct = b.String(), "application/json"
		} else {
			v := url.Values{}
			for k, s := range ps {
				v.Set(k, s)
			}
			body, ct = v.Encode(), "application/x-www-form-urlencoded"
		}
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		return p.ParseInbound(r, []byte(body))
	}
	signed := func(ps map[string]string) map[string]string {
		ps["sig"] = vonage.Signature(vonage.MethodSHA256, "sig-secret", ps)
		return ps
	}
	for _, asJSON := range []bool{false, true} {
		in, err := parse(signed(base()), asJSON)
		if err != nil {
			t.Fatalf("json %v: %v", asJSON, err)
		}
		if want := (provider.Inbound{From: "+447700900123", FromField: "msisdn", To: "447700900000", Text: "stop", ProviderID: "0A0000001234ABCD",
			At: now}); in != want {
			t.Fatalf("json %v: inbound %+v, want %+v", asJSON, in, want)
		}
	}
	if _, err := parse(base(), false); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("unsigned: %v", err)
	}
	tampered := signed(base())
	tampered["msisdn"] = "447700900999"
	if _, err := parse(tampered, false); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("tampered: %v", err)
	}
	stale := base()
	stale["timestamp"] = strconv.FormatInt(now.Add(-provider.ReceiptMaxAge-time.Second).Unix(), 10)
	if _, err := parse(signed(stale), false); !errors.Is(err, provider.ErrStaleReceipt) {
		t.Errorf("stale: %v, want ErrStaleReceipt", err)
	}
	binary := base()
	binary["type"], binary["data"] = "binary", "53544f50"
	delete(binary, "text")
	if in, err := parse(signed(binary), false); err != nil || in.Text != "" {
		t.Errorf("binary: %+v, %v; want no text", in, err)
	}
	part := base()
	part["concat"], part["concat-ref"], part["concat-total"], part["concat-part"] = "true", "7", "2", "1"
	if in, err := parse(signed(part), false); err != nil || in.Text != "" {
		t.Errorf("a part of a longer message: %+v, %v; want no text", in, err)
	}
	var re *provider.ReceiptError
	for field, edit := range map[string]func(map[string]string){
		"api-key":   func(ps map[string]string) { ps["api-key"] = "another-account" },
		"messageId": func(ps map[string]string) { ps["messageId"] = "1" },
		"From":      func(ps map[string]string) { ps["From"] = "+14155550100" },
	} {
		ps := base()
		edit(ps)
		for _, asJSON := range []bool{false, true} {
			if _, err := parse(signed(ps), asJSON); !errors.As(err, &re) || re.Field != field {
				t.Errorf("%s (json %v): %v, want a problem naming it", field, asJSON, err)
			}
		}
	}
	// A name given twice (the signature reads the first value) is refused.
	ps := signed(base())
	form := url.Values{}
	for k, v := range ps {
		form.Set(k, v)
	}
	form.Add("msisdn", "14155550100")
	r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, err := p.ParseInbound(r, []byte(form.Encode())); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("msisdn twice: %v, want a problem naming msisdn", err)
	}
	dup := `{"api-key":"k","msisdn":"447700900123","msisdn":"14155550100"}`
	r = httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(dup))
	r.Header.Set("Content-Type", "application/json")
	if err := vonage.CheckInboundJSON(p, r, dup); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("JSON msisdn twice: %v, want a problem naming msisdn", err)
	}
	noFrom := base()
	delete(noFrom, "msisdn")
	if _, err := parse(signed(noFrom), false); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("no msisdn: %v, want a problem naming msisdn", err)
	}
}

// signedWith is the adapter whose webhooks are signed with the secret
// "sig-secret" by method (empty: Vonage's default), its clock now.
func signedWith(t *testing.T, method string, now func() time.Time) *vonage.Provider {
	t.Helper()
	p, err := vonage.New(vonage.Config{Settings: vonage.Settings{APIKey: "k", APISecret: "s", From: "ACME",
		SignatureSecret: "sig-secret", SignatureMethod: method}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p
}

// TestSignatureString: the signed string, written out by hand from the
// documented rule (sorted, "&k=v", '&' and '=' in values as '_').
func TestSignatureString(t *testing.T) {
	params := map[string]string{"status": "delivered", "messageId": "0A1", "client-ref": "a=b&c", "timestamp": "1700000000", "sig": "x"}
	s := "&client-ref=a_b_c&messageId=0A1&status=delivered&timestamp=1700000000"
	sum := md5.Sum([]byte(s + "secret")) //nolint:gosec // the vendor's method
	if got := vonage.Signature(vonage.MethodMD5Hash, "secret", params); got != hex.EncodeToString(sum[:]) {
		t.Errorf("md5hash %s", got)
	}
	mac := hmac.New(sha256.New, []byte("secret"))
	mac.Write([]byte(s))
	if got := vonage.Signature(vonage.MethodSHA256, "secret", params); got != hex.EncodeToString(mac.Sum(nil)) {
		t.Errorf("sha256 %s", got)
	}
}

// signedAt is the timestamp the test receipts are signed with.
var signedAt = time.Unix(1700000000, 0)

func TestParseReceipt(t *testing.T) {
	for _, method := range vonage.Methods {
		t.Run(method, func(t *testing.T) {
			p := signedWith(t, method, func() time.Time { return signedAt.Add(3 * time.Second) })
			ps := map[string]string{"messageId": "0B00000012345678", "status": "expired", "err-code": "27",
				"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "msisdn": "447700900000", "timestamp": "1700000000", "nonce": "n1"}
			form := func(sig string) string {
				v := url.Values{}
				for k, s := range ps {
					v.Set(k, s)
				}
				if sig != "" {
					v.Set("sig", sig)
				}
				return v.Encode()
			}
			parse := func(body string) (provider.Receipt, error) {
				r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/vonage", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				return p.ParseReceipt(r, []byte(body))
			}
			good := vonage.Signature(method, "sig-secret", ps)
			rc, err := parse(form(strings.ToUpper(good)))
			if err != nil {
				t.Fatal(err)
			}
			want := provider.Receipt{ProviderID: "0B00000012345678", Reference: "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
				Status: sms.StatusUndelivered, VendorStatus: "expired", ErrorCode: "27"}
			if rc != want {
				t.Fatalf("receipt %+v, want %+v", rc, want)
			}
			if _, err := parse(form("")); !errors.Is(err, provider.ErrBadSignature) {
				t.Errorf("unsigned: %v", err)
			}
			ps["status"] = "delivered"
			if _, err := parse(form(good)); !errors.Is(err, provider.ErrBadSignature) {
				t.Errorf("tampered: %v", err)
			}
		})
	}
}

// receiptFor signs ps (with sig-secret, md5hash) and returns a parser whose
// clock reads now, and a parse of ps as a form POST, re-signed unless sig
// is given.
func receiptFor(t *testing.T, now time.Time) func(ps map[string]string) (provider.Receipt, error) {
	t.Helper()
	p := signedWith(t, "", func() time.Time { return now })
	return func(ps map[string]string) (provider.Receipt, error) {
		v := url.Values{}
		for k, s := range ps {
			v.Set(k, s)
		}
		if _, ok := ps["sig"]; !ok {
			v.Set("sig", vonage.Signature(vonage.MethodMD5Hash, "sig-secret", ps))
		}
		body := v.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/vonage", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return p.ParseReceipt(r, []byte(body))
	}
}

// A correctly signed receipt is believed only within the window around its
// signed timestamp: an old one (a captured receipt replayed), one from too
// far ahead, and one with no usable timestamp are refused like a wrong
// signature.
func TestReceiptReplayWindow(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	for _, tc := range []struct {
		name, ts string
		ok       bool
	}{
		{"now", at(0), true},
		{"oldest accepted", at(-provider.ReceiptMaxAge), true},
		{"a second too old", at(-provider.ReceiptMaxAge - time.Second), false},
		{"a day old", at(-24 * time.Hour), false},
		{"furthest ahead accepted", at(provider.ReceiptMaxAhead), true},
		{"a second too far ahead", at(provider.ReceiptMaxAhead + time.Second), false},
		{"far future", "9223372036854775807", false},
		{"zero", "0", false},
		{"negative", "-60", false},
		{"not a number", "soon", false},
		{"milliseconds", strconv.FormatInt(now.UnixMilli(), 10), false},
		{"missing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := map[string]string{"messageId": "0B00000012345678", "status": "delivered", "err-code": "0",
				"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "nonce": "n1"}
			if tc.ts != "" {
				ps["timestamp"] = tc.ts
			}
			rc, err := parse(ps)
			if tc.ok {
				if err != nil || rc.Status != sms.StatusDelivered {
					t.Fatalf("got %+v, %v; want it delivered", rc, err)
				}
				return
			}
			if !errors.Is(err, provider.ErrStaleReceipt) || !errors.Is(err, provider.ErrBadSignature) {
				t.Fatalf("got %+v, %v; want ErrStaleReceipt, which is an ErrBadSignature", rc, err)
			}
			if strings.Contains(err.Error(), tc.ts) && tc.ts != "" {
				t.Errorf("error %q echoes the timestamp", err)
			}
		})
	}
}

// The signed string joins "&name=value" cleaning only the values, so a
// name holding '=' and '&' can re-cut a captured receipt into other
// parameters under the same sig (here swallowing its err-code and
// client-ref). Such names are refused.
func TestReceiptNamesCannotRecut(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ts := strconv.FormatInt(now.Unix(), 10)
	captured := map[string]string{"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "err-code": "27",
		"messageId": "0B00000012345678", "status": "expired", "timestamp": ts}
	sig := vonage.Signature(vonage.MethodMD5Hash, "sig-secret", captured)
	recut := map[string]string{"client-ref=msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA&err-code": "27",
		"messageId": "0B00000012345678", "status": "expired", "timestamp": ts, "sig": sig}
	if got := vonage.Signature(vonage.MethodMD5Hash, "sig-secret", recut); got != sig {
		t.Fatalf("the re-cut parameters sign differently (%s, %s): the test shows nothing", got, sig)
	}
	if rc, err := parse(recut); !errors.Is(err, provider.ErrBadSignature) {
		t.Fatalf("re-cut receipt: %+v, %v; want ErrBadSignature", rc, err)
	}
	if rc, err := parse(captured); err != nil || rc.ErrorCode != "27" || rc.Reference == "" {
		t.Fatalf("captured receipt: %+v, %v", rc, err)
	}
}

// A DLR with err-code 9 (the recipient opted out of the sender's
// messages, as Vonage's Opt-Out Assist guide answers a send to them) says
// so, with the recipient's number from msisdn; any other code does not.
func TestReceiptOptedOut(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ps := func(status, code string) map[string]string {
		return map[string]string{"messageId": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab", "status": status, "err-code": code,
			"msisdn": "447700900000", "to": "AcmeInc", "client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n1"}
	}
	for _, status := range []string{"failed", "rejected"} {
		rc, err := parse(ps(status, "9"))
		if err != nil || !rc.OptedOut || rc.Recipient != "+447700900000" || rc.ErrorCode != "9" || rc.Status == "" {
			t.Errorf("%s, err-code 9: %+v, %v; want opted out, recipient +447700900000", status, rc, err)
		}
	}
	for _, code := range []string{"0", "6", "99"} {
		if rc, err := parse(ps("failed", code)); err != nil || rc.OptedOut || rc.Recipient != "" {
			t.Errorf("err-code %s: %+v, %v; want no opt-out", code, rc, err)
		}
	}
	// A status on the way changes nothing, err-code or not.
	if rc, err := parse(ps("buffered", "9")); err != nil || rc.OptedOut {
		t.Errorf("buffered: %+v, %v", rc, err)
	}
}

// err-codes 2, 7 and 8, which Vonage's table ends with "Retry", end the
// message undelivered like any failed DLR (neither Vonage nor the
// operators try again, and the gateway does not send it twice), with an
// error that says the failure was temporary; other codes are the code.
func TestReceiptTemporaryCodes(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ps := func(code string) map[string]string {
		return map[string]string{"messageId": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab", "status": "failed", "err-code": code,
			"msisdn": "447700900000", "client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n1"}
	}
	for code, what := range map[string]string{"2": "absent subscriber", "7": "handset busy", "8": "network error"} {
		rc, err := parse(ps(code))
		if err != nil || rc.Status != sms.StatusUndelivered ||
			rc.ErrorCode != code+" (temporary: "+what+"; not resent, a new send may be delivered)" {
			t.Errorf("err-code %s: %+v, %v; want undelivered, a temporary %s", code, rc, err, what)
		}
	}
	for _, code := range []string{"1", "3", "6", "99"} {
		if rc, err := parse(ps(code)); err != nil || rc.Status != sms.StatusUndelivered || rc.ErrorCode != code {
			t.Errorf("err-code %s: %+v, %v; want undelivered with the code", code, rc, err)
		}
	}
}

// TestAnswerScopes: status 1 ("Throughput Rate Exceeded", a US number over
// 1/s) is the sender's throttle; 23 (our callback URL refused) is our
// setup, the account's; a bad number is the message's.
func TestAnswerScopes(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		reason provider.Reason
		scope  provider.Scope
	}{
		"1":  {provider.ReasonThrottled, provider.ScopeSender},
		"23": {provider.ReasonSetup, provider.ScopeAccount},
		"8":  {provider.ReasonSuspended, provider.ScopeAccount},
		"3":  {provider.ReasonRejected, provider.ScopeMessage},
	}
	p, status := statusServer(t, "Throughput Rate Exceeded - please wait [ 978 ] and retry")
	for st, w := range want {
		status <- st
		_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "Mkt1", Body: "x"})
		if pe := provider.AsError(err); pe == nil || pe.Reason != w.reason || pe.ScopeOf() != w.scope {
			t.Errorf("status %s: got %+v, want %s of scope %s", st, pe, w.reason, w.scope)
		}
	}
}
