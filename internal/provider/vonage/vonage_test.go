package vonage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
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
	want := map[string]provider.Reason{
		"1": provider.ReasonThrottled, "10": provider.ReasonThrottled,
		"2": provider.ReasonRejected, "3": provider.ReasonRejected, "6": provider.ReasonRejected,
		"7": provider.ReasonRejected, "12": provider.ReasonRejected, "15": provider.ReasonRejected,
		"22": provider.ReasonRejected, "23": provider.ReasonRejected, "29": provider.ReasonRejected,
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

// A UCS-2 body must be sent with type=unicode, a GSM-7 one without; a
// multi-part answer whose second part is throttled is a throttle.
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
	for _, tc := range []struct{ body, typ string }{{"こんにちは", "unicode"}, {"hello {world}", ""}} {
		_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "+15550001111", Body: tc.body})
		if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonThrottled {
			t.Errorf("%q: got %v, want throttled", tc.body, err)
		}
		f := <-forms
		if f.Get("type") != tc.typ || f.Get("text") != tc.body || f.Get("to") != "819012345678" || f.Get("from") != "15550001111" {
			t.Errorf("%q: form %v", tc.body, f)
		}
	}
}

// One rule for the account settings: Validate names each missing key under
// the prefix it is given (the configuration passes "provider.vonage"), and
// New refuses exactly the same settings, naming them under "vonage".
func TestSettingsOneRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    vonage.Settings
		want []string
	}{
		{vonage.Settings{}, []string{"api_key", "api_secret", "from"}},
		{vonage.Settings{APIKey: apiKey, From: "ACME"}, []string{"api_secret"}},
		{vonage.Settings{APISecret: apiSecret, From: "ACME"}, []string{"api_key"}},
		{vonage.Settings{APIKey: apiKey, APISecret: apiSecret}, []string{"from"}},
		{vonage.Settings{APIKey: apiKey, APISecret: apiSecret, From: "ACME"}, nil},
	} {
		if got := settingKeys(tc.s.Validate("provider.vonage")); !slices.Equal(got, prefixed("provider.vonage", tc.want)) {
			t.Errorf("Validate(%+v) named %v, want %v", tc.s, got, tc.want)
		}
		p, err := vonage.New(vonage.Config{Settings: tc.s, BaseURL: "http://127.0.0.1:1"})
		if got := settingKeys(err); !slices.Equal(got, prefixed("vonage", tc.want)) {
			t.Errorf("New(%+v) named %v, want %v", tc.s, got, tc.want)
		}
		if p != nil {
			p.CloseIdleConnections()
		}
	}
}

func TestNewRejectsBadConnection(t *testing.T) {
	t.Parallel()
	ok := vonage.Settings{APIKey: apiKey, APISecret: apiSecret, From: "ACME"}
	for _, tc := range []struct {
		cfg  vonage.Config
		want string
	}{
		{vonage.Config{Settings: ok, BaseURL: "rest.nexmo.com"}, "vonage.base_url"},
		{vonage.Config{Settings: ok, Timeout: -time.Second}, "vonage.timeout"},
	} {
		_, err := vonage.New(tc.cfg)
		var se *httpprov.SettingError
		if !errors.As(err, &se) || se.Key != tc.want {
			t.Errorf("New(base %q, timeout %v) = %v, want an error naming %s", tc.cfg.BaseURL, tc.cfg.Timeout, err, tc.want)
		}
	}
}

// settingKeys lists the keys a (joined) settings error names, one line per
// problem, in order.
func settingKeys(err error) []string {
	if err == nil {
		return nil
	}
	var keys []string
	for _, line := range strings.Split(err.Error(), "\n") {
		k, _, _ := strings.Cut(line, ": ")
		keys = append(keys, k)
	}
	return keys
}

func prefixed(prefix string, names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, prefix+"."+n)
	}
	return out
}
