package limiter

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"smsgw/internal/redistest"
)

// mutation list — `make mutate` (scripts/mutate.sh → go run ./internal/limiter/mutate)
// applies each mutant to a copy of its file through `go test -overlay`, runs
// the tests named in brackets and expects them to fail (KILLED). Format: a
// line "name [Tests]", then one edit per line: file: `old` -> `new` (old must
// occur exactly once in the file). Every mutant is one edit but two: the
// caller's clock (the wrapper has no time to pass, so the bug must first add
// one) and banking idle time on Redis (a TAT left in the past also needs an
// expiry that Redis accepts).
//
//	caller-clock [TestCallerClockIgnored]
//	  redis.go: `args := append([]any{req.Cost, floorMicros(req.MaxWait)}, call.args...)` -> `args := append([]any{req.Cost, floorMicros(req.MaxWait)}, append(slices.Clip(call.args), r.clock().UnixMicro())...)`
//	  redis.go: `local cost = tonumber(ARGV[1])` -> `local cost = tonumber(ARGV[1]) now = tonumber(ARGV[#ARGV])`
//	bank-idle-time-redis [TestIdleDoesNotBankCredit]
//	  redis.go: `gcra_set(KEYS[i], math.max(tats[i], send) + cost` -> `gcra_set(KEYS[i], tats[i] + cost`
//	  ../gcra/gcra.go: `math.ceil((tat - now) / 1000) + 1))` -> `math.max(1, math.ceil((tat - now) / 1000) + 1)))`
//	bank-idle-time-local [TestLocalIdleDoesNotBankCredit]
//	  gcra.go: `tats[i] = max(tats[i], send) + cost*p.interval` -> `tats[i] = max(tats[i], send*0) + cost*p.interval`
//	skip-the-pause [TestPauseSeenByOtherClientAndNeverShortened]
//	  redis.go: `if pause > now then` -> `if false then`
//	shorten-a-pause [TestPauseSeenByOtherClientAndNeverShortened]
//	  redis.go: `if cur >= want then` -> `if false then`
//	write-global-when-class-fails [TestReserveScriptStates]
//	  redis.go: `tats[i] = tonumber(vals[i] or '0')` -> `tats[i] = tonumber(vals[i] or '0') redis.call('SET', KEYS[i], string.format('%d', math.max(tats[i], now) + cost * interval))`
//	book-at-now-not-send-time [TestReserveScriptStates]
//	  redis.go: `gcra_set(KEYS[i], math.max(tats[i], send) + cost` -> `gcra_set(KEYS[i], math.max(tats[i], now) + cost`
//	omit-cost [TestCostConsumesN]
//	  redis.go: `[]any{req.Cost, floorMicros(req.MaxWait)}` -> `[]any{1, floorMicros(req.MaxWait)}`
//	ignore-max-wait [TestReserveScriptStates]
//	  redis.go: `if wait > tonumber(ARGV[2]) then` -> `if false then`
//	cost-above-burst-waits [TestCostExceedsBurst]
//	  redis.go: `    return {3, 0, now}` -> `    wait = wait`
//	round-interval-down [TestRateRoundingNeverSpeedsUp]
//	  gcra.go: `interval: int64(math.Ceil(1e6 / r.PerSecond))` -> `interval: int64(1e6 / r.PerSecond)`
//	round-expiry-down [TestPrecision]
//	  ../gcra/gcra.go: `'PX', string.format('%d', math.ceil((tat - now) / 1000) + 1))` -> `'PX', string.format('%d', math.floor((tat - now) / 1000)))`
//	float-text-tat [TestPrecision]
//	  ../gcra/gcra.go: `redis.call('SET', key, string.format('%d', tat),` -> `redis.call('SET', key, tostring(tat),`
//	whole-second-clock [TestPrecision]
//	  redis.go: `local cost = tonumber(ARGV[1])` -> `local cost = tonumber(ARGV[1]) now = tonumber(t[1]) * 1000000`
//	drop-the-hash-tag [TestClusterScriptsStayInOneSlot]
//	  keys.go: `return keySet{tag: sp.Tag()}, nil` -> `return keySet{tag: "smsgw:" + sp.Account()}, nil`
//	fail-open-on-redis-error [TestSharedFallbackAndRecovery]
//	  shared.go: `d, err = s.fallback.Reserve(ctx, req)` -> `d, err = Decision{Allowed: true, Mode: ModeFallback}, nil`
//	fallback-not-divided [TestSharedFallbackAndRecovery]
//	  shared.go: `return Rate{PerSecond: r.PerSecond / float64(n), Burst: max(1, r.Burst/n)}` -> `return Rate{PerSecond: r.PerSecond, Burst: r.Burst}`
//	never-retry-redis [TestSharedFallbackAndRecovery]
//	  breaker.go: `Timeout:     redisRetryEvery,` -> `Timeout:     time.Hour,`
//	retry-redis-every-call [TestSharedRetriesRedisAtMostOncePerSecond]
//	  breaker.go: `return c.ConsecutiveFailures >= 1 }` -> `return c.ConsecutiveFailures >= 1000000 }`
//	ingress-never-retry-redis [TestSharedKeysOutage]
//	  breaker.go: `Timeout:     redisRetryEvery,` -> `Timeout:     time.Hour,`
//	ingress-retry-redis-every-call [TestSharedKeysOutage]
//	  breaker.go: `return c.ConsecutiveFailures >= 1 }` -> `return c.ConsecutiveFailures >= 1000000 }`
//	ingress-fail-open-on-redis-error [TestSharedKeysOutage]
//	  shared.go: `return s.fallback.Allow(ctx, key, r, cost)` -> `return KeyDecision{Allowed: true}, nil`
//	ingress-log-per-call [TestSharedKeysOutage]
//	  shared.go: `if s.onLocal != nil {` -> `if s.br.cfg.log.Warn(s.br.cfg.lost); s.onLocal != nil {`
//	log-mode-per-call [TestSharedFallbackAndRecovery]
//	  shared.go: `s.log.Debug("limiter: deciding locally", "err", err)` -> `s.log.Warn("limiter: deciding locally", "err", err)`
//	forget-shared-pause-in-fallback [TestSharedPauseHoldsWhenRedisDies]
//	  shared.go: `_ = s.fallback.Pause(ctx, d.RetryAfter)` -> `_ = ctx`
//	ignore-local-pause [TestSharedPauseHoldsWhenRedisDies]
//	  shared.go: `if rem := s.fallback.pauseRemaining(); rem > 0 {` -> `if rem := s.fallback.pauseRemaining(); rem > time.Hour {`
//	hasty-probes-redis [TestSharedHastyNeverProbes]
//	  shared.go: `if !req.Hasty || s.Mode() != ModeFallback {` -> `if true {`
//	redis-call-past-callers-share [TestSharedRedisCallLeavesTheCallerTime]
//	  breaker.go: `timeout := min(limit, max(minRedisCall, left/callerShare), left-left/callerShare)` -> `timeout := min(limit, left)`
//	redis-call-below-the-minimum [TestSharedFreshConnectionDecidesOnRedis]
//	  breaker.go: `max(minRedisCall, left/callerShare)` -> `left/callerShare`
//	hurried-caller-opens-the-breaker [TestSharedHurriedCallerKeepsTheReplicaShared]
//	  breaker.go: `return timeout, timeout >= min(minRedisCall, limit)` -> `return timeout, true`
//	hurried-caller-granted-locally [TestSharedHurriedCallerKeepsTheReplicaShared]
//	  shared.go: `return Decision{}, fmt.Errorf("limiter: reserve: %w", err)` -> `_ = err`
//	fallback-wait-from-now [TestSharedRedisCallLeavesTheCallerTime]
//	  shared.go: `req.MaxWait = max(0, req.MaxWait-time.Since(asked))` -> `req.MaxWait = max(0, req.MaxWait-time.Since(asked)*0)`
//	local-skip-pause [TestLocalPause]
//	  local.go: `if l.pauseUntil > now {` -> `if false {`
//	ignore-spare-redis [TestSpareKeepsRoomForOTP]
//	  redis.go: `if spare > 0 then` -> `if false then`
//	ignore-spare-local [TestSpareKeepsRoomForOTP]
//	  gcra.go: `if spare > 0 {` -> `if false {`
//	spare-not-sent [TestSpareKeepsRoomForOTP]
//	  redis.go: `args = append(args, req.Spare, reachMicros)` -> `args = append(args, 0, reachMicros)`
//	spare-refuses-whole-burst-redis [TestSpareKeepsRoomForOTP]
//	  redis.go: `math.max(gb - spare, cost) * gi` -> `(gb - spare) * gi`
//	spare-refuses-whole-burst-local [TestSpareKeepsRoomForOTP]
//	  gcra.go: `max(g.burst-spare, cost)*g.interval` -> `(g.burst-spare)*g.interval`
//	spare-retry-after-local [TestSpareKeepsRoomForOTP]
//	  local.go: `return Decision{RetryAfter: micros(wait), Mode: l.mode}, nil` -> `return Decision{RetryAfter: micros(wait / 2), Mode: l.mode}, nil`
//	ingress-denial-writes [TestKeyLimiterDenialChangesNothing]
//	  ../gcra/gcra.go: `  if new then gcra_set(key, new, now) elseif` -> `  gcra_set(key, new or now + cost * interval, now) if false then elseif`
//	ingress-increment-before-check [TestKeyLimiterDenialChangesNothing]
//	  ingress.go: `	if d.Allowed {` -> `	if true {`
//	ingress-no-reach [TestKeyLimiterClockStepBack]
//	  ../gcra/gcra.go: `return math.min(tat, now + burst * interval)` -> `return tat`
//	ingress-reach-too-low [TestKeyLimiterClockStepBack]
//	  ../gcra/gcra.go: `return math.min(tat, now + burst * interval)` -> `return math.min(tat, now + (burst - 1) * interval)`
//	ingress-reach-not-stored [TestKeyLimiterClockStepBack]
//	  ../gcra/gcra.go: `elseif tat < stored then gcra_set(key, tat, now) end` -> `end`
//	ingress-no-reach-local [TestKeyLimiterClockStepBack]
//	  ingress.go: `return min(tat, now+p.burst*p.interval)` -> `return tat`
//	ingress-reach-not-kept-local [TestKeyLimiterClockStepBack]
//	  ingress.go: `l.tats[key] = reached // never` -> `_ = reached // never`
//	no-reach-redis [TestReserveScriptStates]
//	  redis.go: `if reached < tats[i] then` -> `if false then`
//	reach-without-burst-redis [TestReserveScriptStates]
//	  redis.go: `gcra_reach(tats[i], interval, burst, ahead)` -> `gcra_reach(tats[i], interval, 0, ahead)`
//	reach-not-stored-redis [TestReserveScriptStates]
//	  redis.go: `gcra_set(KEYS[i], reached, now)` -> `redis.call('GET', KEYS[i])`
//	reach-not-sent [TestReserveScriptStates]
//	  redis.go: `args = append(args, req.Spare, reachMicros)` -> `args = append(args, req.Spare, 0)`
//	max-wait-beyond-reach [TestReserveScriptStates]
//	  gcra.go: `r.MaxWait = min(r.MaxWait, MaxReserveAhead)` -> `r.MaxWait = max(r.MaxWait, 0)`
//	no-reach-local [TestLocalClockStepBack]
//	  gcra.go: `tats[i] = gcraReach(now+reachMicros, tats[i], p)` -> `tats[i] = max(tats[i], 0)`
//	reach-without-burst-local [TestLocalClockStepBack]
//	  gcra.go: `gcraReach(now+reachMicros, tats[i], p)` -> `gcraReach(now+reachMicros, tats[i], params{})`
//	reach-not-kept-local [TestLocalClockStepBack]
//	  local.go: `	l.globalTAT = tats[0]` -> `	if out == granted { l.globalTAT = tats[0] }`
//	outage-not-told [TestOutageSharedByTheReplicasRedisUsers]
//	  breaker.go: `			b.cfg.outage.Failed()` -> `			_ = b`
//	outage-not-recorded [TestOutageSharedByTheReplicasRedisUsers]
//	  outage.go: `o.failed.Store(time.Now().UnixNano())` -> `_ = o`
//	outage-never-recent [TestOutageSharedByTheReplicasRedisUsers]
//	  outage.go: `return time.Now().UnixNano()-o.failed.Load() < int64(redisRetryEvery)` -> `return false`
//	outage-recent-forever [TestOutageSharedByTheReplicasRedisUsers]
//	  outage.go: `time.Now().UnixNano()-o.failed.Load() < int64(redisRetryEvery)` -> `true`
//	outage-nil-failed [TestSharedFallbackAndRecovery]
//	  outage.go: `	if o != nil {` -> `	if true {`
//	outage-nil-recent [TestSharedKeysOutage]
//	  outage.go: `	if o == nil {` -> `	if false {`
//	outage-not-joined [TestOutageSharedByTheReplicasRedisUsers]
//	  breaker.go: `	if b.cfg.outage.Recent() && b.cb.State() == gobreaker.StateClosed {` -> `	if false {`
//	outage-not-joined-by-calls [TestOutageSharedByTheReplicasRedisUsers]
//	  breaker.go: `	b.joinOutage()` -> `	_ = b`
//	sender-key-not-marked [TestSenderLimitHoldsOnlyItsSender]
//	  redis.go: `		senderAt = len(keys)` -> `		senderAt = 0`
//	sender-books-ahead-redis [TestSenderLimitHoldsOnlyItsSender]
//	  redis.go: `if swait > 0 then` -> `if swait > tonumber(ARGV[2]) then`
//	sender-books-ahead-local [TestSenderLimitHoldsOnlyItsSender]
//	  gcra.go: `if swait > 0 {` -> `if swait > maxWait {`
//	sender-limit-ignored-local [TestSenderLimitHoldsOnlyItsSender]
//	  local.go: `sp, limited := l.c.senders[r.Sender]` -> `sp, limited := l.c.senders[r.Sender+"?"]`
//	sender-cost-above-burst-redis [TestSenderCostAboveItsBurst]
//	  redis.go: `    c = math.min(cost, burst)` -> `    c = cost`
//	sender-cost-above-burst-local [TestSenderCostAboveItsBurst]
//	  gcra.go: `c = min(cost, p.burst)` -> `c = cost`
//	sender-tat-not-kept-local [TestSenderCostAboveItsBurst]
//	  local.go: `l.senderTAT[r.Sender] = tats[sender]` -> `_ = tats[sender]`
//	skip-the-sender-pause-redis [TestSenderPauseHoldsOnlyItsSender]
//	  redis.go: `if sender_pause > now then` -> `if false then`
//	skip-the-sender-pause-local [TestSenderPauseHoldsOnlyItsSender]
//	  local.go: `if until := l.senderPause.Get(r.Sender); until > now {` -> `if until := l.senderPause.Get(r.Sender); false {`
//	shorten-a-sender-pause-local [TestSenderPauseHoldsOnlyItsSender]
//	  local.go: `return max(cur, now+ceilMicros(d))` -> `return now + ceilMicros(d)`
//	sender-keys-outside-the-tag [TestSenderKeysShareTheTagAndHideTheSender]
//	  keys.go: `return k.tag + ":limiter:sender:" + hex.EncodeToString(sum[:10])` -> `return "limiter:sender:" + hex.EncodeToString(sum[:10])`
//	sender-in-clear [TestSenderKeysShareTheTagAndHideTheSender]
//	  keys.go: `hex.EncodeToString(sum[:10])` -> `name + hex.EncodeToString(sum[:10])`
//	sender-not-divided-in-fallback [TestSenderFallbackDividesAndKeepsPauses]
//	  shared.go: `out.Senders[name] = div(r)` -> `out.Senders[name] = r`
//	sender-burst-not-spent-in-fallback [TestSenderFallbackDividesAndKeepsPauses]
//	  local.go: `l.senderTAT[name] = max(l.senderTAT[name], now+p.burst*p.interval)` -> `_, _ = name, p`
//	sender-pause-not-kept-in-fallback [TestSenderFallbackDividesAndKeepsPauses]
//	  shared.go: `_, _ = s.fallback.PauseSender(ctx, req.Sender, d.RetryAfter)` -> `_ = ctx`
//	sender-pause-not-checked-locally [TestSenderFallbackDividesAndKeepsPauses]
//	  shared.go: `if rem := s.fallback.senderPauseRemaining(req.Sender); rem > 0 {` -> `if rem := s.fallback.senderPauseRemaining(req.Sender); rem > time.Hour {`
//	sender-pause-not-set-locally [TestSenderFallbackDividesAndKeepsPauses]
//	  shared.go: `inForce, err := s.fallback.PauseSender(ctx, sender, d)` -> `inForce, err := time.Duration(0), error(nil)`

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

