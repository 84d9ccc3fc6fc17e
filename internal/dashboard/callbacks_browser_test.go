package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard shows the backlog of status callbacks: a producer whose
// webhook is on a refused (loopback) address keeps its sent message's
// event waiting, and the count and its age appear in the provider card.
func TestDashboardCallbackBacklog(t *testing.T) {
	exe := chromiumPath(t)
	st := startStackWith(t, `, webhook: {url: "http://127.0.0.1:9/hook", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`)
	br := startBrowser(t, exe)
	const wait = 15 * time.Second

	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")))
	br.do(chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitText("#cb-backlog", "0", wait)
	br.waitText("#cb-dead", "0", wait)

	if code := st.call(t, http.MethodPost, "/v1/messages", notifyKey,
		map[string]any{"to": "+819012345678", "body": "hello", "class": "transactional"}, nil); code != http.StatusAccepted {
		t.Fatalf("POST /v1/messages: %d", code)
	}
	br.waitFor("one callback waiting", `document.getElementById('cb-backlog').dataset.value === '1'`, wait)
	if got := br.text("#cb-backlog"); !strings.HasPrefix(got, "1 · oldest ") {
		t.Errorf("backlog shows %q, want \"1 · oldest …\"", got)
	}
	br.noProblems()
}
