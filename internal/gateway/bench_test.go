package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/config"
	"smsgw/internal/provider/sim"
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
// with 64 connections, and reports their ratio and the p99 latencies; then
// the POST p99 at a fixed offered load of fixedRate a second (open loop:
// latency counts from when a request was due, so a stall is not hidden by
// the clients waiting on it); and, with Redis, the Redis commands per
// accepted message (INFO commandstats on a private server, with what the
// idle process does meanwhile subtracted). Beside the ratio it reports the
// CPU time each answer costs (this process, and with Redis its private
// server: cpu-us/accept, cpu-us/healthz and their ratio cpu-ratio), which
// other load on the machine moves far less than the rates. Every POST carries its own
// Idempotency-Key and the producer has a max_outstanding, so each
// admission step runs.
// run it once: go test ./internal/gateway -run '^$' -bench Ingress -benchtime 1x
// (one iteration: each round runs for a fixed time of its own);
// SMSGW_BENCH_REDIS_NICE=-10 gives its Redis a core ahead of the rest
// (benchRedisNice).
func BenchmarkIngress(b *testing.B) {
	for _, m := range modes {
		b.Run(string(m), func(b *testing.B) {
			s := newSim(b, sim.Config{})
			c := testConfig(b, m, s.URL())
			c.Producers[0].Rate, c.Producers[0].Burst = 1e6, 1_000_000
			c.Producers[0].MaxOutstanding = 100_000_000
			cpu := processCPU
			if m == redisMode {
				// A private Redis, away from other tests' load.
				c.Redis.Addr = redistest.StartServer(b, redistest.ServerOptions{Nice: benchRedisNice(b)}).Addr
				rc := redis.NewClient(&redis.Options{Addr: c.Redis.Addr})
				defer func() { _ = rc.Close() }()
				cpu = func() time.Duration { return processCPU() + redistest.ServerCPU(b, rc) }
			}
			rtt := &redistest.RoundTrips{}
			h := startOpts(b, c, s, Options{RedisHook: rtt})
			tr := &http.Transport{MaxIdleConnsPerHost: benchConns, MaxConnsPerHost: benchConns}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			post := postRequest(h)
			var health, posts loadResult
			var healthCPU, postCPU time.Duration
			for range benchRounds {
				c0 := cpu()
				health.add(load(b, client, benchHealthz, http.StatusOK, func() *http.Request {
					r, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, h.base+"/healthz", nil)
					return r
				}))
				c1 := cpu()
				posts.add(load(b, client, benchMessages, http.StatusAccepted, post))
				healthCPU, postCPU = healthCPU+c1-c0, postCPU+cpu()-c1
			}
			if posts.other > 0 {
				b.Errorf("%d POSTs not accepted", posts.other)
			}
			fixed := offered(b, client, fixedRate, fixedFor, post)
			b.ReportMetric(posts.perSecond, "accepted/s")
			b.ReportMetric(health.perSecond, "healthz/s")
			b.ReportMetric(posts.perSecond/health.perSecond, "ratio")
			perHealth := float64(healthCPU.Nanoseconds()) / 1e3 / float64(health.ok+health.other)
			perPost := float64(postCPU.Nanoseconds()) / 1e3 / float64(posts.ok+posts.other)
			b.ReportMetric(perPost, "cpu-us/accept")
			b.ReportMetric(perHealth, "cpu-us/healthz")
			b.ReportMetric(perHealth/perPost, "cpu-ratio")
			b.ReportMetric(float64(posts.p99.Microseconds())/1000, "post-p99-ms")
			b.ReportMetric(float64(health.p99.Microseconds())/1000, "healthz-p99-ms")
			b.ReportMetric(float64(fixed.p99.Microseconds())/1000, "post-p99-ms@2000/s")
			b.Logf("%s: %.0f accepted/s (p50 %v, p99 %v), %.0f healthz/s (p99 %v), ratio %.2f; at %d/s offered: p50 %v p99 %v",
				m, posts.perSecond, posts.p50, posts.p99, health.perSecond, health.p99, posts.perSecond/health.perSecond,
				fixedRate, fixed.p50, fixed.p99)
			if m == redisMode {
				rt := roundTripsPerAccept(b, client, rtt, post)
				b.ReportMetric(rt, "redis_rt/accept")
				b.Logf("%s: %.2f Redis round trips per accepted message", m, rt)
			}
		})
	}
}

// benchRedisNice is the nice value of BenchmarkIngress's private Redis:
// SMSGW_BENCH_REDIS_NICE, 0 by default. The benchmark's Redis shares this
// machine's cores with the gateway and its clients; at -10 (root) it gets
// a core at once when a script arrives, as a Redis on a node of its own
// would, and the ratio shows what the gateway does apart from waiting for
// that core.
func benchRedisNice(b *testing.B) int {
	v := os.Getenv("SMSGW_BENCH_REDIS_NICE")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -20 || n > 19 {
		b.Fatalf("SMSGW_BENCH_REDIS_NICE=%q: want a nice value from -20 to 19", v)
	}
	return n
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The fixed offered load of BenchmarkIngress.
const (
	fixedRate = 2000
	fixedFor  = 2 * time.Second
)

// postRequest returns a maker of POST /v1/messages requests, each with a
// new Idempotency-Key.
func postRequest(h *harness) func() *http.Request {
	body, _ := json.Marshal(msg("marketing", "reference", "bench"))
	var n atomic.Int64
	return func() *http.Request {
		r, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, h.base+"/v1/messages", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+keyNotify)
		r.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(n.Add(1), 10))
		return r
	}
}

// offered sends rate requests a second for d, each due at its own instant
// whatever the earlier ones are doing, and measures each from that instant.
func offered(b *testing.B, client *http.Client, rate int, d time.Duration, newReq func() *http.Request) loadResult {
	b.Helper()
	total := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	due := make(chan time.Time, total)
	lat := make([]time.Duration, total)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		other atomic.Int64
	)
	start := time.Now()
	for range benchConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				time.Sleep(time.Until(at))
				resp, err := client.Do(newReq())
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusAccepted {
					other.Add(1)
				}
				lat[next.Add(1)-1] = time.Since(at)
			}
		}()
	}
	for i := range total {
		due <- start.Add(time.Duration(i) * interval)
	}
	close(due)
	wg.Wait()
	if n := other.Load(); n > 0 {
		b.Errorf("%d of %d POSTs at a fixed load not accepted", n, total)
	}
	var res loadResult
	res.add(loadResult{ok: total, elapsed: time.Since(start), latencies: lat})
	return res
}

// roundTripsPerAccept is the Redis round trips one accepted message
// costs, counted by a hook on the App's client: n sequential POSTs, minus
// what the process does besides accepting in as long (the dispatcher keeps
// sending the backlog at the provider's pace and polling), counted right
// after while no POST arrives.
func roundTripsPerAccept(b *testing.B, client *http.Client, rtt *redistest.RoundTrips, newReq func() *http.Request) float64 {
	b.Helper()
	const n = 1000
	c0, t0 := rtt.N(), time.Now()
	for range n {
		resp, err := client.Do(newReq())
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("POST: %d", resp.StatusCode)
		}
	}
	busy := time.Since(t0)
	c1 := rtt.N()
	time.Sleep(busy)
	idle := rtt.N() - c1
	return float64(c1-c0-idle) / n
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
