package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"smsgw/internal/config"
	"smsgw/internal/dashboard"
	"smsgw/internal/gateway"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/testclient"
)

const (
	adminKey  = "admin-key-for-the-dashboard-test"
	notifyKey = "notify-key-0123456789"
	loginKey  = "login-key-01234567890"
	// receiptSecret signs the delivery receipts the tests post.
	receiptSecret = "receipt-secret-for-the-dashboard"
)

// chromiumPath finds the browser. A missing browser fails the test: CI
// installs it, and a browser test that quietly skips proves nothing.
// SMSGW_SKIP_BROWSER=1 is the only way to skip.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if os.Getenv("SMSGW_SKIP_BROWSER") == "1" {
		t.Skip("SMSGW_SKIP_BROWSER=1: browser test skipped")
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found on PATH: install it (apt-get install -y chromium), " +
		"or set SMSGW_SKIP_BROWSER=1 to skip this test explicitly")
	return ""
}

// stack is a real gateway (embedded store, local limiter) sending to the
// provider simulator, with the dashboard mounted.
type stack struct {
	app  *gateway.App
	sim  *sim.Sim
	base string
}

func startStack(t *testing.T) *stack { return startStackWith(t, "") }

// startStackWith adds notifyExtra to the notify producer's flow mapping
// (", webhook: {...}").
func startStackWith(t *testing.T, notifyExtra string) *stack {
	t.Helper()
	return startStackOn(t, "", notifyExtra)
}

// startStackOn is startStackWith on the Redis at redisAddr ("": the
// embedded store), under an account of its own.
func startStackOn(t *testing.T, redisAddr, notifyExtra string) *stack {
	t.Helper()
	return startStackConf(t, redisAddr, notifyExtra, "")
}

// startStackConf is startStackOn with topExtra added to the
// configuration's top level ("limits: {...}\n").
func startStackConf(t *testing.T, redisAddr, notifyExtra, topExtra string) *stack {
	t.Helper()
	s, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	simURL, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	account := "dashtest"
	if redisAddr != "" {
		account = redistest.Prefix(t)
	}
	// One attempt per message, so a failing provider makes dead letters at
	// once. Fewer failures than the breaker's threshold (5), so a retry
	// is sent without waiting for the breaker to close.
	yaml := fmt.Sprintf(`
listen: "127.0.0.1:0"
store: {path: %q}
redis: {addr: %q}
account: %s
provider: {kind: http, url: %q, timeout: 2s, receipt_secret: %q}
dispatch: {max_attempts: 1, shutdown_timeout: 5s}
producers:
  - {name: notify, key: %q, classes: [transactional, marketing], rate: 1000, burst: 1000%s}
  - {name: login, key: %q, classes: [otp], rate: 100, burst: 100}
admin: {key: %q}
%s`, t.TempDir(), redisAddr, account, simURL+"/send", receiptSecret, notifyKey, notifyExtra, loginKey, adminKey, topExtra)
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	app, err := gateway.New(ctx, cfg, gateway.Options{Dashboard: dashboard.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := app.Stop(sctx); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	return &stack{app: app, sim: s, base: "http://" + app.Addr()}
}

// call makes one API request and decodes a JSON answer into out (if set).
func (s *stack) call(t *testing.T, method, path, key string, body, out any) int {
	t.Helper()
	var text string
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		text = string(b)
	}
	res := testclient.Do(t, nil, testclient.New(t, method, s.base+path, text, "Authorization", "Bearer "+key))
	if out != nil && res.Status < 300 {
		if err := json.Unmarshal(res.Body, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, res.Body)
		}
	}
	return res.Status
}

// waitStatus waits until GET /v1/messages/{id}, as key, answers one of
// the statuses want.
func (s *stack) waitStatus(t *testing.T, key, id string, timeout time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var m struct {
			Status string `json:"status"`
		}
		s.call(t, http.MethodGet, "/v1/messages/"+id, key, nil, &m)
		if slices.Contains(want, m.Status) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s is %q, want %v", id, m.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type stats struct {
	Classes map[string]struct {
		Ready, Scheduled, Leased, Dead int64
	} `json:"classes"`
	Limiter struct {
		Mode string `json:"mode"`
	} `json:"limiter"`
	Pause struct {
		Paused bool   `json:"paused"`
		Reason string `json:"reason"`
	} `json:"pause"`
	OTP struct {
		LatencyP99MS *float64 `json:"latency_p99_ms"`
	} `json:"otp"`
}

func (s *stack) stats(t *testing.T) stats {
	t.Helper()
	var st stats
	if code := s.call(t, "GET", "/v1/admin/stats", adminKey, nil, &st); code != 200 {
		t.Fatalf("GET /v1/admin/stats: %d", code)
	}
	return st
}