// newRedisLimiter returns a Redis limiter on the shared Redis under a fresh
// account (its own keys), with its own client.
func newRedisLimiter(t *testing.T, cfg Config) (*Redis, *redis.Client, string) {
	t.Helper()
	client := redistest.Client(t)
	account := redistest.Prefix(t)
	r, err := NewRedis(client, account, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, client, account
}

// reserveN makes n reservations of req back to back and returns how many
// were allowed and the last decision that was not (zero if none).
func reserveN(t *testing.T, l Limiter, req Request, n int) (allowed int, denied Decision) {
	t.Helper()
	for range n {
		d, err := l.Reserve(bg, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else {
			denied = d
		}
	}
	return allowed, denied
}

// redisMicros is the current Redis time in µs.
func redisMicros(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// overshoot returns "" when no interval [sends[i], sends[j]] holds more
// than rate·(sends[j]−sends[i]) + burst units, else the worst interval.
// sends are send times in µs, one per unit; rate is an integer per second so
// the check is exact.
func overshoot(sends []int64, rate, burst int64) string {
	s := slices.Clone(sends)
	slices.Sort(s)
	var worst int64
	msg := ""
	for i := range s {
		for j := i; j < len(s); j++ {
			count := int64(j - i + 1)
			// count <= rate·Δt/1e6 + burst, in integers.
			if over := (count-burst)*1_000_000 - rate*(s[j]-s[i]); over > worst {
				worst = over
				msg = fmt.Sprintf("%d units within %s > %d/s·t + %d", count, micros(s[j]-s[i]), rate, burst)
			}
		}
	}
	return msg
}

func TestOvershootCheckerCanFail(t *testing.T) {
	t.Parallel()
	if overshoot([]int64{0, 0, 0}, 10, 2) == "" {
		t.Error("3 simultaneous units with burst 2 passed")
	}
	if overshoot([]int64{0, 100_000, 150_000}, 10, 1) == "" {
		t.Error("3 units within 150 ms at 10/s burst 1 passed")
	}
	if msg := overshoot([]int64{0, 0, 100_000, 200_000}, 10, 2); msg != "" {
		t.Errorf("a conforming schedule failed: %s", msg)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	bad := []Config{
		{Global: Rate{PerSecond: 0, Burst: 1}},
		{Global: Rate{PerSecond: -1, Burst: 1}},
		{Global: Rate{PerSecond: 10, Burst: 0}},
		{Global: Rate{PerSecond: 2e6, Burst: 1}},
		{Global: Rate{PerSecond: 10, Burst: 1}, Classes: map[string]Rate{"marketing": {PerSecond: 0, Burst: 1}}},
		{Global: Rate{PerSecond: 10, Burst: 1}, Classes: map[string]Rate{"": {PerSecond: 1, Burst: 1}}},
	}
	offline := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = offline.Close() }()
	for i, cfg := range bad {
		if _, err := NewLocal(cfg); err == nil {
			t.Errorf("case %d: NewLocal(%+v) accepted an invalid config", i, cfg)
		}
		if _, err := NewRedis(offline, "a", cfg); err == nil {
			t.Errorf("case %d: NewRedis(%+v) accepted an invalid config", i, cfg)
		}
	}
	if _, err := NewRedis(offline, "a}b", Config{Global: Rate{PerSecond: 1, Burst: 1}}); err == nil {
		t.Error("NewRedis accepted an account with a brace, which would break the hash tag")
	}
	if _, err := (&Local{}).Reserve(bg, Request{Cost: 0}); err == nil {
		t.Error("Reserve accepted cost 0")
	}
}
