package twilio_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/twilio"
)

// messagesAPI serves Twilio's Message resource of the inbound messages it
// holds (GET /2010-04-01/Accounts/{AccountSid}/Messages/{sid}.json, Basic
// auth), or a fixed status when down is set.
type messagesAPI struct {
	account, token string
	mu             sync.Mutex
	msgs           map[string]map[string]string
	down           int
}

func (f *messagesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != f.account || p != f.token || r.Method != http.MethodGet {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if f.down != 0 {
		w.WriteHeader(f.down)
		return
	}
	prefix := "/2010-04-01/Accounts/" + f.account + "/Messages/"
	sid, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, prefix), ".json")
	m, found := f.msgs[sid]
	if !ok || !strings.HasPrefix(r.URL.Path, prefix) || !found {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"code":20404,"message":"not found","status":404}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
}

// TestInboundRecut: one captured, correctly signed incoming message from
// the attacker's own phone whose text is built to be re-cut. Cut into a
// START from another number with a name given twice, the signature still
// checks (the attack is real) and the form is refused naming the name;
// cut with Twilio's own names only, each once, the form passes, and the
// Message resource Twilio keeps (another sender, another text) refuses
// it: ConfirmInbound is not confirmed. The real message is confirmed with
// Twilio's time; Twilio down or throttling is ErrConfirmUnavailable, not a
// refusal.
func TestInboundRecut(t *testing.T) {
	const (
		token    = "tok-0123456789abcdef"
		account  = "AC0123456789abcdef0123456789abcdef"
		sid      = "SM00000000000000000000000000000a01"
		attacker = "+15550001111"
		victim   = "+14155550100"
		public   = "https://sms.example.com/v1/inbound/twilio"
	)
	api := &messagesAPI{account: account, token: token, msgs: map[string]map[string]string{
		sid: {"sid": sid, "account_sid": account, "from": attacker, "to": "+15005550006", "direction": "inbound",
			"body": "STARTFrom" + victim + "FromCity", "date_created": "Mon, 07 Dec 2026 01:00:00 +0000",
			"date_sent": "Mon, 07 Dec 2026 01:00:01 +0000"},
	}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	p, err := twilio.New(twilio.Config{Settings: twilio.Settings{AccountSID: account, AuthToken: token, From: "ACME"},
		BaseURL: srv.URL, InboundURL: public})
	if err != nil {
		t.Fatal(err)
	}
	captured := url.Values{"MessageSid": {sid}, "SmsSid": {sid}, "AccountSid": {account}, "From": {attacker},
		"To": {"+15005550006"}, "Body": {"STARTFrom" + victim + "FromCity"}, "NumMedia": {"0"}}
	sig := twilio.Signature(token, public, captured)
	parse := func(form url.Values) (provider.Inbound, error) {
		body := form.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/inbound/twilio", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set(twilio.HeaderSignature, sig)
		return p.ParseInbound(r, []byte(body))
	}
	recut := func(edit func(url.Values)) url.Values {
		f := url.Values{}
		for k, v := range captured {
			f[k] = append([]string(nil), v...)
		}
		edit(f)
		if twilio.Signature(token, public, f) != sig {
			t.Fatalf("the re-cut form %v does not carry the captured signature: the test is wrong", f)
		}
		return f
	}
	var re *provider.ReceiptError
	twice := recut(func(f url.Values) { f.Set("Body", "START"); f["From"] = []string{victim + "FromCity", attacker} })
	if _, err := parse(twice); !errors.As(err, &re) || re.Field != "From" {
		t.Errorf("re-cut with From twice: %v, want a problem naming From", err)
	}
	once := recut(func(f url.Values) { f.Set("Body", "START"); f.Set("From", victim); f.Set("FromCity", "From"+attacker) })
	in, err := parse(once)
	if err != nil || in.From != victim || in.Text != "START" {
		t.Fatalf("re-cut with Twilio's names once each: %+v, %v; the form alone cannot tell it from a real one", in, err)
	}
	if _, err := p.ConfirmInbound(t.Context(), in); !errors.Is(err, provider.ErrInboundNotConfirmed) || !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("the re-cut message confirmed: %v", err)
	}
	real, err := parse(captured)
	if err != nil {
		t.Fatal(err)
	}
	at, err := p.ConfirmInbound(t.Context(), real)
	if err != nil || !at.Equal(time.Date(2026, 12, 7, 1, 0, 1, 0, time.UTC)) {
		t.Errorf("the real message: %v, %v; want confirmed with Twilio's date_sent", at, err)
	}
	other := real
	other.ProviderID = "SM00000000000000000000000000000a02"
	if _, err := p.ConfirmInbound(t.Context(), other); !errors.Is(err, provider.ErrInboundNotConfirmed) {
		t.Errorf("a sid Twilio does not know: %v", err)
	}
	for _, status := range []int{http.StatusInternalServerError, http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		api.mu.Lock()
		api.down = status
		api.mu.Unlock()
		if _, err := p.ConfirmInbound(t.Context(), real); !errors.Is(err, provider.ErrConfirmUnavailable) || errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("Twilio answering %d: %v, want ErrConfirmUnavailable", status, err)
		}
	}
	srv.Close()
	if _, err := p.ConfirmInbound(t.Context(), real); !errors.Is(err, provider.ErrConfirmUnavailable) {
		t.Errorf("Twilio unreachable: %v, want ErrConfirmUnavailable", err)
	}
}

// TestInboundURLFragment: provider.inbound_url may carry Twilio's
// connection overrides as a fragment (#rp=5xx&rc=3); a message signed over
// the URL with the fragment or without it is taken, one signed over
// another URL is not.
func TestInboundURLFragment(t *testing.T) {
	const token = "tok-0123456789abcdef"
	const sid = "SM0123456789abcdef0123456789abcdef"
	base := "https://sms.example.com/v1/inbound/twilio"
	p := signedWith(t, token, twilio.Config{InboundURL: base + "#rp=5xx&rc=3"})
	form := url.Values{"MessageSid": {sid}, "AccountSid": {"AC11111111111111111111111111111111"}, "From": {"+14155550100"}, "To": {"+15005550006"}, "Body": {"STOP"}}
	for signed, ok := range map[string]bool{base: true, base + "#rp=5xx&rc=3": true, "https://other.example.com/v1/inbound/twilio": false} {
		body := form.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/inbound/twilio", strings.NewReader(body))
		r.Header.Set(twilio.HeaderSignature, twilio.Signature(token, signed, form))
		if _, err := p.ParseInbound(r, []byte(body)); (err == nil) != ok {
			t.Errorf("signed over %s: %v, want taken %v", signed, err, ok)
		}
	}
}
