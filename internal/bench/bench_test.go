package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis probes a Redis that refused every dial from a goroutine that
	// notices Close only after its 1 s sleep (TestConfigChecks, no Redis).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func quick(t *testing.T, pods int, d time.Duration) Config {
	t.Helper()
	return Config{Pods: pods, Duration: d, RedisAddr: redistest.Addr(t), Offset: -1}
}

// Ours: no 429 and never more than the contract in any second, whichever
// way the provider measures a second; OTP goes out in milliseconds.
func TestGCRANeverOvershoots(t *testing.T) {
	for _, w := range []sim.Window{sim.WindowSliding, sim.WindowFixed} {
		t.Run(string(w), func(t *testing.T) {
			cfg := quick(t, 4, 1500*time.Millisecond)
			cfg.StartPhase = -1
			res, err := RunOne(context.Background(), cfg, GCRA, w)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if res.Rejected429 != 0 || res.MaxIn1s > DefaultContract || res.MaxAttemptsIn1s > DefaultContract {
				t.Errorf("429s %d, max/1s %d, tried/1s %d: want 0 and <= %d", res.Rejected429, res.MaxIn1s, res.MaxAttemptsIn1s, DefaultContract)
			}
			if res.Accepted < 50 || res.Duplicates != 0 {
				t.Errorf("accepted %d, duplicates %d", res.Accepted, res.Duplicates)
			}
			if res.OTPSent == 0 || res.OTPSent < res.OTPOffered-1 || res.OTPP99MS > 250 {
				t.Errorf("otp %d/%d sent, p99 %.1fms: OTP must not wait behind marketing", res.OTPSent, res.OTPOffered, res.OTPP99MS)
			}
			if res.RedisCalls == 0 || res.Target != DefaultTarget {
				t.Errorf("redis calls %d, target %g", res.RedisCalls, res.Target)
			}
		})
	}
}

// A limit per pod multiplies with the pods: 16 × 50/s against 100/s.
func TestPerPodOvershoots(t *testing.T) {
	cfg := quick(t, 16, time.Second)
	cfg.StartPhase = -1
	res, err := RunOne(context.Background(), cfg, PerPod, sim.WindowSliding)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Rejected429 == 0 || res.MaxAttemptsIn1s <= DefaultContract {
		t.Errorf("429s %d, tried/1s %d: per-pod limits must overshoot with 16 pods", res.Rejected429, res.MaxAttemptsIn1s)
	}
	if res.RedisCalls != 0 {
		t.Errorf("per-pod made %d redis calls", res.RedisCalls)
	}
}

// An atomic counter on fixed windows of skewed clocks still lets a window
// edge through: more than the contract in one second, or 429s.
func TestAtomicIncrFixedWindowOvershoots(t *testing.T) {
	cfg := quick(t, 8, 2*time.Second)
	res, err := RunOne(context.Background(), cfg, AtomicIncr, sim.WindowFixed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.MaxIn1s <= DefaultContract && res.MaxAttemptsIn1s <= DefaultContract && res.Rejected429 == 0 {
		t.Errorf("max/1s %d, tried/1s %d, 429s %d: want an overshoot", res.MaxIn1s, res.MaxAttemptsIn1s, res.Rejected429)
	}
	if res.RedisPerMsg <= 1 {
		t.Errorf("redis calls per message %.2f: the 1 ms spin should cost more than one", res.RedisPerMsg)
	}
}

func TestConfigChecks(t *testing.T) {
	for name, cfg := range map[string]Config{
		"remote redis":   {RedisAddr: "10.0.0.1:6379"},
		"redis no port":  {RedisAddr: "127.0.0.1"},
		"pods":           {Pods: -1},
		"offset":         {Offset: time.Second},
		"phase":          {StartPhase: 2 * time.Second},
		"window":         {Windows: []sim.Window{"tumbling"}},
		"strategy":       {Strategies: []Strategy{"leaky"}},
		"short duration": {Duration: time.Millisecond},
	} {
		if err := cfg.setDefaults(); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
	for _, addr := range []string{"127.0.0.1:6379", "localhost:6379", "[::1]:6379", "127.0.0.2:1"} {
		if err := CheckLoopback(addr); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := RunOne(context.Background(), Config{RedisAddr: "127.0.0.1:1"}, GCRA, sim.WindowSliding); err == nil {
		t.Error("no redis: want a setup error")
	}
	if _, err := ParseStrategy("gcra"); err != nil {
		t.Error(err)
	}
}

func TestArrivalsMaxIn1s(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := &arrivals{}
	for _, ms := range []int{0, 100, 999, 1000, 1001, 1500, 3000} {
		a.at = append(a.at, t0.Add(time.Duration(ms)*time.Millisecond))
	}
	// (t-1s, t] at t=1500ms holds 999, 1000, 1001, 1500.
	if most, total := a.maxIn1s(); most != 4 || total != 7 {
		t.Fatalf("max %d total %d, want 4 and 7", most, total)
	}
}

func TestPodSkewSpread(t *testing.T) {
	cfg := Config{Pods: 5, Skew: 200 * time.Millisecond}
	want := []time.Duration{-200, -100, 0, 100, 200}
	for i, w := range want {
		if got := podSkew(cfg, i); got != w*time.Millisecond {
			t.Errorf("pod %d: skew %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if podSkew(Config{Pods: 1, Skew: time.Second}, 0) != 0 {
		t.Error("one pod: want no skew")
	}
}

func TestCleanupDeletesPrefix(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	prefix := randomPrefix()
	other := redistest.Prefix(t)
	for _, k := range []string{prefix + ":sms:1", "{smsgw:" + prefix + "}:limiter:global", other} {
		if err := c.Set(ctx, k, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer c.Del(ctx, other)
	if err := Cleanup(ctx, c, prefix); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, prefix+":sms:1", "{smsgw:"+prefix+"}:limiter:global").Val(); n != 0 {
		t.Errorf("%d keys of the prefix left", n)
	}
	if c.Exists(ctx, other).Val() != 1 {
		t.Error("cleanup deleted another prefix's key")
	}
}

func TestWriteTableAndJSON(t *testing.T) {
	cfg := Config{Pods: 16, Contract: 100, Target: 90, Burst: 5, Marketing: 70}
	r := Result{Strategy: PerPod, Window: sim.WindowSliding, Rejected429: 400, MaxIn1s: 100, MaxAttemptsIn1s: 900,
		Target: 100, OTPOffered: 10, OTPSent: 4, OTPDropped: 5, WouldSuspend: true}
	r.Why, r.Notes = explain(cfg, r)
	g := Result{Strategy: GCRA, Window: sim.WindowFixed, MaxIn1s: 95, MaxAttemptsIn1s: 95, Target: 90, OTPOffered: 10, OTPSent: 10, OTPP50MS: 1.2, OTPP99MS: 3}
	g.Why, g.Notes = explain(cfg, g)
	if g.Notes != "" {
		t.Errorf("gcra notes %q", g.Notes)
	}
	rep := Report{Pods: 16, DurationS: 5, Contract: 100, Results: []Result{r, g}}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"strategy", "429s", "max/1s", "redis calls/msg", "per-pod", "800/s", "would be suspended", "5 of 10 OTPs dropped", "1 OTPs still queued", "gcra", "1.2ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Results) != 2 || back.Results[0].Rejected429 != 400 {
		t.Fatalf("json round trip: %v %+v", err, back)
	}
}
