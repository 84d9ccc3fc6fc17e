package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"smsgw/internal/provider/sim"
)

// laneStats is the part of the stats answer the sender lanes show in.
type laneStats struct {
	SenderLanes []struct {
		Sender      string     `json:"sender"`
		MaxRPS      *float64   `json:"max_rps"`
		PausedUntil *time.Time `json:"paused_until"`
		PauseReason string     `json:"pause_reason"`
	} `json:"sender_lanes"`
}

// TestDashboardSenderLanes: the provider throttles one configured sender;
// its one message draws the sender's 429, and the sender lanes panel
// shows that lane paused, until when and why, its limit, and its backlog
// (the message, back in its lane) with its oldest waiting; the other lanes
// are not paused and have none.
func TestDashboardSenderLanes(t *testing.T) {
	exe := chromiumPath(t)
	st := startStackConf(t, "", "", "limits: {senders: {Mkt1: {max_rps: 3}, Mkt2: {max_rps: 40}}}\n")
	if err := st.sim.Apply(sim.Control{ThrottleSender: &sim.SenderThrottle{From: "Mkt1", For: sim.Duration(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		ID string `json:"id"`
	}
	if code := st.call(t, "POST", "/v1/messages", notifyKey,
		map[string]string{"to": "+819012345678", "body": "Sale", "class": "marketing", "from": "Mkt1"}, &accepted); code != 202 {
		t.Fatalf("post: %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st.sim.Stats().Senders["Mkt1"].Rejected429 == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the throttled sender's message never reached the provider")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var s laneStats
	if code := st.call(t, "GET", "/v1/admin/stats", adminKey, nil, &s); code != 200 {
		t.Fatalf("stats: %d", code)
	}
	if len(s.SenderLanes) != 3 || s.SenderLanes[0].Sender != "Mkt1" || s.SenderLanes[2].Sender != "other" ||
		s.SenderLanes[0].PausedUntil == nil || s.SenderLanes[0].PauseReason != "throttled" || s.SenderLanes[1].PausedUntil != nil {
		t.Fatalf("sender_lanes %+v", s.SenderLanes)
	}

	br := startBrowser(t, exe)
	const wait = 10 * time.Second
	br.do(chromedp.Navigate(st.base+"/dashboard/"), chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), adminKey),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)))
	br.waitFor("Mkt1's lane paused", `document.querySelector('#sender-lanes tr[data-sender="Mkt1"]')?.dataset.paused === 'true'`, wait)
	cell := func(sender, field string) string {
		return br.text(`#sender-lanes tr[data-sender="` + sender + `"] [data-field="` + field + `"]`)
	}
	if got := cell("Mkt1", "paused"); !strings.Contains(got, "left) · throttled by the provider") {
		t.Errorf("Mkt1 paused: %q", got)
	}
	// the message goes back to its lane once the provider's answer is handled
	br.waitFor("Mkt1's message back in its lane",
		`document.querySelector('#sender-lanes tr[data-sender="Mkt1"] [data-field="backlog"]')?.textContent === '1'`, wait)
	if got := cell("Mkt1", "oldest"); got == "—" || got == "" {
		t.Errorf("Mkt1 oldest: %q, want its message's age", got)
	}
	for _, c := range []struct{ sender, field, want string }{
		{"Mkt1", "max_rps", "3.0/s"},
		{"Mkt2", "max_rps", "40/s"}, {"Mkt2", "paused", "no"}, {"Mkt2", "backlog", "0"},
		{"other", "max_rps", "account’s"}, {"other", "paused", "no"},
	} {
		if got := cell(c.sender, c.field); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.sender, c.field, got, c.want)
		}
	}
	br.noProblems()
}
