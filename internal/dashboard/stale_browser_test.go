package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"smsgw/internal/redistest"
)

// TestDashboardStaleBannerSaysWhatFailed: when Redis is down the gateway
// still answers, with a 503 naming the failing dependency; the page's
// stale banner says that, and only when the gateway itself is gone does
// it say that nothing answers.
func TestDashboardStaleBannerSaysWhatFailed(t *testing.T) {
	exe := chromiumPath(t)
	rds := redistest.StartServer(t, redistest.ServerOptions{})
	st := startStackOn(t, rds.Addr, "")
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	// The banner shows once the last good update is older than 10 s, at the
	// next failed one (the page backs off: 4 s, 8 s, ...).
	const staleWait = 30 * time.Second
	const banner = `document.getElementById('stale')`

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)
	br.waitText("#st-redis", "OK", wait)

	// Redis stops: GET stats answers 503 with the problem's detail.
	rds.Stop()
	if code := st.call(t, "GET", "/v1/admin/stats", adminKey, nil, nil); code != 503 {
		t.Fatalf("GET /v1/admin/stats with Redis stopped: %d, want 503", code)
	}
	br.waitFor("the stale banner naming the 503", `!`+banner+`.hidden && `+banner+`.textContent.startsWith('STALE: the gateway answered 503: ')`, staleWait)
	got := br.text("#stale")
	for _, want := range []string{"a dependency of the gateway is down or slow", "No new figures since ", "UTC; the ones below are old."} {
		if !strings.Contains(got, want) {
			t.Errorf("banner %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "no answer") {
		t.Errorf("banner %q says the gateway did not answer; it answered 503", got)
	}
	if f := br.text("#freshness"); !strings.Contains(f, "update failed: the gateway answered 503: a dependency of the gateway is down or slow") {
		t.Errorf("freshness line %q does not give the answer", f)
	}
	br.screenshotOf("stale", "stale-503.png")
	br.noProblems()

	// Redis is back: a reload shows current figures, no banner.
	rds.Start()
	br.do(chromedp.Reload())
	br.waitText("#st-redis", "OK", wait)
	br.waitFor("no stale banner", banner+`.hidden`, wait)

	// The gateway goes away: now nothing answers, and the banner says so.
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
