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
