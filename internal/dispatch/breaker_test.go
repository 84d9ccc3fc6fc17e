package dispatch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestBreakerOpensOnFailures: after BreakerFailures consecutive 5xx the
// provider breaker opens and nothing is sent while it is open; messages it
// holds back spend no attempt. After BreakerOpen one probe goes through.
func TestBreakerOpensOnFailures(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	p := funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		return provider.Result{}, unavailableErr()
	})
	ids := enqueueN(t, q, 10, sms.ClassTransactional)
	const open = 1500 * time.Millisecond
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		Workers: 1, BulkBatch: 1, MaxAttempts: 100, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		BreakerFailures: 3, BreakerOpen: open})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	waitUntil(t, "3 failed sends", func() bool { return count() >= 3 })
	time.Sleep(open / 2)
	if n := count(); n != 3 {
		t.Fatalf("%d sends with the breaker open, want it to stop after 3 failures", n-3)
	}
	waitUntil(t, "the half-open probe", func() bool { return count() >= 4 })
	mu.Lock()
	gap := calls[3].Sub(calls[2])
	mu.Unlock()
	if gap < open-100*time.Millisecond {
		t.Errorf("probe %s after the breaker opened, want after %s", gap, open)
	}
	spentNow := func() int {
		spent := 0
		for _, id := range ids {
			got, err := q.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			spent += got.Attempts
		}
		return spent
	}
	// The probe's own attempt is recorded after its call returns: wait for
	// it, then no held-back send may have spent one.
	before, spent := count(), 0
	waitUntil(t, "the probe's attempt recorded", func() bool { spent = spentNow(); return spent >= before })
	if after := count(); spent > after {
		t.Errorf("%d attempts spent for %d..%d provider calls: sends held back by the breaker must spend none", spent, before, after)
	}
	if st := d.breaker.State(); st.String() == "closed" {
		t.Errorf("breaker %s after failing probes, want open or half-open", st)
	}
}

func TestNewConfigErrors(t *testing.T) {
	_, err := New(Config{Workers: -1, OTPWorkers: -1, Lease: -time.Second})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"Queue", "Limiter", "Provider", "Owner", "Workers", "OTPWorkers", "Lease", "MaxAttempts", "BackoffBase", "BackoffMax"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The product settings have their defaults in the gateway's
	// configuration only: zero is refused here, except OTPWorkers.
	_, err = New(Config{})
	for _, want := range []string{"Workers 0", "Lease 0s", "MaxAttempts 0", "BackoffBase 0s", "BackoffMax 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not refuse %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "OTPWorkers") {
		t.Errorf("error %q refuses OTPWorkers 0", err)
	}
	acct := newAccount(t)
	_, err = New(Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: funcProvider(nil),
		Owner: "o", Workers: 1, Lease: time.Second, MaxAttempts: 1, BackoffBase: 2 * time.Second, BackoffMax: time.Second})
	if err == nil || !strings.Contains(err.Error(), "BackoffMax 1s must be >= BackoffBase 2s") {
		t.Errorf("New = %v, want BackoffMax below BackoffBase refused", err)
	}
}
