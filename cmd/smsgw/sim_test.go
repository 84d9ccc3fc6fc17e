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

	"smsgw/internal/provider/sim"
)

// smsgw sim serves the generic protocol, enforces --limit, and prints its
// address first and its stats last.
func TestSimCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb bytes.Buffer // written only by the command; read after it returns
	code := make(chan int, 1)
	go func() {
		code <- runCommand(ctx, "sim", []string{"--listen", "127.0.0.1:0", "--limit", "2", "--suspend-after", "-1"}, pw, &errb)
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

	var statuses []int
	for range 3 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/send",
			strings.NewReader(`{"to":"+819012345678","body":"hi","reference":"r1"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
	// Three sends well inside one second against --limit 2.
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
		t.Fatalf("statuses %v, want [200 200 429]", statuses)
	}
	http.DefaultClient.CloseIdleConnections()

	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	var st sim.Stats
	if err := json.Unmarshal(<-rest, &st); err != nil {
		t.Fatalf("final stats: %v", err)
	}
	if st.Accepted != 2 || st.Rejected429 != 1 || st.Duplicates != 1 || st.Limit != 2 {
		t.Fatalf("final stats %+v", st)
	}
}

func TestSimCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "tumbling"}, {"--offset", "1.5"}, {"--retry-after", "0"}, {"--fail-rate", "2"}, {"extra"},
	} {
		var out, errb bytes.Buffer
		if c := runCommand(context.Background(), "sim", append([]string{"--listen", "127.0.0.1:0"}, args...), &out, &errb); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}
