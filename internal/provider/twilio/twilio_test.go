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
	"strconv"
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
		case "ValidityPeriod":
			// An integer of seconds, 1 to 36,000 (error 21624 otherwise).
			if v, err := strconv.Atoi(r.PostForm.Get(k)); err != nil || v < 1 || v > 36000 {
				return providertest.Sent{}, fmt.Errorf("ValidityPeriod %q", r.PostForm.Get(k))
			}
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
		// No Idempotency-Key: Twilio ignores it and Go's transport would
		// replay a send on its word (TestDroppedConnectionNotReplayed).
		IdempotencyHeader: false,
		Secrets:           []string{authToken},
	})
}

// Twilio's error codes, checked against its error pages: the code decides
// before the status (20429 with another status is still a throttle), a
// sender refused is the account's setup when it is the account's sender
// and the message's fault when the producer chose it, and a message
// without a From falls back to the messaging service.
func TestCodesAndSender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, code int
		from         string // the request's own sender ("": the account's)
		reason       provider.Reason
		retryAfter   time.Duration
	}{
		{http.StatusServiceUnavailable, 20429, "", provider.ReasonThrottled, provider.MinRetryAfter},
		{http.StatusForbidden, 10001, "", provider.ReasonSuspended, httpprov.SuspendedPause},
		{http.StatusForbidden, 20003, "", provider.ReasonAuth, 0},
		// 21610: the recipient replied STOP: an opt-out, whoever's sender.
		{http.StatusBadRequest, 21610, "", provider.ReasonOptedOut, 0},
		{http.StatusBadRequest, 21610, "+15005550006", provider.ReasonOptedOut, 0},
		// 21611: the sender's queue at Twilio is full: a long pause, the
		// message kept (it used to fail every message for good).
		{http.StatusBadRequest, 21611, "", provider.ReasonQueueFull, twilio.QueueFullPause},
		{http.StatusBadRequest, 21611, "+15005550006", provider.ReasonQueueFull, twilio.QueueFullPause},
		// The account does not exist (a wrong account_sid): every message.
		{http.StatusNotFound, 20404, "", provider.ReasonSetup, 0},
		{http.StatusBadRequest, 21606, "", provider.ReasonSetup, 0},
		{http.StatusBadRequest, 21212, "", provider.ReasonSetup, 0},
		{http.StatusBadRequest, 21606, "+15005550001", provider.ReasonRejected, 0},
		{http.StatusBadRequest, 21212, "NOT OURS", provider.ReasonRejected, 0},
	} {
		var form url.Values
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = r.ParseForm()
			form = r.PostForm
			writeError(w, tc.status, tc.code, "x")
		}))
		p, err := twilio.New(twilio.Config{BaseURL: srv.URL,
			Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, MessagingServiceSID: "MG0123456789abcdef0123456789abcdef"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: tc.from, Body: "hi"})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != tc.reason || pe.Status != tc.status || pe.RetryAfter != tc.retryAfter ||
			(tc.reason == provider.ReasonOptedOut && pe.Temporary) {
			t.Errorf("%d/%d from %q: got %+v, want %s pausing %v", tc.status, tc.code, tc.from, pe, tc.reason, tc.retryAfter)
		}
		if tc.from == "" && (form.Get("MessagingServiceSid") != "MG0123456789abcdef0123456789abcdef" || form.Has("From")) {
			t.Errorf("form %v: want MessagingServiceSid and no From", form)
		}
		p.CloseIdleConnections()
		srv.Close()
	}
}

// The remaining TTL goes as ValidityPeriod, whole seconds rounded down, at
// least 1; none when there is no TTL or it is beyond Twilio's maximum (its
// default, 36,000 s).
func TestValidityPeriod(t *testing.T) {
	t.Parallel()
	var form url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := decode(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		form = r.PostForm
		respond(w, providertest.Step{Kind: providertest.Accept, ProviderID: "SM1"})
	}))
	defer srv.Close()
	p, err := twilio.New(twilio.Config{BaseURL: srv.URL, Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	for _, tc := range []struct {
		validity time.Duration
		want     string // "" absent
	}{
		{0, ""}, {90*time.Second + 900*time.Millisecond, "90"}, {300 * time.Millisecond, "1"},
		{35999 * time.Second, "35999"}, {10 * time.Hour, ""}, {72 * time.Hour, ""},
	} {
		if _, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "hi", Validity: tc.validity}); err != nil {
			t.Fatalf("validity %v: %v", tc.validity, err)
		}
		if got := form.Get("ValidityPeriod"); got != tc.want || (tc.want == "" && form.Has("ValidityPeriod")) {
			t.Errorf("validity %v: ValidityPeriod %q, want %q", tc.validity, got, tc.want)
		}
	}
}

