package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"smsgw/internal/logtest"
)

// demoNumber matches any recipient of the demo's own traffic, whole:
// its Japanese mobiles and its premium-rate pumping targets.
var demoNumber = regexp.MustCompile(`81[789]0\d{8}|44909\d{7}`)

// demoBodies are the bodies the demo's traffic sends.
var demoBodies = []string{"Winter sale", "Your order has shipped", "Your login code is 482913", "482913"}

// TestDemoRunLeaksNoNumberOrBody runs the whole demo (gateway, simulator,
// campaign, transactional and OTP trickle, pumping attempts) and checks
// that its logs at info level, every admin API answer and everything the
// dashboard loads hold no full recipient number and no message body.
func TestDemoRunLeaksNoNumberOrBody(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for several seconds")
	}
	var stdout, stderr logtest.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Listen: "127.0.0.1:0", Campaign: 300, OTPEvery: 50 * time.Millisecond,
			TxnEvery: 100 * time.Millisecond, Limit: 100, Every: time.Second, Verbose: true}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	}()
	base := ""
	baseRE := regexp.MustCompile(`gateway +(http://\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for base == "" {
		if m := baseRE.FindStringSubmatch(stdout.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the demo printed no gateway address:\n%s\n%s", stdout.String(), stderr.String())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+keyAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, b)
		}
		return string(b)
	}
	// Let every kind of traffic flow, pumping attempts refused included.
	var stats struct {
		Protection struct {
			Refused map[string]int64 `json:"refused"`
		} `json:"protection"`
	}
	for {
		if err := json.Unmarshal([]byte(get("/v1/admin/stats")), &stats); err != nil {
			t.Fatal(err)
		}
		if stats.Protection.Refused["number_type"] >= 3 && strings.Count(stdout.String(), "sent:") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pumping refusals in the stats: %+v\n%s", stats, stdout.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One recipient of the demo on the suppression list, so its answers
	// are read with an entry in them.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/admin/suppressions",
		strings.NewReader(`{"to":"`+phone(3)+`","reason":"opted out"}`))
	req.Header.Set("Authorization", "Bearer "+keyAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	added, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()

	answers := map[string]string{"POST /v1/admin/suppressions": string(added)}
	for _, path := range []string{"/v1/admin/stats", "/v1/admin/history", "/v1/admin/dead-letters",
		"/v1/admin/suppressions", "/metrics", "/dashboard/", "/dashboard/app.js"} {
		answers["GET "+path] = get(path)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
	done <- nil
	answers["logs"] = stderr.String()
	if !strings.Contains(answers["logs"], "level=INFO") {
		t.Fatalf("the demo logged nothing at info level:\n%s", answers["logs"])
	}
	// A sample value is a float whose digits can spell a number by chance
	// (0.000819051199999 once did): of /metrics, the names, labels and
	// comments are read, not the values.
	answers["GET /metrics"] = metricsWithoutValues(answers["GET /metrics"])
	for what, text := range answers {
		if m := demoNumber.FindString(text); m != "" {
			t.Errorf("%s holds the full number %s", what, m)
		}
		for _, b := range demoBodies {
			if strings.Contains(text, b) {
				t.Errorf("%s holds the message body %q", what, b)
			}
		}
	}
	t.Logf("checked %d bytes of logs and %d answers; stats: %v", len(answers["logs"]), len(answers)-1, stats.Protection.Refused)
}

// metricsWithoutValues keeps of a Prometheus text exposition the comment
// lines whole and of each sample line its name and labels, dropping the
// value and timestamp after them.
func metricsWithoutValues(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		if line != "" && !strings.HasPrefix(line, "#") {
			if i := strings.LastIndexByte(line, '}'); i >= 0 {
				line = line[:i+1]
			} else if i := strings.IndexByte(line, ' '); i >= 0 {
				line = line[:i]
			}
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestMetricsWithoutValues(t *testing.T) {
	in := "# HELP a one 819012345678\na_sum 0.000819051199999\nb{to=\"819012345678\"} 819012345679 1700000000\n"
	got := metricsWithoutValues(in)
	if strings.Contains(got, "819012345679") || strings.Contains(got, "819051199999") {
		t.Errorf("a value was kept: %q", got)
	}
	if strings.Count(got, "819012345678") != 2 {
		t.Errorf("a comment or a label was dropped: %q", got)
	}
}
