package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"smsgw/internal/redistest"
)

// TestDashboardRedisDownShowsReplicaView: with Redis stopped the gateway
// answers the stats with what this replica knows and names what it could
// not read. The page says so in a banner, keeps the limiter, OTP, pause
// and provider figures, shows the queue, totals, callbacks, protection and
// dead letters as unavailable (never as 0), and does not call its figures
// stale; once Redis is back the banner goes at the next poll.
func TestDashboardRedisDownShowsReplicaView(t *testing.T) {
	exe := chromiumPath(t)
	rds := redistest.StartServer(t, redistest.ServerOptions{})
	st := startStackOn(t, rds.Addr, "")
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	const partial = `document.getElementById('partial')`

	// An OTP on the fast path: this replica has a latency to show.
	if code := st.call(t, "POST", "/v1/otp", loginKey, map[string]string{"to": "+819012345679", "body": "code 123456"}, nil); code != 200 {
		t.Fatalf("POST /v1/otp: %d", code)
	}
	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-redis", "OK", wait)
	br.waitText(queued("otp"), "0", wait) // a whole answer: zeros where the queue is empty
	br.waitText(sentCell("otp"), "1", wait)
	if !evalJS[bool](br, partial+`.hidden`) {
		t.Fatalf("outage banner shown with Redis up: %q", br.text("#partial"))
	}

	rds.Stop()
	br.waitFor("the outage banner", `!`+partial+`.hidden`, wait)
	const want = "Redis unreachable: queue depths, totals, callbacks and protection are not shown; this replica's own view below."
	if got := br.text("#partial"); got != want {
		t.Errorf("banner %q\nwant   %q", got, want)
	}
	// This replica's own view is still there.
	br.waitText("#st-redis", "DOWN", wait)
	if got := br.text("#lim-mode"); !strings.HasPrefix(got, "FALLBACK") {
		t.Errorf("limiter mode %q, want FALLBACK", got)
	}
	if got := br.text("#st-pause"); got != "NO" {
		t.Errorf("pause tile %q, want NO", got)
	}
	if got := br.text("#st-otp"); got != "OK" && got != "SLOW" {
		t.Errorf("OTP tile %q, want OK or SLOW (judged on this replica's latency)", got)
	}
	if got := br.text("#st-otp-detail"); !strings.Contains(got, "queue unavailable") || !strings.Contains(got, "p99 ") {
		t.Errorf("OTP tile detail %q, want the p99 and the queue unavailable", got)
	}
	for sel, want := range map[string]string{"#pv-429-window": "0 of 300", "#pv-target": "90/s", "#pv-otp-503": "0 (this replica)"} {
		if got := br.text(sel); got != want {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if got := br.text("#pv-otp-p99"); !strings.HasSuffix(got, " ms") && !strings.HasSuffix(got, " s") {
		t.Errorf("OTP p99 %q, want a latency", got)
	}
	// What Redis holds is unavailable, never 0.
	for _, sel := range []string{"#st-sending", queued("otp"), queued("marketing"), sentCell("otp"),
		"#pv-429", "#pv-rate", "#cb-backlog", "#cb-dead", "#pr-suppressions", "#pr-country"} {
		if got := br.text(sel); got != "—" {
			t.Errorf("%s shows %q with Redis down, want —", sel, got)
		}
	}
	if zeros := evalJS[int](br, `[...document.querySelectorAll('#queues td, #protection dd, #cb-backlog, #cb-dead')]
		.filter((e) => e.textContent.trim() === '0').length`); zeros != 0 {
		t.Errorf("%d figures read 0 with Redis down", zeros)
	}
	if got := br.text("#st-sending-detail"); !strings.Contains(got, "queue depth unavailable") {
		t.Errorf("sending detail %q", got)
	}
	br.waitFor("the dead letters unavailable", `document.getElementById('dead-summary').textContent.startsWith('Dead letters unavailable: ')`, wait)
	if got := br.text("#counters-scope"); got != "Sent, failed, expired: unavailable." {
		t.Errorf("counters caption %q", got)
	}
	// An answer, if partial, is fresh: no stale banner, no failed update.
	if !evalJS[bool](br, `document.getElementById('stale').hidden && document.getElementById('freshness').dataset.state === 'ok'`) {
		t.Errorf("stale %q, freshness %q: a partial answer is not a failed update", br.text("#stale"), br.text("#freshness"))
	}
	br.screenshot("redis-down.png")
	br.noProblems()

	// Redis is back: the next poll is whole and the banner goes.
	rds.Start()
	br.waitFor("the outage banner gone", partial+`.hidden`, wait)
	br.waitText("#st-redis", "OK", wait)
	br.waitText(queued("otp"), "0", wait)
	// A number again (this private Redis keeps no data across its restart).
	br.waitFor("the OTP sent total back", `/^[0-9]+$/.test(document.querySelector('`+sentCell("otp")+`').textContent.trim())`, wait)
	br.waitFor("the dead letters back", `document.getElementById('dead-summary').textContent === 'No dead letters.'`, wait)
	br.noProblems()
}
