package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

// TestLocalIdempotencyBounds: the in-process store never holds more than
// its cap of answers (the oldest go) or of locks (the newest stays held).
func TestLocalIdempotencyBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewLocalIdempotency(time.Hour, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		k := fmt.Sprint("a", i)
		_, token, err := s.Acquire(ctx, k, time.Minute)
		if err != nil || token == "" {
			t.Fatalf("Acquire %s: %q %v", k, token, err)
		}
		if err := s.Finish(ctx, k, token, &Answer{Status: 200 + i}); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.answers) != 3 || len(s.order) != 3 {
		t.Fatalf("%d answers (%d in order), want the cap 3", len(s.answers), len(s.order))
	}
	for i := range 5 {
		a, _, err := s.Acquire(ctx, fmt.Sprint("a", i), time.Minute)
		if err != nil || (a != nil) != (i >= 2) {
			t.Errorf("answer a%d = %+v %v; want only the newest 3 kept", i, a, err)
		}
	}

	locks, err := NewLocalIdempotency(time.Hour, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, token, err := locks.Acquire(ctx, fmt.Sprint("l", i), time.Minute); err != nil || token == "" {
			t.Fatalf("Acquire l%d: %q %v", i, token, err)
		}
		if len(locks.locks) > 8 {
			t.Fatalf("%d locks after %d Acquires, want at most the cap 8", len(locks.locks), i+1)
		}
	}
	if _, token, _ := locks.Acquire(ctx, "l99", time.Minute); token != "" {
		t.Fatal("the newest lock was dropped")
	}
}

// TestLocalThrottlesWindowAndBound: a 429 leaves the window exactly one
// window after it was recorded; the log never holds more than
// MaxLocalThrottles.
func TestLocalThrottlesWindowAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := NewLocalThrottles(10 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range 3 {
			_, _ = g.Record429(ctx)
		}
		time.Sleep(5 * time.Minute)
		if n, _ := g.Record429(ctx); n != 4 {
			t.Errorf("count %d, want 4", n)
		}
		time.Sleep(5 * time.Minute) // the first three are exactly one window old: out
		if n, _ := g.Count(ctx); n != 1 {
			t.Errorf("count after 10 min %d, want 1", n)
		}
		time.Sleep(5 * time.Minute)
		if n, _ := g.Count(ctx); n != 0 {
			t.Errorf("count after 15 min %d, want 0", n)
		}
		for range MaxLocalThrottles + 10 {
			_, _ = g.Record429(ctx)
		}
		if n, _ := g.Count(ctx); n != MaxLocalThrottles || len(g.times) != MaxLocalThrottles {
			t.Errorf("count %d (%d held) after %d 429s, want the bound %d", n, len(g.times), MaxLocalThrottles+10, MaxLocalThrottles)
		}
	})
}

func TestConstructorsRefuseBadArguments(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	sp, err := keyspace.New("acct")
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxCounterFields+1)
	for i := range many {
		many[i] = fmt.Sprint("f", i)
	}
	for name, err := range map[string]error{
		"local idem window 0":   second(NewLocalIdempotency(0, 0)),
		"local idem cap -1":     second(NewLocalIdempotency(time.Hour, -1)),
		"redis idem nil client": second(NewRedisIdempotency(nil, sp, time.Hour)),
		"redis idem zero space": second(NewRedisIdempotency(c, keyspace.Space{}, time.Hour)),
		"redis idem window 0":   second(NewRedisIdempotency(c, sp, 0)),
		"redis pause nil":       second(NewRedisPause(nil, sp)),
		"counters none":         second(NewLocalCounters(nil)),
		"counters reserved":     second(NewLocalCounters([]string{"sent", sinceField})),
		"counters repeated":     second(NewLocalCounters([]string{"sent", "sent"})),
		"counters empty name":   second(NewRedisCounters(c, sp, []string{""})),
		"counters too many":     second(NewRedisCounters(c, sp, many)),
		"throttles window 0":    second(NewLocalThrottles(0)),
		"redis throttles 0":     second(NewRedisThrottles(c, sp, 0)),
		"redis throttles space": second(NewRedisThrottles(c, keyspace.Space{}, time.Minute)),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewLocalCounters(many[:MaxCounterFields]); err != nil {
		t.Errorf("%d fields: %v", MaxCounterFields, err)
	}
	if !ValidKey(strings.Repeat("a", MaxKeyLen)) || ValidKey(strings.Repeat("a", MaxKeyLen+1)) {
		t.Error("ValidKey bound")
	}
}

func second[T any](_ T, err error) error { return err }

