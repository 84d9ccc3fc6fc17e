package dashboard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// scopedStats is the part of the stats answer a scoped pause shows in.
type scopedStats struct {
	Pause struct {
		Paused bool `json:"paused"`
		Scopes []struct {
			Class    string `json:"class"`
			Producer string `json:"producer"`
		} `json:"scopes"`
	} `json:"pause"`
}

// TestDashboardScopedPause: the page pauses one class (the API sees it,
// the page shows the pause tile PARTLY and the class in the list), and
// resumes it with the class's own button; a producer pause set through
// the API appears in the list too, and OTP is not shown blocked by either.
func TestDashboardScopedPause(t *testing.T) {
	exe := chromiumPath(t)
	st := startStack(t)
	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	read := func() scopedStats {
		var s scopedStats
		if code := st.call(t, "GET", "/v1/admin/stats", adminKey, nil, &s); code != 200 {
			t.Fatalf("stats: %d", code)
		}
		return s
	}

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#st-pause", "NO", wait)

	br.do(chromedp.Click(chromedp.ID("pause-start")),
		chromedp.WaitVisible(chromedp.ID("pause-scope")),
		chromedp.SetValue(chromedp.ID("pause-scope"), "class:marketing"),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "campaign review"),
		chromedp.Click(chromedp.ID("pause-confirm")))
	br.waitText("#st-pause", "PARTLY", wait)
	s := read()
	if s.Pause.Paused || len(s.Pause.Scopes) != 1 || s.Pause.Scopes[0].Class != "marketing" {
		t.Fatalf("after the page's class pause the API says %+v", s.Pause)
	}
	br.waitFor("the class pause listed", `document.getElementById('scoped-pauses').textContent.includes('class marketing paused until resumed · “campaign review”')`, wait)
	if got := br.text("#st-otp"); got == "BLOCKED" {
		t.Error("OTP shown blocked by a marketing pause")
	}

	if code := st.call(t, "POST", "/v1/admin/pause", adminKey, map[string]string{"producer": "notify"}, nil); code != 200 {
		t.Fatalf("producer pause via API: %d", code)
	}
	br.waitFor("the producer pause listed", `document.getElementById('scoped-pauses').textContent.includes('producer notify paused')`, wait)

	br.do(chromedp.Click(chromedp.CSS(`#scoped-pauses button[data-scope="class:marketing"]`)))
	br.waitFor("the class pause gone", `!document.getElementById('scoped-pauses').textContent.includes('class marketing')`, wait)
	s = read()
	if slices.ContainsFunc(s.Pause.Scopes, func(p struct {
		Class    string `json:"class"`
		Producer string `json:"producer"`
	}) bool {
		return p.Class == "marketing"
	}) || len(s.Pause.Scopes) != 1 {
		t.Fatalf("after the page's class resume the API says %+v", s.Pause)
	}
	br.do(chromedp.Click(chromedp.CSS(`#scoped-pauses button[data-scope="producer:notify"]`)))
	br.waitText("#st-pause", "NO", wait)
	br.noProblems()
}