// browser drives one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func startBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancelTab := chromedp.NewContext(actx)
	// Cleanups run last-in first-out: close the tab, then wait for the
	// browser process to exit, then the temp dir goes.
	t.Cleanup(cancelAlloc)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = chromedp.Cancel(cctx)
		cancelTab()
	})
	// Every uncaught error, failed promise and CSP violation of the page is
	// recorded, and the test fails on any.
	const recorder = `window.__problems = [];
addEventListener('error', (e) => __problems.push('error: ' + e.message));
addEventListener('unhandledrejection', (e) => __problems.push('rejection: ' + e.reason));
document.addEventListener('securitypolicyviolation', (e) => __problems.push('CSP: ' + e.violatedDirective + ' ' + e.blockedURI));`
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument,
		page.AddScriptToEvaluateOnNewDocumentParams{Source: recorder}); err != nil {
		t.Fatalf("start browser: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the text of the first element matching the CSS selector, or
// "<missing>".
func (b *browser) text(sel string) string {
	b.t.Helper()
	q, _ := json.Marshal(sel)
	return evalJS[string](b, fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? '<missing>').trim()`, q))
}

// waitFor evaluates a JS condition until it holds. chromedp's Poll cannot be
// used: it compiles its predicate with new Function, which the page's CSP
// (rightly) forbids.
func (b *browser) waitFor(what, cond string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if evalJS[bool](b, "!!("+cond+")") {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("after %v the page does not show %s\ntop line: %q\nfreshness: %q",
				timeout, what, b.text(".tiles"), b.text("#freshness"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitText waits until the element's trimmed text equals want.
func (b *browser) waitText(sel, want string, timeout time.Duration) {
	b.t.Helper()
	q, _ := json.Marshal(sel)
	w, _ := json.Marshal(want)
	b.waitFor(fmt.Sprintf("%s = %s", sel, want),
		fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? '').trim() === %s`, q, w), timeout)
}

func (b *browser) noProblems() {
	b.t.Helper()
	if p := evalJS[[]string](b, `window.__problems`); len(p) > 0 {
		b.t.Fatalf("the page reported problems: %q", p)
	}
}

// screenshot saves the whole page as a PNG named name, in
// $SMSGW_SCREENSHOT_DIR when set (to look at), else in a temp dir.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.save(name, chromedp.FullScreenshot(100))
}

// screenshotOf saves what the element with this id shows.
func (b *browser) screenshotOf(id, name string) {
	b.t.Helper()
	b.save(name, chromedp.Screenshot(chromedp.ID(id)))
}

