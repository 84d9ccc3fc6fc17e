package limiter

import (
	"strings"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// The sender level of the limiter tree: a send passes the account's key,
// its class's and its sender's in one step, and a sender's pause stops that
// sender alone. Each case runs on both deciders.

// senderCfg limits Mkt1 to 5/s (burst 1) under an account of 100/s.
var senderCfg = Config{
	Global:  Rate{PerSecond: 100, Burst: 10},
	Classes: map[string]Rate{"marketing": {PerSecond: 50, Burst: 5}},
	Senders: map[string]Rate{"Mkt1": {PerSecond: 5, Burst: 1}},
}

// deciders returns a fresh Local and a fresh Redis limiter of cfg.
func deciders(t *testing.T, cfg Config) map[string]Limiter {
	t.Helper()
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := newRedisLimiter(t, cfg)
	return map[string]Limiter{"local": l, "redis": r}
}

// TestSenderLimitHoldsOnlyItsSender: once Mkt1 has used its burst, its next
// send is denied as the sender's (SenderLimited) with the sender's
// retry-after, and nothing is booked for it: another sender of the same
// class still goes at once, and the account's key keeps its room.
func TestSenderLimitHoldsOnlyItsSender(t *testing.T) {
	t.Parallel()
	for name, l := range deciders(t, senderCfg) {
		t.Run(name, func(t *testing.T) {
			req := Request{Class: "marketing", Cost: 1, Sender: "Mkt1"}
			if d, err := l.Reserve(bg, req); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("first send from Mkt1: %+v %v", d, err)
			}
			d, err := l.Reserve(bg, req)
			if err != nil || d.Allowed || !d.SenderLimited || d.Paused || d.SenderPaused {
				t.Fatalf("second send from Mkt1 at once: %+v %v, want denied as the sender's", d, err)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > 200*time.Millisecond {
				t.Fatalf("Mkt1's retry-after %s, want up to 200 ms (5/s)", d.RetryAfter)
			}
			// Even within max_wait, the sender's slot is never booked ahead:
			// the account's and the class's keys would be booked at that
			// later time and hold every other sender back.
			if d, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt1", MaxWait: time.Second}); err != nil || !d.SenderLimited || d.RetryAfter <= 0 {
				t.Fatalf("Mkt1 with max wait 1 s: %+v %v, want denied as the sender's", d, err)
			}
			for i := range 4 { // the class's burst of 5, with Mkt1's one
				if d, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt2"}); err != nil || !d.Allowed || d.Delay != 0 {
					t.Fatalf("send %d from Mkt2 while Mkt1 waits: %+v %v", i, d, err)
				}
			}
			if d, err := l.Reserve(bg, Request{Class: "otp", Cost: 1, Sender: "Auth"}); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("OTP while Mkt1 waits: %+v %v", d, err)
			}
		})
	}
}

// TestSenderScheduleNeverOvershoots: a sender's backlog asked for again
// at each retry-after is granted within the sender's rate·t + burst over
// every interval, on Redis time.
func TestSenderScheduleNeverOvershoots(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 1000, Burst: 20}, Senders: map[string]Rate{"S": {PerSecond: 40, Burst: 2}}}
	r, _, _ := newRedisLimiter(t, cfg)
	var sends []int64
	for len(sends) < 30 {
		d, now, err := r.reserve(bg, Request{Class: "transactional", Cost: 1, Sender: "S", MaxWait: time.Second})
		switch {
		case err != nil:
			t.Fatal(err)
		case d.Allowed:
			sends = append(sends, now+d.Delay.Microseconds())
		case !d.SenderLimited || d.RetryAfter > 25*time.Millisecond:
			t.Fatalf("denied %+v, want the sender's retry-after of at most one interval", d)
		default:
			time.Sleep(d.RetryAfter)
		}
	}
	if msg := overshoot(sends, 40, 2); msg != "" {
		t.Fatalf("the sender's schedule overshoots: %s", msg)
	}
}

// TestSenderCostAboveItsBurst: a message of more units than the sender's
// burst is never refused for it; it goes alone at once and books all its
// units, so that the sender's next message waits for them.
func TestSenderCostAboveItsBurst(t *testing.T) {
	t.Parallel()
	for name, l := range deciders(t, senderCfg) {
		t.Run(name, func(t *testing.T) {
			if d, err := l.Reserve(bg, Request{Class: "transactional", Cost: 3, Sender: "Mkt1"}); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("3 units from a sender of burst 1: %+v %v", d, err)
			}
			d, err := l.Reserve(bg, Request{Class: "transactional", Cost: 1, Sender: "Mkt1"})
			if err != nil || !d.SenderLimited || d.RetryAfter <= 200*time.Millisecond || d.RetryAfter > 600*time.Millisecond {
				t.Fatalf("the next unit: %+v %v, want the sender's retry-after of 3 intervals (600 ms), more than one's", d, err)
			}
		})
	}
}