// TestLocalSuppressionsSurviveRestart: the embedded list is a file; a new
// process (a reopen) finds the same entries and the same number key.
func TestLocalSuppressionsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenLocalSuppressions(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Key(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(t.Context(), Suppression{ID: "abc", Masked: "+8190****5678", Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenLocalSuppressions(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	got, err := s.Contains(t.Context(), []string{"abc"})
	if err != nil || !got[0] {
		t.Fatalf("after reopen Contains = %v, %v", got, err)
	}
	if n, err := s.Count(t.Context()); err != nil || n != 1 {
		t.Fatalf("after reopen Count = %d, %v", n, err)
	}
	again, err := s.Key(t.Context())
	if err != nil || string(again) != string(key) {
		t.Fatal("the number key changed across a reopen")
	}
}

// TestLocalIdempotencyByteBound: past its byte cap the store drops its
// oldest answers, whatever their count.
func TestLocalIdempotencyByteBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewLocalIdempotency(time.Hour, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s.SetMaxBytes(3 * MaxAnswerBytes)
	body := []byte(strings.Repeat("b", MaxAnswerBytes/2))
	for i := range 20 {
		k := fmt.Sprint("k", i)
		_, token, err := s.Acquire(ctx, k, time.Minute)
		if err != nil || token == "" {
			t.Fatalf("Acquire %s: %q %v", k, token, err)
		}
		if err := s.Finish(ctx, k, token, &Answer{Status: 200, Body: body}); err != nil {
			t.Fatal(err)
		}
		if n, size := s.Size(); size > 3*MaxAnswerBytes {
			t.Fatalf("after %d answers: %d held in %d bytes, over the cap %d", i+1, n, size, 3*MaxAnswerBytes)
		}
	}
	if a, _, _ := s.Acquire(ctx, "k19", time.Minute); a == nil {
		t.Error("the newest answer was dropped")
	}
	if a, _, _ := s.Acquire(ctx, "k0", time.Minute); a != nil {
		t.Error("the oldest answer was kept past the byte cap")
	}
}

// TestLocalNumberLimitsFull: a full table forgets the numbers least
// recently sent to (an eighth at a time) instead of refusing every new
// number for the window; a number sent to since keeps its count.
func TestLocalNumberLimitsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewLocalNumberLimits(16)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	take := func(key string) bool {
		t.Helper()
		ticket, _, err := s.Take(ctx, key, 2, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ticket != ""
	}
	for i := range 16 {
		now = now.Add(time.Second)
		if !take(fmt.Sprintf("n%02d", i)) {
			t.Fatalf("number %d of 16 refused", i)
		}
	}
	// n00 is sent to again: the most recent now, at its limit
	now = now.Add(time.Second)
	if !take("n00") || take("n00") {
		t.Fatal("n00: want its second OTP allowed and a third refused")
	}
	now = now.Add(time.Second)
	if !take("new") {
		t.Fatal("a new number refused while the table is full")
	}
	if got := s.Evicted(); got != 2 {
		t.Errorf("evicted %d numbers, want 2 (an eighth of 16)", got)
	}
	if take("n00") {
		t.Error("the hammered number lost its count when the table made room")
	}
	for i := range 2 {
		if !take("n01") {
			t.Errorf("n01, forgotten, should start a fresh count: OTP %d of 2 refused", i+1)
		}
	}
	if len(s.nums) > 16 {
		t.Errorf("%d numbers held, cap 16", len(s.nums))
	}
}

// BenchmarkStoredAnswerBytes reports what the first answer of a request
// with an Idempotency-Key costs Redis for the idempotency window: the
// growth of used_memory over answerMessages answers of an accepted POST
// /v1/messages, on a private redis-server: B/answer as the gateway stores
// them (the compact form the API rebuilds the 202 body and Location from,
// Answer.Form), B/answer-json as earlier releases did (the body, smaller
// than the compression threshold, in base64, and the Location). A queue's final record budget (docs/scale.md
// section 6) adds it per keyed request. Run it once:
//
//	go test -run '^$' -bench StoredAnswerBytes -benchtime 1x ./internal/state
func BenchmarkStoredAnswerBytes(b *testing.B) {
	const answerMessages = 5000
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = c.Close() })
	sp, err := keyspace.New("main")
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewRedisIdempotency(c, sp, 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	store := func(i int, whole bool) {
		key := fmt.Sprintf("%040x", i)
		_, token, err := s.Acquire(ctx, key, 15*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("msg_01M8NTXDQV%016d", i)
		body := fmt.Sprintf(`{"id":%q,"status":"queued","class":"transactional","segments":1,"estimated_send_at":"2026-11-30T09:00:00.123Z"}`, id)
		a := &Answer{Hash: fmt.Sprintf("%064x", i), Status: 202, Form: id + " queued transactional 1 GSM-7 1796029200123 - -"}
		if whole {
			a = &Answer{Hash: fmt.Sprintf("%064x", i), Status: 202, Body: []byte(body), Location: "/v1/messages/" + id}
		}
		if err := s.Finish(ctx, key, token, a); err != nil {
			b.Fatal(err)
		}
	}
	var grown, grownWhole int64
	for b.Loop() {
		for _, whole := range []bool{false, true} {
			if err := c.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			store(answerMessages, whole) // scripts loaded before the first reading
			base := usedMemory(b, c)
			for i := range answerMessages {
				store(i, whole)
			}
			if whole {
				grownWhole = usedMemory(b, c) - base
			} else {
				grown = usedMemory(b, c) - base
			}
		}
	}
	b.ReportMetric(float64(grown)/answerMessages, "B/answer")
	b.ReportMetric(float64(grownWhole)/answerMessages, "B/answer-json")
}

// usedMemory is INFO memory's used_memory.
func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}