func (b *browser) save(name string, shot chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("SMSGW_SCREENSHOT_DIR")
	if dir == "" {
		dir = b.t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

func queued(class string) string   { return `#queues tr[data-class=` + class + `] td[data-field=queued]` }
func sentCell(class string) string { return `#queues tr[data-class=` + class + `] td[data-field=sent]` }

// TestDashboardInBrowser drives the real page in headless Chromium against
// a real gateway and provider simulator, and checks that what the page
// shows follows the real state, and that what the page does changes it.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	const keyStorage = `sessionStorage.getItem('smsgw.adminKey')`

	// No key yet: the page asks for one.
	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")))
	if evalJS[bool](br, `!document.getElementById('main').hidden`) {
		t.Fatal("dashboard shown without a key")
	}

	// A wrong key is refused and forgotten.
	br.do(chromedp.SendKeys(chromedp.ID("key-input"), "not-the-admin-key-123456"),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitFor("the refused key message", `!document.getElementById('key-error').hidden &&
		document.getElementById('key-error').textContent.includes('refused')`, wait)
	if got := evalJS[*string](br, keyStorage); got != nil {
		t.Fatalf("a refused key stayed in sessionStorage: %q", *got)
	}

	// The admin key: the top line answers the four questions.
	br.do(chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)
	br.waitText("#st-sending", "IDLE", wait)
	br.waitText("#st-redis", "NOT USED", wait) // embedded store: no Redis
	br.waitText("#st-otp", "OK", wait)
	if got := br.text("#lim-mode"); !strings.HasPrefix(got, "local") {
		t.Errorf("limiter mode shows %q, want local", got)
	}
	if !strings.HasPrefix(br.text("#freshness"), "Last updated ") {
		t.Errorf("no last-updated time: %q", br.text("#freshness"))
	}
	if got := evalJS[*string](br, keyStorage); got == nil || *got != adminKey {
		t.Fatal("the admin key is not in sessionStorage")
	}
	if strings.Contains(evalJS[string](br, `location.href`), adminKey) {
		t.Fatal("the admin key is in the URL")
	}
	if got := br.text("#pv-otp-p99"); got != "—" {
		t.Errorf("OTP p99 shows %q before any OTP was sent, want —", got)
	}
	for sel, want := range map[string]string{"#pv-target": "90/s", "#pv-contract": "100/s", "#pv-429": "0",
		"#pv-429-window": "0 of 300", "#pv-otp-503": "0", sentCell("otp"): "0"} {
		if got := br.text(sel); got != want {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if got := br.text("#replica"); !strings.Contains(got, "embedded store") || !strings.Contains(got, "Answered by replica ") {
		t.Errorf("replica line %q", got)
	}

	// An OTP on the fast path: the page counts it, shows a rate and the
	// p99, and the OTP tile judges that p99 by the 20 ms rule.
	if code := st.call(t, "POST", "/v1/otp", loginKey, map[string]string{"to": "+819012345679", "body": "code 123456"}, nil); code != 200 {
		t.Fatalf("POST /v1/otp: %d", code)
	}
	br.waitText(sentCell("otp"), "1", wait)
	br.waitFor("a send rate", `/^[0-9.]+\/s$/.test(document.getElementById('pv-rate').textContent) &&
		parseFloat(document.getElementById('pv-rate').textContent) > 0`, wait)
	br.waitFor("the OTP p99", `/^[0-9.]+ (ms|s)$/.test(document.getElementById('pv-otp-p99').textContent)`, wait)
	p99 := st.stats(t).OTP.LatencyP99MS
	if p99 == nil {
		t.Fatal("the stats report no OTP p99 after an OTP was sent")
	}
	wantOTP := "OK"
	if *p99 >= 20 {
		wantOTP = "SLOW"
	}
	br.waitText("#st-otp", wantOTP, wait)
	if got := br.text("#st-otp-detail"); !strings.Contains(got, "p99") {
		t.Errorf("OTP tile detail %q does not give the p99", got)
	}

	// The provider throttles: the 503 the OTP gets and the 429 behind it
	// show, the OTP tile says BLOCKED, the guard's bar moves off zero.
	throttle := sim.Duration(time.Second)
	if err := st.sim.Apply(sim.Control{ThrottleAllFor: &throttle}); err != nil {
		t.Fatal(err)
	}
	if code := st.call(t, "POST", "/v1/otp", loginKey, map[string]string{"to": "+819012345679", "body": "code 654321"}, nil); code != 503 {
		t.Fatalf("POST /v1/otp to a throttling provider: %d, want 503", code)
	}
	br.waitText("#pv-429", "1", wait)
	br.waitText("#pv-otp-503", "1", wait)
	br.waitText("#pv-429-window", "1 of 300", wait)
	br.waitText("#st-otp", "BLOCKED", wait)
	if v := evalJS[float64](br, `document.getElementById('pv-guard-meter').value`); v != 1 {
		t.Errorf("guard meter value %v, want 1", v)
	}
	if err := st.sim.Apply(sim.Control{Clear: true}); err != nil {
		t.Fatal(err)
	}

	// Pause with the page's button; the API sees it.
	br.do(chromedp.Click(chromedp.ID("pause-start")),
		chromedp.WaitVisible(chromedp.ID("pause-reason")),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "browser test"),
		chromedp.Click(chromedp.ID("pause-confirm")))
	br.waitText("#st-pause", "PAUSED", wait)
	if s := st.stats(t); !s.Pause.Paused || s.Pause.Reason != "browser test" {
		t.Fatalf("after the page's pause the API says paused=%v reason=%q", s.Pause.Paused, s.Pause.Reason)
	}
	br.waitText("#st-sending", "NO", wait)
	br.waitText("#st-otp", "BLOCKED", wait)
	if !strings.Contains(br.text("#st-pause-detail"), "browser test") {
		t.Errorf("pause reason not shown: %q", br.text("#st-pause-detail"))
	}

	// Messages queued through the API appear per class on the next refresh.
	numbers := map[string]string{} // id -> recipient
	enqueue := func(key, class, to string) {
		var acc struct{ ID string }
		if code := st.call(t, "POST", "/v1/messages", key,
			map[string]string{"to": to, "body": "dashboard test " + class, "class": class}, &acc); code != 202 {
			t.Fatalf("enqueue %s: %d", class, code)
		}
		numbers[acc.ID] = to
	}
	enqueue(loginKey, "otp", "+819012345670")
	enqueue(notifyKey, "transactional", "+819012345671")
	enqueue(notifyKey, "marketing", "+819012345672")
	enqueue(notifyKey, "marketing", "+819012345673")
	br.waitText(queued("otp"), "1", wait)
	br.waitText(queued("transactional"), "1", wait)
	br.waitText(queued("marketing"), "2", wait)
	if got := br.text("#st-sending-detail"); !strings.Contains(got, "4 queued") {
		t.Errorf("sending detail %q, want 4 queued", got)
	}

	// The provider fails every send; resume from the page. With one
	// attempt each, every message becomes a dead letter.
	fail := 1.0
	if err := st.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
		t.Fatal(err)
	}
	br.do(chromedp.Click(chromedp.ID("resume")))
	br.waitText("#st-pause", "NO", wait)
	if s := st.stats(t); s.Pause.Paused {
		t.Fatal("after the page's resume the API still says paused")
	}
	br.waitFor("4 dead letters", `document.querySelectorAll('#dead tbody tr[data-id]').length === 4`, wait)
	br.waitText(`#queues tr[data-class=marketing] td[data-field=dead]`, "2", wait)
	br.waitText(queued("marketing"), "0", wait)
	for id, to := range numbers {
		got := br.text(`#dead tr[data-id="` + id + `"] td[data-field=to]`)
		if got != sms.MaskPhone(to) || !strings.Contains(got, "*") {
			t.Errorf("dead letter %s shows recipient %q, want the API's mask %q", id, got, sms.MaskPhone(to))
		}
	}
	if body := evalJS[string](br, `document.body.innerText`); strings.Contains(body, "+819012345") {
		t.Error("a full phone number is on the page")
	}

	// Retry one from the page, with the provider healthy again: it is sent.
	if err := st.sim.Apply(sim.Control{Clear: true}); err != nil {
		t.Fatal(err)
	}
	var retried string
	for id := range numbers {
		if numbers[id] == "+819012345670" {
			retried = id
		}
	}
	br.do(chromedp.Click(chromedp.CSS(`#dead tr[data-id="` + retried + `"] button`)))
	br.waitFor("3 dead letters after a retry", `document.querySelectorAll('#dead tbody tr[data-id]').length === 3`, wait)
	st.waitStatus(t, loginKey, retried, wait, "sent")
	br.waitText(sentCell("otp"), "2", wait)

	// Look messages up by id: the retried one is sent, a dead one failed,
	// numbers masked; an unknown id says so.
	lookup := func(id string) {
		br.do(chromedp.SetValue(chromedp.ID("lookup-id"), id), chromedp.Click(chromedp.CSS(`#lookup-form button`)))
	}
	lookup(retried)
	br.waitText(`#lookup-result [data-field=status]`, "sent", wait)
	if got := br.text(`#lookup-result [data-field=to]`); got != sms.MaskPhone("+819012345670") {
		t.Errorf("lookup shows recipient %q, want %q", got, sms.MaskPhone("+819012345670"))
	}
	if got := br.text(`#lookup-result [data-field=producer]`); got != "login" {
		t.Errorf("lookup shows producer %q", got)
	}
	for id, to := range numbers {
		if to == "+819012345673" {
			lookup(id)
		}
	}
	br.waitText(`#lookup-result [data-field=producer]`, "notify", wait)
	br.waitText(`#lookup-result [data-field=status]`, "failed", wait)
	lookup(sms.NewID(time.Now()))
	br.waitFor("the not-found answer", `document.getElementById('lookup-result').hidden &&
		document.getElementById('lookup-msg').textContent.includes('no such message')`, wait)
	lookup("not-an-id")
	br.waitFor("the id format hint", `document.getElementById('lookup-msg').textContent.includes('msg_ followed by')`, wait)
	if body := evalJS[string](br, `document.body.innerText`); strings.Contains(body, "+819012345") {
		t.Error("a full phone number is on the page")
	}

	// State changed behind the page's back shows up by itself; a reload
	// keeps the session (the key is in sessionStorage).
	br.noProblems()
	br.do(chromedp.Reload())
	if code := st.call(t, "POST", "/v1/admin/pause", adminKey, map[string]any{"reason": "paused by API", "duration_seconds": 600}, nil); code != 200 {
		t.Fatalf("pause via API: %d", code)
	}
	br.waitText("#st-pause", "PAUSED", wait)
	br.waitFor("the timed pause", `document.getElementById('st-pause-detail').textContent.includes('paused by API')`, wait)
	if evalJS[bool](br, `!document.getElementById('login').hidden`) {
		t.Fatal("a reload asked for the key again")
	}
	br.waitFor("3 dead letters after the reload", `document.querySelectorAll('#dead tbody tr[data-id]').length === 3`, wait)
	br.screenshot("dashboard.png")
	br.noProblems()

	// The gateway goes away: the page says so instead of showing old
	// figures as if they were current.
	sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.app.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	br.waitFor("the update failure", `document.getElementById('freshness').dataset.state === 'error' &&
		document.getElementById('freshness').textContent.includes('retrying in')`, wait)
	br.noProblems()
}
