package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/redistest"
)

// Load generator settings: 64 connections; the two phases alternate in
// short rounds so that load from other processes on the machine weighs on
// both alike.
const (
	benchConns    = 64
	benchRounds   = 4
	benchHealthz  = 500 * time.Millisecond
	benchMessages = 750 * time.Millisecond
)

type loadResult struct {
	ok, other int
	elapsed   time.Duration
	latencies []time.Duration
	perSecond float64
	p50, p99  time.Duration
}

// add merges another round into r and recomputes the summary.
func (r *loadResult) add(o loadResult) {
	r.ok += o.ok
	r.other += o.other
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	slices.Sort(r.latencies)
	if n := len(r.latencies); n > 0 {
		r.p50 = r.latencies[n/2]
		r.p99 = r.latencies[min(n-1, n*99/100)]
	}
	r.perSecond = float64(r.ok) / r.elapsed.Seconds()
}

// load runs benchConns workers, each on its own keep-alive connection,
// sending newReq until d has passed; it counts answers with status want.
func load(b *testing.B, client *http.Client, d time.Duration, want int, newReq func() *http.Request) loadResult {
	b.Helper()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		res       loadResult
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for range benchConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			ok, other := 0, 0
			for ctx.Err() == nil {
				t0 := time.Now()
				resp, err := client.Do(newReq())
				if err != nil {
					other++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if resp.StatusCode == want {
					ok++
				} else {
					other++
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			res.ok += ok
			res.other += other
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.latencies = latencies
	return res
}

// BenchmarkIngress measures, in one run per store, accepted POST
// /v1/messages per second and GET /healthz per second on the same process
// with 64 connections, and reports their ratio and the p99 latencies.
// Run it once: go test ./internal/gateway -run '^$' -bench Ingress -benchtime 1x
// (one iteration: each round runs for a fixed time of its own).
func BenchmarkIngress(b *testing.B) {
	for _, m := range modes {
		b.Run(string(m), func(b *testing.B) {
			h := start(b, m, func(c *config.Config) {
				c.Producers[0].Rate, c.Producers[0].Burst = 1e6, 1_000_000
				if m == redisMode {
					// A private Redis, away from other tests' load.
					c.Redis.Addr = redistest.StartServer(b, redistest.ServerOptions{}).Addr
				}
			})
			tr := &http.Transport{MaxIdleConnsPerHost: benchConns, MaxConnsPerHost: benchConns}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			body, _ := json.Marshal(msg("marketing", "reference", "bench"))
			var health, posts loadResult
			for range benchRounds {
				health.add(load(b, client, benchHealthz, http.StatusOK, func() *http.Request {
					r, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, h.base+"/healthz", nil)
					return r
				}))
				posts.add(load(b, client, benchMessages, http.StatusAccepted, func() *http.Request {
					r, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, h.base+"/v1/messages", bytes.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set("Authorization", "Bearer "+keyNotify)
					return r
				}))
			}
			if posts.other > 0 {
				b.Errorf("%d POSTs not accepted", posts.other)
			}
			b.ReportMetric(posts.perSecond, "accepted/s")
			b.ReportMetric(health.perSecond, "healthz/s")
			b.ReportMetric(posts.perSecond/health.perSecond, "ratio")
			b.ReportMetric(float64(posts.p99.Microseconds())/1000, "post-p99-ms")
			b.ReportMetric(float64(health.p99.Microseconds())/1000, "healthz-p99-ms")
			b.Logf("%s: %.0f accepted/s (p50 %v, p99 %v), %.0f healthz/s (p99 %v), ratio %.2f",
				m, posts.perSecond, posts.p50, posts.p99, health.perSecond, health.p99, posts.perSecond/health.perSecond)
		})
	}
}

// BenchmarkPostMessageHandler is the CPU cost of one accepted POST
// /v1/messages through the whole handler chain, without the network.
func BenchmarkPostMessageHandler(b *testing.B) {
	h := start(b, embeddedMode, func(c *config.Config) {
		c.Producers[0].Rate, c.Producers[0].Burst = 1e6, 1_000_000
	})
	handler := h.app.Handler()
	body, _ := json.Marshal(msg("marketing", "reference", "bench"))
	b.ReportAllocs()
	b.SetParallelism(benchConns / 2) // 64 goroutines on 2 cores: group commits fill up
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, "/v1/messages", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+keyNotify)
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			if w.Code != http.StatusAccepted {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	})
}
