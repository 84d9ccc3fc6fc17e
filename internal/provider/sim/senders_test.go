package sim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
	"smsgw/internal/testclient"
)

// answer is what a client sees of one send over HTTP.
type answer struct {
	status     int
	retryAfter string
	scope      string
}

// simURL starts s on a free port and returns its base URL.
func simURL(t *testing.T, s *sim.Sim) string {
	t.Helper()
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return url
}

// postJSON posts body to url+path over HTTP (GET when body is empty),
// decodes the answer into out (when not nil), and returns its status and
// headers.
func postJSON(t *testing.T, url, path, body string, out any) (int, http.Header) {
	t.Helper()
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	resp := testclient.Do(t, nil, testclient.New(t, method, url+path, body))
	if out != nil {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.Status, resp.Body, err)
		}
	}
	return resp.Status, resp.Header
}

// sendFrom sends one message from the sender from ("": none).
func sendFrom(t *testing.T, url, from string) answer {
	t.Helper()
	b, _ := json.Marshal(httpprov.SendRequest{To: "+819012345678", From: from, Body: "hello",
		Reference: fmt.Sprintf("ref-%d", seq.Add(1))})
	var e httpprov.ErrorResponse
	status, hdr := postJSON(t, url, "/send", string(b), &e)
	return answer{status, hdr.Get("Retry-After"), e.Scope}
}

func want(t *testing.T, got answer, status int, retryAfter, scope string) {
	t.Helper()
	if got != (answer{status, retryAfter, scope}) {
		t.Fatalf("answer %+v, want {%d %q %q}", got, status, retryAfter, scope)
	}
}

