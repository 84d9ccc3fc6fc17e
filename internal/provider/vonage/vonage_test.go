package vonage_test

import (
	"cmp"
	"context"
	"encoding/json"
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
	status := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, <-status, "", "x")
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, 0)
	defer p.CloseIdleConnections()
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
