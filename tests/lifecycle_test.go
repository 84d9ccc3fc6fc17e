package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/redistest"
)

// The delivery lifecycle end to end: real gateway processes, the real
// simulator process posting signed receipts back (twice each, to either
// replica, some before the send's answer), a replica killed with SIGKILL.

const lifecycleSecret = "e2e-receipt-secret-0123456789"

// receiptSim starts the simulator posting receipts to the gateways at addrs.
func receiptSim(t *testing.T, addrs []string, extra ...string) *simProc {
	t.Helper()
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "http://" + a + "/v1/receipts/http"
	}
	args := append([]string{"--limit", "200", "--receipt-url", strings.Join(urls, ","),
		"--receipt-delay", "300ms", "--undelivered-share", "0.2", "--receipt-duplicates", "1",
		"--early-receipts", "0.15"}, extra...)
	return startSim(t, args...)
}

type receiptRecord struct {
	Reference string `json:"reference"`
	Receipt   string `json:"receipt"`
}

type receiptStats struct {
	Posted  int `json:"receipts_posted"`
	Failed  int `json:"receipts_failed"`
	Dropped int `json:"receipts_dropped"`
}

// waitReceipts waits until the simulator has posted every receipt of the
// messages it accepted (1+duplicates each) and returns the receipt status
// of each reference.
func waitReceipts(t *testing.T, sim *simProc, ids []string, copies int, d time.Duration) map[string]string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var recs []receiptRecord
		getJSON(t, sim.URL+"/accepted", &recs)
		var st receiptStats
		getJSON(t, sim.URL+"/stats", &st)
		want := map[string]string{}
		for _, r := range recs {
			if prev, ok := want[r.Reference]; ok && prev != r.Receipt {
				t.Fatalf("%s accepted twice with different receipts", r.Reference)
			}
			want[r.Reference] = r.Receipt
		}
		if len(want) >= len(ids) && st.Posted+st.Failed+st.Dropped >= copies*len(recs) {
			if st.Failed != 0 || st.Dropped != 0 {
				t.Fatalf("receipts: %d posted, %d given up, %d dropped", st.Posted, st.Failed, st.Dropped)
			}
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %s: %d of %d messages accepted, receipts %+v of %d", d, len(want), len(ids), st, copies*len(recs))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type messageStatus struct {
	Status string `json:"status"`
}

func getStatus(t *testing.T, gw *gwProc, key, id string) (string, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/v1/messages/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", id, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var m messageStatus
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return m.Status, resp.StatusCode
}

// checkFinal waits until every id reads, through gw, the status its
// receipt gave, and fails naming those that do not.
func checkFinal(t *testing.T, gw *gwProc, ids []string, want map[string]string, d time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := map[string]int{}
		var wrong []string
		for _, id := range ids {
			st, code := getStatus(t, gw, keyTxn, id)
			got[st]++
			if code != http.StatusOK || st != want[id] {
				wrong = append(wrong, fmt.Sprintf("%s: %s (receipt %q)", id, st, want[id]))
			}
		}
		if len(wrong) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages do not read their receipt's status (%v), e.g. %s", len(wrong), len(ids), got, wrong[:min(5, len(wrong))])
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// metricSum adds the samples of one metric on gw's /metrics.
func metricSum(t *testing.T, gw *gwProc, name string) float64 {
	t.Helper()
	var sum float64
	eachSample(t, gw, func(series string, v float64) {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			sum += v
		}
	})
	return sum
}

// eachSample calls f with every sample of gw's /metrics.
func eachSample(t *testing.T, gw *gwProc, f func(series string, v float64)) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		series, v, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		f(series, x)
	}
}

func postForged(t *testing.T, gw *gwProc, id string) int {
	t.Helper()
	b, _ := json.Marshal(httpprov.ReceiptBody{Reference: id, Status: "failed"})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw.URL+"/v1/receipts/http", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpprov.HeaderReceiptSignature, httpprov.SignReceipt("not-the-secret", b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestReceiptsEmbeddedRestart: the same story on the embedded store, the
// one gateway killed with SIGKILL mid-run and started again on its file;
// receipts that came while it was down are posted again by the simulator.
func TestReceiptsEmbeddedRestart(t *testing.T) {
	skipShort(t)
	t.Setenv("SMSGW_PROVIDER_RECEIPT_SECRET", lifecycleSecret)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sim := receiptSim(t, []string{addr})
	dir := t.TempDir()
	o := gwOptions{Account: "e2e", SimURL: sim.URL, Lease: 2 * time.Second}
	gw := startGatewayIn(t, "gw", addr, dir, o)
	ids := postBatch(t, gw, keyTxn, "transactional", 0, 600)
	sim.WaitAccepted(t, 200, 60*time.Second)
	gw.Kill()
	time.Sleep(time.Second) // receipts fail meanwhile and are posted again
	gw = startGatewayIn(t, "gw-restarted", addr, dir, o)
	want := waitReceipts(t, sim, ids, 2, 120*time.Second)
	got := checkFinal(t, gw, ids, want, 60*time.Second)
	t.Logf("600 messages, embedded, killed after 200 sends and restarted: final %v", got)
}

// TestCancelRacesSendLoop: producers cancel messages while the send loop
// takes them: each cancel is either 200 (the message reads canceled and
// never reached the provider) or 409 (it was sent exactly once).
func TestCancelRacesSendLoop(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "200")
	o := gwOptions{RedisAddr: redistest.Addr(t), Account: redistest.Prefix(t), SimURL: sim.URL}
	gws := []*gwProc{startGateway(t, "gw1", o), startGateway(t, "gw2", o)}
	ids := postBatch(t, gws[0], keyTxn, "transactional", 0, 400)
	codes := make([]int, len(ids))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(ids); i += 4 {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, gws[i%2].URL+"/v1/messages/"+ids[i], nil)
				req.Header.Set("Authorization", "Bearer "+keyTxn)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("DELETE: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				codes[i] = resp.StatusCode
			}
		})
	}
	wg.Wait()
	canceled := map[string]bool{}
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			canceled[ids[i]] = true
		case http.StatusConflict:
		default:
			t.Fatalf("DELETE %s: %d", ids[i], c)
		}
	}
	sim.WaitAccepted(t, len(ids)-len(canceled), 60*time.Second)
	time.Sleep(time.Second) // a canceled message sent late would arrive by now
	sent := map[string]int{}
	for _, r := range sim.Accepted(t) {
		sent[r.Reference]++
	}
	for _, id := range ids {
		st, _ := getStatus(t, gws[1], keyTxn, id)
		switch {
		case canceled[id] && (sent[id] != 0 || st != "canceled"):
			t.Errorf("%s: cancel answered 200, yet sent %d times, reads %s", id, sent[id], st)
		case !canceled[id] && (sent[id] != 1 || st != "sent"):
			t.Errorf("%s: cancel answered 409, sent %d times, reads %s", id, sent[id], st)
		}
	}
	if len(canceled) == 0 || len(canceled) == len(ids) {
		t.Errorf("%d of %d canceled: the race was not run", len(canceled), len(ids))
	}
	t.Logf("cancel racing the send loop on 2 replicas: %d canceled, %d sent, each exactly once", len(canceled), len(ids)-len(canceled))
}