// With provider.timeout 0 a send waits Twilio's own library's 10 s.
func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	p, err := twilio.New(twilio.Config{BaseURL: "http://127.0.0.1:1", Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	if got := twilio.TimeoutOf(p); got != 10*time.Second {
		t.Errorf("timeout %v, want 10s", got)
	}
}

// One rule for the account settings: Validate names each missing key under
// the prefix it is given (the configuration passes "provider.twilio"), and
// New refuses exactly the same settings, naming them under "twilio".
func TestSettingsOneRule(t *testing.T) {
	t.Parallel()
	providertest.SettingsOneRule(t, "twilio", []providertest.SettingsCase[twilio.Settings]{
		{Settings: twilio.Settings{}, Missing: []string{"account_sid", "auth_token", "from"}},
		{Settings: twilio.Settings{AccountSID: accountSID, From: "+15005550006"}, Missing: []string{"auth_token"}},
		{Settings: twilio.Settings{AuthToken: authToken, MessagingServiceSID: "MG0123456789abcdef0123456789abcdef"}, Missing: []string{"account_sid"}},
		{Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken}, Missing: []string{"from"}},
		{Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, MessagingServiceSID: "MG0123456789abcdef0123456789abcdef"}, Missing: nil},
		{Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}, Missing: nil},
	}, twilio.Settings.Validate, func(s twilio.Settings) error {
		return providertest.Closing(twilio.New)(twilio.Config{Settings: s, BaseURL: "http://127.0.0.1:1"})
	})
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	ok := twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}
	providertest.NamesBadSetting(t, []providertest.BadSetting[twilio.Config]{
		{Config: twilio.Config{Settings: ok, BaseURL: "not a url"}, Key: "twilio.base_url"},
		{Config: twilio.Config{Settings: ok, BaseURL: "ftp://api.example"}, Key: "twilio.base_url"},
		{Config: twilio.Config{Settings: ok, StatusCallback: "/relative/status"}, Key: "twilio.status_callback"},
		{Config: twilio.Config{Settings: ok, Timeout: -time.Second}, Key: "twilio.timeout"},
	}, providertest.Closing(twilio.New))
}

// With api_key_sid a send authenticates as the API key (its SID and
// secret), the account still in the path.
func TestSendWithAPIKey(t *testing.T) {
	t.Parallel()
	const keySID, keySecret = "SK0123456789abcdef0123456789abcdef", "key-secret-0123456789"
	var user, pass string
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ = r.BasicAuth()
		path = r.URL.Path
		respond(w, providertest.Step{Kind: providertest.Accept, ProviderID: "SM1"})
	}))
	defer srv.Close()
	p, err := twilio.New(twilio.Config{BaseURL: srv.URL,
		Settings: twilio.Settings{AccountSID: accountSID, APIKeySID: keySID, AuthToken: keySecret, From: "ACME"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	if _, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if user != keySID || pass != keySecret || path != "/2010-04-01/Accounts/"+accountSID+"/Messages.json" {
		t.Errorf("sent as %q:%q to %s, want the API key to the account's Messages", user, pass, path)
	}
}

// SIDs in another form than Twilio's, a StatusCallback host with an
// underscore (Twilio's 21609) and an API key without the account's token
// for webhooks are refused by Validate and New alike, naming the key.
func TestNewRefusesWhatTwilioWould(t *testing.T) {
	t.Parallel()
	ok := twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}
	withKey := ok
	withKey.APIKeySID = "SK0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		edit func(*twilio.Config)
		want string
	}{
		{"short account", func(c *twilio.Config) { c.AccountSID = "AC123" }, "twilio.account_sid"},
		{"not an account", func(c *twilio.Config) { c.AccountSID = "MG0123456789abcdef0123456789abcdef" }, "twilio.account_sid"},
		{"not hex", func(c *twilio.Config) { c.AccountSID = "AC0123456789abcdef0123456789abcdez" }, "twilio.account_sid"},
		{"service", func(c *twilio.Config) { c.MessagingServiceSID = "MG12" }, "twilio.messaging_service_sid"},
		{"api key", func(c *twilio.Config) { c.APIKeySID = "AC0123456789abcdef0123456789abcdef" }, "twilio.api_key_sid"},
		{"underscore", func(c *twilio.Config) { c.StatusCallback = "https://sms_gw.example.com/v1/receipts/twilio" }, "twilio.status_callback"},
		{"api key, receipts", func(c *twilio.Config) { c.Settings = withKey; c.StatusCallback = callback }, "twilio.webhook_auth_token"},
		{"api key, inbound", func(c *twilio.Config) { c.Settings = withKey; c.InboundURL = "https://gw.example/in" }, "twilio.webhook_auth_token"},
	} {
		cfg := twilio.Config{Settings: ok, BaseURL: "http://127.0.0.1:1"}
		tc.edit(&cfg)
		_, err := twilio.New(cfg)
		var se *httpprov.SettingError
		if !errors.As(err, &se) || se.Key != tc.want {
			t.Errorf("%s: New = %v, want an error naming %s", tc.name, err, tc.want)
		}
		if strings.Contains(fmt.Sprint(err), "SK0123") || strings.Contains(fmt.Sprint(err), "AC0123") {
			t.Errorf("%s: the error quotes a SID: %v", tc.name, err)
		}
	}
	// Allowed: an API key with the account's token for webhooks, or
	// without webhooks; the messaging service alone; SIDs in upper-case hex.
	for _, s := range []twilio.Settings{
		{AccountSID: accountSID, APIKeySID: withKey.APIKeySID, AuthToken: authToken, WebhookAuthToken: "acct-token", From: "ACME"},
		{AccountSID: "AC0123456789ABCDEF0123456789ABCDEF", AuthToken: authToken, MessagingServiceSID: "MG0123456789abcdef0123456789abcdef"},
	} {
		p, err := twilio.New(twilio.Config{Settings: s, BaseURL: "http://127.0.0.1:1", StatusCallback: callback})
		if err != nil {
			t.Errorf("New(%+v): %v", s.APIKeySID, err)
			continue
		}
		p.CloseIdleConnections()
	}
	p, err := twilio.New(twilio.Config{Settings: withKey, BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Errorf("an API key without webhooks: %v", err)
	} else {
		p.CloseIdleConnections()
	}
}
