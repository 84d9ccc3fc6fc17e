package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
	"smsgw/internal/testclient"
)

// startSim runs smsgw sim with args and returns its address, and a function
// that stops it and returns its final stats.
func startSim(t *testing.T, args ...string) (string, func() sim.Stats) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	var errb bytes.Buffer // written only by the command; read after it returns
	code := make(chan int, 1)
	go func() {
		code <- runCommand(ctx, "sim", append([]string{"--listen", "127.0.0.1:0"}, args...), pw, &errb)
		_ = pw.Close()
	}()
	out := bufio.NewReader(pr)
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "sim listening on http://") {
		t.Fatalf("first line %q, %v", line, err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "sim listening on "))
	rest := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(out); rest <- b }()
	return url, func() sim.Stats {
		t.Helper()
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if c := <-code; c != 0 {
			t.Fatalf("exit %d: %s", c, errb.String())
		}
		var st sim.Stats
		if err := json.Unmarshal(<-rest, &st); err != nil {
			t.Fatalf("final stats: %v", err)
		}
		return st
	}
}

// simSend posts one send from the sender from and returns the status and
// the 429's scope.
func simSend(t *testing.T, url, from string) (int, string) {
	t.Helper()
	resp := testclient.PostJSON(t, url+"/send", `{"to":"+819012345678","body":"hi","reference":"r1","from":"`+from+`"}`)
	var e httpprov.ErrorResponse
	_ = json.Unmarshal(resp.Body, &e) // a 200 has no scope
	return resp.Status, e.Scope
}

// smsgw sim serves the generic protocol, enforces --limit, and prints its
// address first and its stats last.
func TestSimCommand(t *testing.T) {
	url, stop := startSim(t, "--limit", "2", "--suspend-after", "-1")
	var statuses []int
	for range 3 {
		status, _ := simSend(t, url, "")
		statuses = append(statuses, status)
	}
	// Three sends well inside one second against --limit 2.
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
		t.Fatalf("statuses %v, want [200 200 429]", statuses)
	}
	if st := stop(); st.Accepted != 2 || st.Rejected429 != 1 || st.Duplicates != 1 || st.Limit != 2 {
		t.Fatalf("final stats %+v", st)
	}
}

// --senders limits each named sender; its 429 says "scope": "sender".
func TestSimCommandSenders(t *testing.T) {
	url, stop := startSim(t, "--limit", "10", "--senders", "Mkt1=1, Mkt2=40", "--suspend-after", "-1")
	if s, _ := simSend(t, url, "Mkt1"); s != 200 {
		t.Fatalf("first send from Mkt1: %d", s)
	}
	if s, scope := simSend(t, url, "Mkt1"); s != 429 || scope != httpprov.ScopeSender {
		t.Fatalf("second send from Mkt1 within its second: %d %q, want 429 sender", s, scope)
	}
	if s, _ := simSend(t, url, "Mkt2"); s != 200 {
		t.Fatalf("send from Mkt2: %d", s)
	}
	st := stop()
	if st.Senders["Mkt1"].Limit != 1 || st.Senders["Mkt1"].Rejected429 != 1 || st.Senders["Mkt2"].Limit != 40 || st.Accepted != 2 {
		t.Fatalf("final stats %+v", st)
	}
}

func TestSimCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "tumbling"}, {"--senders", "Mkt1"}, {"--senders", "Mkt1=0"}, {"--senders", "=3"}, {"--senders", "A=1,A=2"}, {"--offset", "1.5"}, {"--retry-after", "0"}, {"--fail-rate", "2"}, {"extra"},
	} {
		var out, errb bytes.Buffer
		if c := runCommand(context.Background(), "sim", append([]string{"--listen", "127.0.0.1:0"}, args...), &out, &errb); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}
