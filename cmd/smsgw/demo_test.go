package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

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
