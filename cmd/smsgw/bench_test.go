package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"smsgw/internal/bench"
)

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
		{"--start-phase", "1"}, {"extra"},
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
}
