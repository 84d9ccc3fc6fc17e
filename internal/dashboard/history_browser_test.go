package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"smsgw/internal/provider/sim"
)

// chartReady is a JS condition: the chart's series path for name has at
// least two points and its largest value is over min.
func chartReady(chart, series string, min float64) string {
	return fmt.Sprintf(`(() => { const p = document.querySelector('#chart-%s path[data-series=%s]');
		return !!p && +p.dataset.points >= 2 && +p.dataset.max > %g && /^M[0-9.]+ [0-9.]+[LVh]/.test(p.getAttribute('d')); })()`,
		chart, series, min)
}

// layoutProblems lists, in the page, every visible element of the
// dashboard that reaches past the viewport's right edge (or before its
// left one), and every table cell whose text is smaller than 12 px: at a
// phone's width the figures must all be there to read, not cut off by a
// scrolling box or the screen.
const layoutProblems = `(() => {
	const out = [];
	const W = innerWidth;
	if (document.documentElement.scrollWidth > W) out.push('page ' + document.documentElement.scrollWidth + ' px wide in a ' + W + ' px viewport');
	for (const e of document.querySelectorAll('main *')) {
		if (!e.getClientRects().length || e.closest('.visually-hidden, thead, [hidden]')) continue;
		const r = e.getBoundingClientRect();
		if (r.width > 0 && (r.right > W + 0.5 || r.left < -0.5)) {
			out.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.dataset.field ? '[' + e.dataset.field + ']' : '') +
				' spans ' + Math.round(r.left) + '..' + Math.round(r.right));
		}
	}
	for (const c of document.querySelectorAll('#queues tbody td, #queues tbody th, #dead tbody td')) {
		if (parseFloat(getComputedStyle(c).fontSize) < 12) out.push('a cell in ' + c.closest('table').id + ' has text under 12 px');
	}
	return out.slice(0, 20);
})()`

// TestDashboardHistoryAtDesktopAndPhone runs demo-like traffic (a
// marketing campaign paced at its cap, transactional and OTP trickles, a
// provider 429, dead letters) through a real gateway and checks, in
// headless Chromium, that the last-15-minutes charts draw it and the drain
// time shows, at a desktop size and at a phone's 390 × 844: there no
// element reaches past the screen and every table figure is on it.
func TestDashboardHistoryAtDesktopAndPhone(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	// The history has one step per 5 s and shows the steps that ended.
	const historyWait = 45 * time.Second

	// Two dead letters first (one attempt each against a failing provider).
	fail := 1.0
	if err := st.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"transactional", "marketing"} {
		if code := st.call(t, "POST", "/v1/messages", notifyKey,
			map[string]string{"to": "+819012345671", "body": "dashboard history test", "class": class}, nil); code != http.StatusAccepted {
			t.Fatalf("enqueue %s: %d", class, code)
		}
	}
	waitDead(t, st, 2)
	if err := st.sim.Apply(sim.Control{Clear: true}); err != nil {
		t.Fatal(err)
	}

	// The campaign: 1,000 marketing messages (one batch, the producer's
	// burst), sent at the marketing cap (70/s) for about 15 s, with OTPs
	// and transactional messages between.
	items := make([]map[string]string, 1000)
	for i := range items {
		items[i] = map[string]string{"to": fmt.Sprintf("+8190%08d", 10000000+i), "body": "campaign", "class": "marketing"}
	}
	var out struct{ Accepted int }
	if code := st.call(t, "POST", "/v1/messages/batch", notifyKey, map[string]any{"messages": items}, &out); code != 200 || out.Accepted != len(items) {
		t.Fatalf("campaign batch: %d, %d of %d accepted", code, out.Accepted, len(items))
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				st.post(loginKey, "/v1/otp", map[string]string{"to": "+819012345679", "body": "code 123456"})
				st.post(notifyKey, "/v1/messages", map[string]string{"to": "+819012345672", "body": "parcel", "class": "transactional"})
			}
		}
	}()
	defer func() {
		close(stop)
		<-trickled
	}()
	throttle := sim.Duration(time.Second)
	if err := st.sim.Apply(sim.Control{ThrottleAllFor: &throttle}); err != nil {
		t.Fatal(err)
	}

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)
	br.waitFor("the marketing rate on the chart", chartReady("rate", "marketing", 20), historyWait)
	br.waitFor("the backlog on the chart", chartReady("backlog", "marketing", 100), historyWait)
	br.waitFor("a provider 429 on the chart", `+document.querySelector('#chart-throttled path[data-series=throttled]')?.dataset.max >= 1`, historyWait)
	br.waitFor("the drain time", `/^Backlog [0-9,]+ due, (drains in|not shrinking|keeping pace)/.test(document.getElementById('drain').textContent)`, wait)
	if got := evalJS[float64](br, `+document.querySelector('#chart-rate line.ref.target')?.getAttribute('y1')`); got <= 0 {
		t.Errorf("no target line on the rate chart (y1 %v)", got)
	}
	if got := br.text("#now-rate"); !strings.Contains(got, "marketing") {
		t.Errorf("the rate chart's last-step line %q", got)
	}
	if p := evalJS[[]string](br, layoutProblems); len(p) > 0 {
		t.Errorf("desktop layout: %q", p)
	}
	br.screenshot("history-desktop.png")

	// The phone. The page reloads at 390 × 844 (the key stays in the tab).
	br.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch),
		chromedp.Reload())
	br.waitText("#st-pause", "NO", wait)
	br.waitFor("the dead letters", `document.querySelectorAll('#dead tbody tr[data-id]').length === 2`, wait)
	br.waitFor("the charts at the phone's width", chartReady("rate", "marketing", 20)+` && `+chartReady("backlog", "marketing", 0), historyWait)
	if w := evalJS[float64](br, `innerWidth`); w != 390 {
		t.Fatalf("viewport %v px wide, want 390: a page wider than the phone makes it zoom out", w)
	}
	if p := evalJS[[]string](br, layoutProblems); len(p) > 0 {
		t.Errorf("phone layout: %q", p)
	}
	if w := evalJS[float64](br, `document.querySelector('#chart-rate svg').getBoundingClientRect().width`); w < 250 || w > 390 {
		t.Errorf("the rate chart is %v px wide on a 390 px screen", w)
	}
	// Every column of both tables is there, named.
	labels := evalJS[[]string](br, `[...document.querySelectorAll('#dead tbody tr[data-id]:first-child td')].map((c) => getComputedStyle(c, '::before').content)`)
	if len(labels) < 7 || !strings.Contains(strings.Join(labels, " "), "Last error") {
		t.Errorf("dead-letter row labels on a phone: %q", labels)
	}
	br.save("phone-top.png", chromedp.CaptureScreenshot())
	for _, id := range []string{"history", "queues", "dead"} {
		br.screenshotOf(id, "phone-"+id+".png")
	}
	br.noProblems()
}

// post sends one request and ignores its answer (the trickle).
func (s *stack) post(key, path string, body any) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.base+path, strings.NewReader(string(b)))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if res, err := http.DefaultClient.Do(req); err == nil {
		_ = res.Body.Close()
	}
}

func waitDead(t *testing.T, st *stack, n int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var total int64
		for _, c := range st.stats(t).Classes {
			total += c.Dead
		}
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, want %d", total, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
