package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardStaleBannerSaysWhatFailed: a stats request answered with
// an error (here a 503 from a proxy in front of the gateway; the gateway
// itself answers the stats 200 even with Redis down, see
// TestDashboardRedisDownShowsReplicaView) makes the stale banner say what
// answered; only when the gateway itself is gone does it say that nothing
// answers.
func TestDashboardStaleBannerSaysWhatFailed(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	target, err := url.Parse(st.base)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() && r.URL.Path == "/v1/admin/stats" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"title":"Service unavailable","status":503,"detail":"no upstream answered in time."}`)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	// The banner shows once the last good update is older than 10 s, at the
	// next failed one (the page backs off: 4 s, 8 s, ...).
	const staleWait = 30 * time.Second
	const banner = `document.getElementById('stale')`

	br.do(chromedp.Navigate(proxy.URL+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)
	br.waitText("#st-redis", "NOT USED", wait)

	// The stats answer 503 with a problem's detail.
	refuse.Store(true)
	br.waitFor("the stale banner naming the 503", `!`+banner+`.hidden && `+banner+`.textContent.startsWith('STALE: the gateway answered 503: ')`, staleWait)
	got := br.text("#stale")
	for _, want := range []string{"no upstream answered in time", "No new figures since ", "UTC; the ones below are old."} {
		if !strings.Contains(got, want) {
			t.Errorf("banner %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "no answer") {
		t.Errorf("banner %q says the gateway did not answer; it answered 503", got)
	}
	if f := br.text("#freshness"); !strings.Contains(f, "update failed: the gateway answered 503: no upstream answered in time") {
		t.Errorf("freshness line %q does not give the answer", f)
	}
	br.screenshotOf("stale", "stale-503.png")
	br.noProblems()

	// The stats answer again: a reload shows current figures, no banner.
	refuse.Store(false)
	br.do(chromedp.Reload())
	br.waitText("#st-redis", "NOT USED", wait)
	br.waitFor("no stale banner", banner+`.hidden`, wait)

	// The gateway goes away, and the proxy with it: now nothing answers,
	// and the banner says so.
	proxy.Close()
	sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.app.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	br.waitFor("the stale banner saying nothing answers", `!`+banner+`.hidden && `+banner+`.textContent.startsWith('STALE: no answer from the gateway since ')`, staleWait)
	if got := br.text("#stale"); strings.Contains(got, "answered") {
		t.Errorf("banner %q says the gateway answered", got)
	}
	br.noProblems()
}

// TestDashboardShowsProtection: refusals by reason and the suppression
// list's size, as the gateway counts them, appear on the page; the page
// shows no recipient number.
func TestDashboardShowsProtection(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)
	for _, r := range []string{"country", "number_type", "suppressed", "otp_per_number"} {
		br.waitText("#pr-"+r, "0", wait)
	}
	br.waitText("#pr-suppressions", "0", wait)

	// A premium-rate OTP (blocked by default), and a suppressed number.
	const premium = "+449012345678"
	if code := st.call(t, "POST", "/v1/otp", loginKey, map[string]string{"to": premium, "body": "code 123456"}, nil); code != 422 {
		t.Fatalf("OTP to a premium-rate number: %d, want 422", code)
	}
	const suppressed = "+819012345671"
	if code := st.call(t, "POST", "/v1/admin/suppressions", adminKey, map[string]string{"to": suppressed, "reason": "opted out"}, nil); code != 201 {
		t.Fatalf("suppress: %d", code)
	}
	// Accepted like any message (a producer cannot probe the list); its
	// take ends it suppressed, which is no refusal at accept.
	for range 2 {
		if code := st.call(t, "POST", "/v1/messages", notifyKey,
			map[string]string{"to": suppressed, "body": "50% off today", "class": "marketing"}, nil); code != 202 {
			t.Fatalf("marketing to a suppressed number: %d, want 202", code)
		}
	}
	br.waitText("#pr-number_type", "1", wait)
	br.waitText("#pr-suppressed", "0", wait)
	br.waitText("#pr-suppressions", "1", wait)
	br.noProblems()
	page := br.text("body")
	for _, n := range []string{premium, suppressed, "9012345678", "9012345671"} {
		if strings.Contains(page, n) {
			t.Errorf("the page shows %s", n)
		}
	}
}

// TestDashboardUsage: messages accepted before sign-in appear in the
// usage table, one row per day, producer, class and country, with their
// units and how the queue ended them.
func TestDashboardUsage(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 15 * time.Second
	var ids []string
	for _, to := range []string{"+819012345678", "+819012345678", "+33612345678"} {
		var a struct {
			ID string `json:"id"`
		}
		if code := st.call(t, http.MethodPost, "/v1/messages", notifyKey,
			map[string]any{"to": to, "body": "hello", "class": "transactional"}, &a); code != http.StatusAccepted {
			t.Fatalf("POST /v1/messages: %d", code)
		}
		ids = append(ids, a.ID)
	}
	for _, id := range ids {
		st.waitStatus(t, notifyKey, id, wait, "sent", "delivered")
	}

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	jp := `#usage tr[data-producer=notify][data-class=transactional][data-country=JP]`
	br.waitText(jp+` td[data-field=messages]`, "2", wait)
	if got := br.text(jp + ` td[data-field=final]`); got != "sent 2 (2 u)" {
		t.Errorf("JP row ended %q, want \"sent 2 (2 u)\"", got)
	}
	fr := `#usage tr[data-producer=notify][data-class=transactional][data-country=FR]`
	if got := br.text(fr + ` td[data-field=units]`); got != "1" {
		t.Errorf("FR row units %q, want 1", got)
	}
	if got := br.text("#usage-msg"); !strings.HasPrefix(got, "From ") {
		t.Errorf("usage message %q", got)
	}
	br.noProblems()
}
