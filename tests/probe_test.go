package tests

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbeMemory measures what abuse probes cost one embedded replica:
// its RSS before and after 300 batches of 1,000 invalid items (13 KB each,
// distinct Idempotency-Keys), then after 10,000 requests with random 30 KB
// methods, and the size of /metrics. It is a measurement, not a check of
// a bound, so it runs only with PROBE_MEMORY=1; PROBE_BIN runs another
// build (the figures "before" in docs/scale.md section 7 come from the
// commit before the bounds).
func TestProbeMemory(t *testing.T) {
	if os.Getenv("PROBE_MEMORY") != "1" {
		t.Skip("a measurement: run with PROBE_MEMORY=1")
	}
	if bin := os.Getenv("PROBE_BIN"); bin != "" {
		old := smsgwBin
		smsgwBin = bin
		t.Cleanup(func() { smsgwBin = old })
	}
	sim := startSim(t)
	gw := startGateway(t, "gw", gwOptions{Account: "probe", SimURL: sim.URL})
	pid := gw.cmd.Process.Pid
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	rss0 := rssKB(t, pid)

	items := strings.TrimSuffix(strings.Repeat(`{"to":"+12"},`, 1000), ",")
	batch := []byte(`{"messages":[` + items + `]}`)
	var answered atomic.Int64
	run(t, 8, 300, func(i int) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw.URL+"/v1/messages/batch", bytes.NewReader(batch))
		req.Header.Set("Authorization", "Bearer "+keyTxn)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "probe-"+strconv.Itoa(i))
		if resp, err := client.Do(req); err == nil {
			n, _ := io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			answered.Add(n)
		}
	})
	rss1 := rssKB(t, pid)

	run(t, 16, 10000, func(int) {
		method := "M" + strings.ToUpper(rand.Text()) + strings.Repeat("X", 30<<10)
		req, _ := http.NewRequestWithContext(t.Context(), method, gw.URL+"/v1/messages", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
	rss2 := rssKB(t, pid)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	t.Logf("batch of %d bytes; 300 refused batches answered %d MB in all", len(batch), answered.Load()>>20)
	t.Logf("RSS: start %d MB, after 300 refused batches %d MB, after 10,000 random 30 KB methods %d MB; /metrics %d KB",
		rss0>>10, rss1>>10, rss2>>10, len(metrics)>>10)
}

// run calls f(0..n-1) on workers goroutines.
func run(t *testing.T, workers, n int, f func(i int)) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// rssKB reads the resident set of pid from /proc, in KiB.
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