// TestSenderPauseHoldsOnlyItsSender: a sender's pause set by one replica
// holds on the others, is never shortened and stops no other sender; the
// account's pause still holds for every sender, before the sender's.
func TestSenderPauseHoldsOnlyItsSender(t *testing.T) {
	t.Parallel()
	local, err := NewLocal(senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	a, _, account := newRedisLimiter(t, senderCfg)
	b, err := NewRedis(redistest.Client(t), account, senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]Limiter{"local": {local, local}, "redis": {a, b}} {
		t.Run(name, func(t *testing.T) {
			setter, other := pair[0], pair[1]
			for _, sender := range []string{"Mkt1", "+15550100"} { // limited, and not
				inForce, err := setter.PauseSender(bg, sender, 3*time.Second)
				if err != nil || inForce < 2900*time.Millisecond {
					t.Fatalf("pause %s: %s %v", sender, inForce, err)
				}
				if inForce, err := other.PauseSender(bg, sender, 100*time.Millisecond); err != nil || inForce < 2*time.Second {
					t.Fatalf("a shorter pause of %s: in force %s %v, want the longer one kept", sender, inForce, err)
				}
				d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: sender, MaxWait: time.Hour})
				if err != nil || d.Allowed || !d.SenderPaused || d.Paused || d.RetryAfter < 2*time.Second {
					t.Fatalf("%s while paused: %+v %v", sender, d, err)
				}
			}
			if d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt2"}); err != nil || !d.Allowed {
				t.Fatalf("another sender during the pause: %+v %v", d, err)
			}
			if d, err := other.Reserve(bg, Request{Class: "otp", Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("the default sender during the pause: %+v %v", d, err)
			}
			if err := setter.Pause(bg, time.Second); err != nil {
				t.Fatal(err)
			}
			if d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt1"}); err != nil || !d.Paused || d.SenderPaused {
				t.Fatalf("a paused sender while the account is paused: %+v %v, want the account's pause", d, err)
			}
		})
	}
}

// TestSenderKeysShareTheTagAndHideTheSender: a sender's keys are under the
// account's hash tag (one slot with the rest of a reservation) and never
// show the sender, which may be a phone number.
func TestSenderKeysShareTheTagAndHideTheSender(t *testing.T) {
	t.Parallel()
	k, err := newKeySet("acct")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.sender("+15550100"), k.senderPause("+15550100")} {
		if !strings.HasPrefix(key, "{smsgw:acct}:limiter:sender:") || strings.Contains(key, "5550100") {
			t.Errorf("sender key %q: want the account's tag and no number", key)
		}
	}
	if k.sender("a") == k.sender("b") || k.senderPause("a") == k.sender("a") {
		t.Error("two senders, or a sender's pause and its schedule, share a key")
	}
}

// TestSenderFallbackDividesAndKeepsPauses: with Redis down, each process
// takes its share of a sender's limit as of the account's, and a sender's
// pause seen on Redis keeps holding.
func TestSenderFallbackDividesAndKeepsPauses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 10}, Senders: map[string]Rate{"Mkt1": {PerSecond: 10, Burst: 4}}}
	account := redistest.Prefix(t)
	a := newShared(t, srv, account, cfg, 2).shared
	b := newShared(t, srv, account, cfg, 2).shared
	if _, err := a.PauseSender(bg, "Mkt2", 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeShared {
		t.Fatalf("b while a paused Mkt2: %+v %v", d, err)
	}
	srv.Kill()
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2", MaxWait: time.Hour}); err != nil || !d.SenderPaused || d.RetryAfter < 2*time.Second {
		t.Fatalf("b with Redis down during Mkt2's pause: %+v %v", d, err)
	}
	// Fallback: Mkt1 at 5/s, burst 2 in each of the 2 processes, its
	// burst already spent when the fallback took over (Local.spend).
	allowed, denied := reserveN(t, a, Request{Cost: 1, Sender: "Mkt1"}, 3)
	if allowed != 0 || !denied.SenderLimited || denied.Mode != ModeFallback {
		t.Fatalf("fallback right after Redis died: %d allowed, last denial %+v", allowed, denied)
	}
	if denied.RetryAfter <= 0 || denied.RetryAfter > 200*time.Millisecond {
		t.Fatalf("fallback retry-after %s, want up to 200 ms (one unit at 5/s)", denied.RetryAfter)
	}
	time.Sleep(denied.RetryAfter)
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt1", MaxWait: time.Second}); err != nil || !d.Allowed {
		t.Fatalf("fallback Mkt1 at its retry-after: %+v %v", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt1"}); err != nil || !d.SenderLimited || d.RetryAfter < 150*time.Millisecond {
		t.Fatalf("fallback Mkt1 right after a send: %+v %v, want about 200 ms (5/s, not the shared 10/s)", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeFallback {
		t.Fatalf("a, which paused Mkt2, with Redis down: %+v %v", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt3", MaxWait: time.Second}); err != nil || !d.Allowed || d.Mode != ModeFallback {
		t.Fatalf("another sender in fallback: %+v %v", d, err)
	}
	// A sender's pause set while Redis is down holds in this process.
	if inForce, err := a.PauseSender(bg, "Mkt4", 3*time.Second); err != nil || inForce < 2*time.Second {
		t.Fatalf("pause Mkt4 with Redis down: %s %v", inForce, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt4", MaxWait: time.Second}); err != nil || !d.SenderPaused {
		t.Fatalf("Mkt4, paused with Redis down: %+v %v", d, err)
	}
	// Redis back without the pause keys (no persistence): the pauses this
	// process saw still hold until they end.
	srv.Start()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for b.Mode() != ModeShared {
		if time.Now().After(deadline) {
			t.Fatal("b not shared again")
		}
		b.Probe(bg)
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeShared {
		t.Fatalf("b on Redis back without Mkt2's pause key: %+v %v", d, err)
	}
}
