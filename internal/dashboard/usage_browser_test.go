package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

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
	deadline := time.Now().Add(wait)
	for _, id := range ids {
		for {
			var m struct {
				Status string `json:"status"`
			}
			st.call(t, http.MethodGet, "/v1/messages/"+id, notifyKey, nil, &m)
			if m.Status == "sent" || m.Status == "delivered" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("message %s still %s", id, m.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
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
