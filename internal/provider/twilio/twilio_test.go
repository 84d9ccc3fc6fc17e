package twilio_test

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
	"smsgw/internal/provider/twilio"
	"smsgw/internal/sms"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	accountSID = "AC0123456789abcdef0123456789abcdef"
	authToken  = "tw-auth-token-very-secret"
	callback   = "https://gw.example/twilio/status"
)

// fakeTwilio decodes a Message create request as Twilio's API would.
func decode(r *http.Request) (providertest.Sent, error) {
	want := "/2010-04-01/Accounts/" + accountSID + "/Messages.json"
	if r.Method != http.MethodPost || r.URL.Path != want {
		return providertest.Sent{}, fmt.Errorf("%s %s, want POST %s", r.Method, r.URL.Path, want)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		return providertest.Sent{}, fmt.Errorf("content type %q", ct)
	}
	if err := r.ParseForm(); err != nil {
		return providertest.Sent{}, err
	}
	for k := range r.PostForm {
		switch k {
		case "To", "From", "Body", "MessagingServiceSid", "StatusCallback":
		default:
			return providertest.Sent{}, fmt.Errorf("unknown parameter %q", k)
		}
	}
	var ref string
	if cb, err := url.Parse(r.PostForm.Get("StatusCallback")); err == nil {
		ref = cb.Query().Get("smsgw_ref")
	}
	user, pass, ok := r.BasicAuth()
	return providertest.Sent{To: r.PostForm.Get("To"), From: r.PostForm.Get("From"), Body: r.PostForm.Get("Body"),
		Reference: ref, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Authorized: ok && user == accountSID && pass == authToken}, nil
}

func writeError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code), "status": status})
}

func respond(w http.ResponseWriter, s providertest.Step) {
	if s.RetryAfter != "" {
		w.Header().Set("Retry-After", s.RetryAfter)
	}
	switch s.Kind {
	case providertest.Accept:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": s.ProviderID, "status": "queued",
			"account_sid": accountSID, "num_segments": "1", "error_code": nil})
	case providertest.Throttle, providertest.VendorThrottle:
		writeError(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
	case providertest.Unavailable:
		writeError(w, s.Status, 20500, "Internal Server Error")
	case providertest.Rejected:
		writeError(w, http.StatusBadRequest, 21211, "The 'To' number is not a valid phone number.")
	case providertest.Unauthorized:
		writeError(w, http.StatusUnauthorized, 20003, "Authenticate")
	case providertest.Suspended:
		writeError(w, http.StatusUnauthorized, 20005, "Account not active")
	case providertest.Garbage:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "<TwilioResponse><Message>")
	}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Decode:  decode,
		Respond: respond,
		New: func(t *testing.T, baseURL string, timeout time.Duration) provider.Provider {
			p, err := twilio.New(twilio.Config{BaseURL: baseURL, StatusCallback: callback, Timeout: timeout,
				Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "+15005550006"}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		IdempotencyHeader: true,
		Secrets:           []string{authToken},
	})
}

// Twilio signals 20429 with a 429; if it ever arrives with another status
// the code still wins, and the sender falls back to the messaging service.
func TestCodesAndSender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, code int
		reason       provider.Reason
	}{
		{http.StatusServiceUnavailable, 20429, provider.ReasonThrottled},
		{http.StatusForbidden, 10001, provider.ReasonSuspended},
		{http.StatusForbidden, 20003, provider.ReasonAuth},
		{http.StatusBadRequest, 21610, provider.ReasonRejected},
		{http.StatusNotFound, 20404, provider.ReasonRejected},
	} {
		var form url.Values
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = r.ParseForm()
			form = r.PostForm
			writeError(w, tc.status, tc.code, "x")
		}))
		p, err := twilio.New(twilio.Config{BaseURL: srv.URL,
			Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, MessagingServiceSID: "MG123"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "hi"})
		if pe := provider.AsError(err); pe == nil || pe.Reason != tc.reason || pe.Status != tc.status {
			t.Errorf("%d/%d: got %v, want %s", tc.status, tc.code, err, tc.reason)
		}
		if form.Get("MessagingServiceSid") != "MG123" || form.Has("From") {
			t.Errorf("form %v: want MessagingServiceSid and no From", form)
		}
		p.CloseIdleConnections()
		srv.Close()
	}
}

// One rule for the account settings: Validate names each missing key under
// the prefix it is given (the configuration passes "provider.twilio"), and
// New refuses exactly the same settings, naming them under "twilio".
func TestSettingsOneRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    twilio.Settings
		want []string
	}{
		{twilio.Settings{}, []string{"account_sid", "auth_token", "from"}},
		{twilio.Settings{AccountSID: accountSID, From: "+15005550006"}, []string{"auth_token"}},
		{twilio.Settings{AuthToken: authToken, MessagingServiceSID: "MG1"}, []string{"account_sid"}},
		{twilio.Settings{AccountSID: accountSID, AuthToken: authToken}, []string{"from"}},
		{twilio.Settings{AccountSID: accountSID, AuthToken: authToken, MessagingServiceSID: "MG1"}, nil},
		{twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}, nil},
	} {
		if got := settingKeys(tc.s.Validate("provider.twilio")); !slices.Equal(got, prefixed("provider.twilio", tc.want)) {
			t.Errorf("Validate(%+v) named %v, want %v", tc.s, got, tc.want)
		}
		p, err := twilio.New(twilio.Config{Settings: tc.s, BaseURL: "http://127.0.0.1:1"})
		if got := settingKeys(err); !slices.Equal(got, prefixed("twilio", tc.want)) {
			t.Errorf("New(%+v) named %v, want %v", tc.s, got, tc.want)
		}
		if p != nil {
			p.CloseIdleConnections()
		}
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	ok := twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}
	for _, tc := range []struct {
		cfg  twilio.Config
		want string
	}{
		{twilio.Config{Settings: ok, BaseURL: "not a url"}, "twilio.base_url"},
		{twilio.Config{Settings: ok, BaseURL: "ftp://api.example"}, "twilio.base_url"},
		{twilio.Config{Settings: ok, StatusCallback: "/relative/status"}, "twilio.status_callback"},
		{twilio.Config{Settings: ok, Timeout: -time.Second}, "twilio.timeout"},
	} {
		_, err := twilio.New(tc.cfg)
		var se *httpprov.SettingError
		if !errors.As(err, &se) || se.Key != tc.want {
			t.Errorf("New(base %q, callback %q, timeout %v) = %v, want an error naming %s",
				tc.cfg.BaseURL, tc.cfg.StatusCallback, tc.cfg.Timeout, err, tc.want)
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
