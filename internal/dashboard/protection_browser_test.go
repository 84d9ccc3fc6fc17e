package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

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
