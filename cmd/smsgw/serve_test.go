package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/bench"
	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/logtest"
	"smsgw/internal/testclient"
)

// A SIGTERM whose shutdown_timeout passes while a send is in progress cuts
// the send short and puts its message back without spending an attempt
// (docs/operations.md section 7): smsgw serve says so in one WARN and
// exits 0, not "gateway failed" and 1. Its JSON log writes durations as
// "30s", not nanoseconds.
func TestServeStopCuttingSendsShortExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway")
	}
	got := make(chan struct{}, 16)
	release := make(chan struct{})
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select { // never answers while the gateway runs
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer prov.Close()
	defer close(release)

	dir := t.TempDir()
	path := filepath.Join(dir, "smsgw.yaml")
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
store: {path: %q}
provider: {url: %q}
producers: [{name: app, key: app-key-0123456789ab, classes: [transactional], senders: [Acme], rate: 100, burst: 10}]
dispatch: {shutdown_timeout: 300ms}
log: {level: info, format: json}
`, filepath.Join(dir, "data"), prov.URL+"/send")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	var stderr logtest.Buffer
	code := make(chan int, 1)
	go func() { code <- runCommand(ctx, "serve", []string{"--config", path}, io.Discard, &stderr) }()

	addr := ""
	for deadline := time.Now().Add(10 * time.Second); addr == ""; {
		for line := range strings.Lines(stderr.String()) {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway listening" {
				addr = rec.Addr
			}
		}
		if time.Now().After(deadline) {
			sigterm()
			t.Fatalf("no 'gateway listening' line (exit %d):\n%s", <-code, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	req := testclient.New(t, http.MethodPost, "http://"+addr+"/v1/messages",
		`{"to":"+819012345678","body":"hello","class":"transactional"}`, "Authorization", "Bearer app-key-0123456789ab")
	if resp := testclient.Do(t, nil, req); resp.Status != http.StatusAccepted {
		t.Fatalf("POST /v1/messages: %d", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("the provider got no send:\n%s", stderr.String())
	}

	sigterm()
	if c := <-code; c != 0 {
		t.Errorf("exit %d, want 0", c)
	}
	logs := stderr.String()
	var warns []string
	for line := range strings.Lines(logs) {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		switch rec.Level {
		case "ERROR":
			t.Errorf("ERROR logged: %s", line)
		case "WARN":
			warns = append(warns, rec.Msg)
		}
	}
	if !slices.Contains(warns, "stopped; 1 send cut short was put back") {
		t.Errorf("no WARN saying the send was cut short and put back; WARNs: %q\n%s", warns, logs)
	}
	if !strings.Contains(logs, `"lease":"30s"`) || strings.Contains(logs, `"lease":30000000000`) {
		t.Errorf("the lease is not logged as \"30s\":\n%s", logs)
	}
}

// The exit code of serve after the gateway ran: only sends cut short
// (however gateway.Run joins or wraps them) are a clean stop.
func TestStoppedExitCode(t *testing.T) {
	t.Parallel()
	cut := func(n int) error { return &dispatch.CutShortError{Sends: n, Cause: context.DeadlineExceeded} }
	other := errors.New("http shutdown: context deadline exceeded")
	for _, tc := range []struct {
		name  string
		err   error
		code  int
		level string // of the one line logged; "" none
		msg   string
	}{
		{"clean stop", nil, 0, "", ""},
		{"sends cut short", cut(3), 0, "WARN", "stopped; 3 sends cut short were put back"},
		{"as gateway.Run joins it", errors.Join(nil, errors.Join(cut(2))), 0, "WARN", "stopped; 2 sends cut short were put back"},
		{"wrapped", fmt.Errorf("gateway: %w", cut(1)), 0, "WARN", "stopped; 1 send cut short was put back"},
		{"with another stop error", errors.Join(nil, errors.Join(other, cut(2))), 1, "ERROR", "gateway failed"},
		{"another stop error", errors.Join(nil, errors.Join(other)), 1, "ERROR", "gateway failed"},
		{"the deadline alone", context.DeadlineExceeded, 1, "ERROR", "gateway failed"},
		{"the sentinel named in another error", fmt.Errorf("x: %w", errors.Join(dispatch.ErrSendsCutShort, other)), 1, "ERROR", "gateway failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := newLogger(&buf, config.LogConfig{Level: "info", Format: "json"})
			if c := stopped(log, tc.err); c != tc.code {
				t.Errorf("exit %d, want %d", c, tc.code)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if tc.level == "" {
				if buf.Len() > 0 {
					t.Errorf("logged %s", buf.String())
				}
				return
			}
			var rec struct{ Level, Msg string }
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.Level != tc.level || rec.Msg != tc.msg {
				t.Errorf("logged %q, want one %s %q", buf.String(), tc.level, tc.msg)
			}
		})
	}
	if !errors.Is(cut(1), dispatch.ErrSendsCutShort) || !errors.Is(cut(1), context.DeadlineExceeded) {
		t.Error("a CutShortError is not both ErrSendsCutShort and its cause")
	}
}

// Every logger a command builds writes durations as Go durations, in
// groups too, and leaves other values (masked numbers) as they are.
func TestLoggersWriteDurationsAsText(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := newLogger(&buf, config.LogConfig{Level: "info", Format: format})
		log.Info("x", "lease", 30*time.Second, slog.Group("g", "wait", 1500*time.Microsecond), "to", "+81901234****", "n", 7)
		s := buf.String()
		want := []string{`"lease":"30s"`, `"g":{"wait":"1.5ms"}`, `"to":"+81901234****"`, `"n":7`}
		if format == "text" {
			want = []string{"lease=30s", "g.wait=1.5ms", "to=+81901234****", "n=7"}
		}
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("%s: %q lacks %s", format, s, w)
			}
		}
		if strings.Contains(s, "30000000000") {
			t.Errorf("%s: nanoseconds in %q", format, s)
		}
	}
	var buf bytes.Buffer
	newTextLogger(&buf, slog.LevelInfo).Info("x", "lease", 30*time.Second)
	if !strings.Contains(buf.String(), "lease=30s") {
		t.Errorf("sim/bench logger: %q", buf.String())
	}
}

// smsgw bench prints the comparison of docs/design.md section 8.
func TestBenchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench against the shared Redis for about 3 s")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--duration", "1s", "--pods", "4", "--strategies", "gcra"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	for _, want := range []string{"strategy", "window", "429s", "max/1s", "rate/s", "otp p99", "redis calls/msg", "gcra", "sliding", "fixed"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "per-pod ") {
		t.Errorf("ran a strategy not asked for:\n%s", s)
	}

	out.Reset()
	errb.Reset()
	if code := run([]string{"bench", "--duration", "500ms", "--pods", "2", "--strategies", "gcra", "--window", "sliding", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errb.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Results) != 1 || rep.Results[0].Strategy != bench.GCRA {
		t.Fatalf("--json: %v %s", err, out.String())
	}
}

func TestBenchCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "tumbling"}, {"--offset", "1.5"}, {"--strategies", "gcra,leaky"}, {"--pods", "0"},
		{"--start-phase", "1"}, {"extra"}, {"--scenario", "lanes"},
	} {
		var out, errb bytes.Buffer
		if c := run(append([]string{"bench"}, args...), &out, &errb); c != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, c, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if c := run([]string{"bench", "--redis", "192.0.2.1:6379", "--duration", "1s"}, &out, &errb); c != 1 || !strings.Contains(errb.String(), "loopback") {
		t.Errorf("remote redis: exit %d, stderr %q", c, errb.String())
	}
	errb.Reset()
	if c := run([]string{"bench", "--scenario", "sender-lanes", "--redis", "192.0.2.1:6379"}, &out, &errb); c != 1 || !strings.Contains(errb.String(), "loopback") {
		t.Errorf("sender lanes, remote redis: exit %d, stderr %q", c, errb.String())
	}
}

// The demo starts a real gateway and simulator, posts traffic and prints a
// summary in which every class got through with no 429.
func TestDemoSendsEveryClass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway for several seconds")
	}
	var out, errb bytes.Buffer
	code := run([]string{"demo", "--listen", "127.0.0.1:0", "--duration", "6s", "--campaign", "200",
		"--summary-every", "1s", "--otp-every", "300ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	lines := regexp.MustCompile(`sent: otp (\d+), transactional (\d+), marketing (\d+) .*\| 429s (\d+) `).FindAllStringSubmatch(out.String(), -1)
	if len(lines) == 0 {
		t.Fatalf("no summary lines:\n%s", out.String())
	}
	last := lines[len(lines)-1]
	for i, name := range []string{"otp", "transactional", "marketing"} {
		if n, _ := strconv.Atoi(last[i+1]); n == 0 {
			t.Errorf("no %s message reached the provider:\n%s", name, out.String())
		}
	}
	if last[4] != "0" {
		t.Errorf("the provider answered %s 429s", last[4])
	}
}