// A send must fit its sender's sliding window and the account's; a send one
// of them refuses counts toward neither, and the 429 says whose limit it was.
func TestSenderLimits(t *testing.T) {
	t.Parallel()
	c := newClock(base)
	s := newSim(t, sim.Config{Limit: 3, Senders: map[string]int{"Mkt1": 1, "Mkt2": 5}, SuspendAfter: -1, Now: c.Now})
	url := simURL(t, s)

	want(t, sendFrom(t, url, "Mkt1"), 200, "", "")
	for range 5 { // the sender's 429s leave the account's units free
		want(t, sendFrom(t, url, "Mkt1"), 429, "1", httpprov.ScopeSender)
	}
	want(t, sendFrom(t, url, "Mkt2"), 200, "", "")
	want(t, sendFrom(t, url, ""), 200, "", "")
	want(t, sendFrom(t, url, "Mkt2"), 429, "1", "") // the account's: no scope

	// The account's 429 to Mkt1 at 0.6 s does not count in Mkt1's window.
	c.Set(base.Add(600 * time.Millisecond))
	want(t, sendFrom(t, url, "Mkt1"), 429, "1", "")
	c.Set(base.Add(time.Second)) // the three accepts at base leave both windows
	want(t, sendFrom(t, url, "Mkt1"), 200, "", "")
	want(t, sendFrom(t, url, "Mkt1"), 429, "1", httpprov.ScopeSender)
	c.Set(base.Add(1999 * time.Millisecond))
	want(t, sendFrom(t, url, "Mkt1"), 429, "1", httpprov.ScopeSender)
	c.Set(base.Add(2 * time.Second))
	want(t, sendFrom(t, url, "Mkt1"), 200, "", "")

	var st sim.Stats
	postJSON(t, url, "/stats", "", &st)
	m1, m2 := st.Senders["Mkt1"], st.Senders["Mkt2"]
	if m1.Limit != 1 || m1.Accepted != 3 || m1.Rejected429 != 7 || m1.MaxInAny1s != 1 ||
		m2.Limit != 5 || m2.Accepted != 1 || m2.Rejected429 != 0 || len(st.Senders) != 2 {
		t.Fatalf("senders %+v", st.Senders)
	}
	if st.Accepted != 5 || st.Rejected429 != 9 || st.MaxInAny1s != 3 || st.OtherSenders != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// POST /control throttles one sender for a while: its sends get the
// sender's 429 with a Retry-After covering the rest of it; others flow.
func TestThrottleSender(t *testing.T) {
	t.Parallel()
	c := newClock(base)
	s := newSim(t, sim.Config{Senders: map[string]int{"Mkt1": 100}, Now: c.Now})
	url := simURL(t, s)

	var cs sim.ControlState
	if status, _ := postJSON(t, url, "/control", `{"throttle_sender":{"from":"Mkt1","for":"5s"}}`, &cs); status != 200 ||
		!cs.SendersThrottled["Mkt1"].Equal(base.Add(5*time.Second)) {
		t.Fatalf("POST /control: %d %+v", status, cs)
	}
	want(t, sendFrom(t, url, "Mkt1"), 429, "5", httpprov.ScopeSender)
	want(t, sendFrom(t, url, "Mkt2"), 200, "", "")
	c.Add(2100 * time.Millisecond)
	want(t, sendFrom(t, url, "Mkt1"), 429, "3", httpprov.ScopeSender)
	if st := s.Stats(); !st.Senders["Mkt1"].ThrottledTil.Equal(base.Add(5*time.Second)) || st.Senders["Mkt1"].Rejected429 != 2 {
		t.Fatalf("stats %+v", st.Senders)
	}
	c.Set(base.Add(5 * time.Second))
	want(t, sendFrom(t, url, "Mkt1"), 200, "", "")

	// A sender seen for the first time can be throttled; clear lifts it.
	postJSON(t, url, "/control", `{"throttle_sender":{"from":"Mkt3","for":60}}`, nil)
	want(t, sendFrom(t, url, "Mkt3"), 429, "60", httpprov.ScopeSender)
	var cleared sim.ControlState
	postJSON(t, url, "/control", `{"clear":true}`, &cleared)
	if len(cleared.SendersThrottled) != 0 {
		t.Fatalf("after clear: %+v", cleared)
	}
	want(t, sendFrom(t, url, "Mkt3"), 200, "", "")

	for _, b := range []string{`{"throttle_sender":{"from":"Mkt1","for":"-1s"}}`, `{"throttle_sender":{"for":"1s"}}`,
		`{"throttle_sender":{"from":"Mkt1","for":"1s","x":1}}`} {
		var e httpprov.ErrorResponse
		if status, _ := postJSON(t, url, "/control", b, &e); status != 400 || !strings.Contains(e.Error, "throttle_sender") && !strings.Contains(e.Error, "unknown field") {
			t.Errorf("POST /control %s: %d %q, want 400 naming the field", b, status, e.Error)
		}
	}
}

// The simulator tracks the configured senders and at most MaxSeenSenders
// others; sends from senders past that are counted together.
func TestSendersBounded(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{Senders: map[string]int{"Mkt1": 10}})
	url := simURL(t, s)
	for i := range sim.MaxSeenSenders + 5 {
		want(t, sendFrom(t, url, fmt.Sprintf("S%d", i)), 200, "", "")
	}
	var e httpprov.ErrorResponse
	if status, _ := postJSON(t, url, "/control", `{"throttle_sender":{"from":"Late","for":"1s"}}`, &e); status != 400 {
		t.Fatalf("throttling an untracked sender past the bound: %d", status)
	}
	st := s.Stats()
	if len(st.Senders) != 1+sim.MaxSeenSenders || st.OtherSenders != 5 || st.Accepted != sim.MaxSeenSenders+5 {
		t.Fatalf("%d senders, %d other, %d accepted", len(st.Senders), st.OtherSenders, st.Accepted)
	}
	s.Reset()
	if st := s.Stats(); len(st.Senders) != 1 || st.OtherSenders != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}

// A sender's 429s are 429s of the account too: they count toward the
// suspension like any other.
func TestSender429sCountTowardSuspension(t *testing.T) {
	t.Parallel()
	c := newClock(base)
	s := newSim(t, sim.Config{Senders: map[string]int{"Mkt1": 1}, SuspendAfter: 2, SuspendFor: time.Minute, Now: c.Now})
	url := simURL(t, s)
	want(t, sendFrom(t, url, "Mkt1"), 200, "", "")
	for range 3 {
		want(t, sendFrom(t, url, "Mkt1"), 429, "1", httpprov.ScopeSender)
	}
	want(t, sendFrom(t, url, "Mkt2"), 403, "60", "")
}

func TestSendersValidation(t *testing.T) {
	t.Parallel()
	for _, senders := range []map[string]int{{"": 1}, {"Mkt1": -1}} {
		if _, err := sim.New(sim.Config{Senders: senders}); err == nil || !strings.Contains(err.Error(), "senders") {
			t.Errorf("New(senders %v): %v, want an error naming senders", senders, err)
		}
	}
}
