package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"smsgw/internal/provider/sim"
)

// traffic posts the demo's messages through the public API, as producers
// would, and prints the summary.
type traffic struct {
	base   string
	client *http.Client
	n      atomic.Int64 // transactional messages posted
	otps   atomic.Int64 // OTP requests posted, pumping attempts included
	otpOK  atomic.Int64
	otpNo  atomic.Int64
	pumped atomic.Int64 // pumping attempts protection refused
}

func (t *traffic) post(ctx context.Context, path, key string, body any) (int, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // drained so the connection is reused
	_ = resp.Body.Close()                 // read-only body: nothing to lose
	return resp.StatusCode, nil
}

// phone is the i-th of 80 million distinct Japanese mobile numbers.
func phone(i int) string { return fmt.Sprintf("+8190%08d", 10000000+i%80000000) }

// otpPhone is the i-th of 240 million distinct Japanese mobile numbers,
// taken in turn from the three mobile ranges (+8170, +8180, +8190): real
// logins come from every range, so no range takes the share of OTPs that
// raises the velocity alarm (protection.prefix_alarm, at most 1/3 here).
func otpPhone(i int) string {
	return fmt.Sprintf("+81%c0%08d", "789"[i%3], 10000000+(i/3)%80000000)
}

// premium is the i-th of 10 million UK premium-rate numbers (09...): the
// targets of an SMS pumping attack, refused by protection.
func premium(i int) string { return fmt.Sprintf("+44909%07d", i%10000000) }

// campaign posts n marketing messages in batches of 1,000.
func (t *traffic) campaign(ctx context.Context, n int) error {
	for off := 0; off < n; off += 1000 {
		k := min(1000, n-off)
		msgs := make([]map[string]string, k)
		for i := range msgs {
			msgs[i] = map[string]string{"to": phone(off + i), "class": "marketing",
				"body": "Winter sale: 20% off everything this weekend. Reply STOP to opt out."}
		}
		code, err := t.post(ctx, "/v1/messages/batch", keyNotify, map[string]any{"messages": msgs})
		if err != nil {
			return err
		}
		if code >= 300 && code != http.StatusMultiStatus {
			return fmt.Errorf("batch answered %d", code)
		}
	}
	return nil
}

// loop calls f every period until ctx ends; a period of 0 never calls it.
func (t *traffic) loop(ctx context.Context, every time.Duration, f func(context.Context)) {
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f(ctx)
		}
	}
}

func (t *traffic) transactional(ctx context.Context) {
	n := int(t.n.Add(1))
	_, _ = t.post(ctx, "/v1/messages", keyNotify, map[string]string{"to": phone(900000 + n),
		"class": "transactional", "body": "Your order has shipped."})
}

func (t *traffic) otp(ctx context.Context) {
	n := int(t.otps.Add(1))
	if n%5 == 0 {
		// One OTP request in five is a pumping attempt to a premium-rate
		// number: the gateway refuses it before the provider sees it.
		code, err := t.post(ctx, "/v1/otp", keyLogin, map[string]string{"to": premium(n), "body": "Your login code is 482913"})
		if err == nil && code == http.StatusUnprocessableEntity {
			t.pumped.Add(1)
		}
		return
	}
	code, err := t.post(ctx, "/v1/otp", keyLogin, map[string]string{"to": otpPhone(n), "body": "Your login code is 482913"})
	if err == nil && code == http.StatusOK {
		t.otpOK.Add(1)
	} else if ctx.Err() == nil {
		t.otpNo.Add(1)
	}
}

// summary prints one line: what the provider accepted per class, its 429s,
// the queue depth, and OTP latency from gateway arrival to the provider.
func (t *traffic) summary(ctx context.Context, w io.Writer, s *sim.Sim, elapsed time.Duration) error {
	st := s.Stats()
	var depth struct {
		Classes map[string]struct {
			Ready     int64 `json:"ready"`
			Scheduled int64 `json:"scheduled"`
			Leased    int64 `json:"leased"`
		} `json:"classes"`
	}
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, t.base+"/v1/admin/stats", nil)
	req.Header.Set("Authorization", "Bearer "+keyAdmin)
	if resp, err := t.client.Do(req); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&depth) // no figures: the line shows zeros
		_ = resp.Body.Close()                         // read-only body: nothing to lose
	}
	var sent, queued []string
	for _, c := range []string{"otp", "transactional", "marketing"} {
		sent = append(sent, fmt.Sprintf("%s %d", c, st.PerClass[c]))
		q := depth.Classes[c]
		queued = append(queued, fmt.Sprintf("%s %d", c, q.Ready+q.Scheduled+q.Leased))
	}
	lat := st.Latency["otp"]
	_, err := fmt.Fprintf(w, "[%5.0fs] sent: %s | queued: %s | 429s %d | worst 1 s %d/%d | OTP p50 %.1f ms p99 %.1f ms (%d ok, %d refused) | receipts %d | pumping blocked %d\n",
		elapsed.Seconds(), strings.Join(sent, ", "), strings.Join(queued, ", "), st.Rejected429, st.MaxInAny1s, st.Limit,
		lat.P50, lat.P99, t.otpOK.Load(), t.otpNo.Load(), st.ReceiptsPosted, t.pumped.Load())
	return err
}

// report prints the summary line every interval until ctx ends, then once
// more. It stops early only when stdout cannot be written.
func (t *traffic) report(ctx context.Context, w io.Writer, s *sim.Sim, every time.Duration) error {
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := t.summary(ctx, w, s, time.Since(start)); err != nil {
				return err
			}
			_, err := fmt.Fprintln(w, "stopping")
			return err
		case <-tick.C:
			if err := t.summary(ctx, w, s, time.Since(start)); err != nil {
				return err
			}
		}
	}
}
