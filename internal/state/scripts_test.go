package state

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
)

// idemKeyState is one key of an idempotency state table after the call.
type idemKeyState struct {
	val string        // "" absent
	ttl time.Duration // 0: any (only checked when the key is present)
}

// idemCase is one row: seed the answer and lock keys, call, compare.
type idemCase struct {
	name        string
	answer      string // seeded answer JSON ("" none)
	lock        string // seeded lock token ("" none)
	call        string // "acquire" | "finish" | "finish-answer"
	token       string // the caller's token for finish
	wantAnswer  bool   // acquire returned the stored answer
	wantToken   bool   // acquire took the lock
	after       [2]idemKeyState
	lockIsToken bool // the lock now holds the token acquire returned
}

const idemWindow = time.Hour

var storedAnswer = Answer{Hash: "h", Status: 202, Body: []byte(`{"id":"m1"}`), Location: "/v1/messages/m1"}

// TestIdempotencyScripts is a state table for acquireScript and
// finishScript on real Redis: seed the answer and lock keys, call through
// the wrapper, compare both keys (value and TTL) afterwards.
func TestIdempotencyScripts(t *testing.T) {
	t.Parallel()
	raw, _ := json.Marshal(storedAnswer)
	stored := string(raw)
	for _, tc := range []idemCase{
		{name: "acquire, nothing stored: takes the lock", call: "acquire", wantToken: true,
			after: [2]idemKeyState{{}, {ttl: time.Minute}}, lockIsToken: true},
		{name: "acquire, answer stored: the answer, lock untouched", answer: stored, lock: "other", call: "acquire",
			wantAnswer: true, after: [2]idemKeyState{{val: stored}, {val: "other"}}},
		{name: "acquire, locked: in flight, nothing written", lock: "other", call: "acquire",
			after: [2]idemKeyState{{}, {val: "other"}}},
		{name: "finish nil with the lock: released", lock: "mine", call: "finish", token: "mine"},
		{name: "finish nil, lock passed on: left alone", lock: "other", call: "finish", token: "mine",
			after: [2]idemKeyState{{}, {val: "other"}}},
		{name: "finish answer with the lock: stored for the window, released", lock: "mine", call: "finish-answer", token: "mine",
			after: [2]idemKeyState{{val: stored, ttl: idemWindow}, {}}},
		{name: "finish answer, lock passed on: stored, lock left alone", lock: "other", call: "finish-answer", token: "mine",
			after: [2]idemKeyState{{val: stored, ttl: idemWindow}, {val: "other"}}},
		{name: "finish answer, no lock: stored", call: "finish-answer", token: "mine",
			after: [2]idemKeyState{{val: stored, ttl: idemWindow}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runIdemCase(t, tc)
		})
	}
}

func runIdemCase(t *testing.T, tc idemCase) {
	ctx := context.Background()
	c := redistest.Client(t)
	sp := newSpace(t)
	s, err := NewRedisIdempotency(c, sp, idemWindow)
	if err != nil {
		t.Fatal(err)
	}
	k := newKeys(sp)
	names := [2]string{k.idemAnswer("key"), k.idemLock("key")}
	for i, v := range []string{tc.answer, tc.lock} {
		if v != "" {
			if err := c.Set(ctx, names[i], v, 10*time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var token string
	switch tc.call {
	case "acquire":
		var a *Answer
		if a, token, err = s.Acquire(ctx, "key", time.Minute); err != nil {
			t.Fatal(err)
		}
		if (a != nil) != tc.wantAnswer || (token != "") != tc.wantToken {
			t.Fatalf("Acquire = %+v, %q; want answer %v, token %v", a, token, tc.wantAnswer, tc.wantToken)
		}
		if a != nil && (a.Status != storedAnswer.Status || string(a.Body) != string(storedAnswer.Body) || a.Location != storedAnswer.Location) {
			t.Fatalf("answer %+v, want %+v", a, storedAnswer)
		}
	case "finish":
		err = s.Finish(ctx, "key", tc.token, nil)
	case "finish-answer":
		err = s.Finish(ctx, "key", tc.token, &storedAnswer)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range tc.after {
		if i == 1 && tc.lockIsToken {
			want.val = token
		}
		wantKey(t, c, names[i], want)
	}
}

// wantKey compares one STRING key with its expected value and TTL.
func wantKey(t *testing.T, c redis.UniversalClient, name string, want idemKeyState) {
	t.Helper()
	ctx := context.Background()
	got, err := c.Get(ctx, name).Result()
	if err == redis.Nil {
		got = ""
	} else if err != nil {
		t.Fatal(err)
	}
	if got != want.val {
		t.Errorf("%s = %q, want %q", name, got, want.val)
	}
	if got != "" && want.ttl > 0 {
		if ttl := c.PTTL(ctx, name).Val(); ttl <= want.ttl-time.Minute || ttl > want.ttl {
			t.Errorf("%s TTL %s, want about %s", name, ttl, want.ttl)
		}
	}
}

// TestThrottlesScript is a state table for throttlesScript on real Redis:
// seed the 429 log relative to Redis time, call, compare the whole log.
func TestThrottlesScript(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Minute
	cases := []struct {
		name      string
		seedAgo   []time.Duration // 429s this long before Redis now
		record    bool
		wantCount int
		wantKept  int // seeded entries left after the trim
	}{
		{name: "empty count", wantCount: 0},
		{name: "empty record", record: true, wantCount: 1},
		{name: "trims only what left the window", seedAgo: []time.Duration{11 * time.Minute, window + time.Millisecond, 9 * time.Minute, time.Second},
			wantCount: 2, wantKept: 2},
		{name: "record on a trimmed log", seedAgo: []time.Duration{20 * time.Minute, time.Minute}, record: true, wantCount: 2, wantKept: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := redistest.Client(t)
			sp := newSpace(t)
			g, err := NewRedisThrottles(c, sp, window)
			if err != nil {
				t.Fatal(err)
			}
			now, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			key := newKeys(sp).throttles()
			var kept []string
			for i, ago := range tc.seedAgo {
				at := now.Add(-ago).UnixMicro()
				member := fmt.Sprintf("%d:seed%d", at, i)
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(at), Member: member}).Err(); err != nil {
					t.Fatal(err)
				}
				if ago < window {
					kept = append(kept, member)
				}
			}
			var n int
			if tc.record {
				n, err = g.Record429(ctx)
			} else {
				n, err = g.Count(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantCount {
				t.Errorf("count %d, want %d", n, tc.wantCount)
			}
			wantLog(t, c, key, tc.wantCount, kept)
			if len(kept) != tc.wantKept {
				t.Fatalf("test table: %d seeded entries inside the window, want %d", len(kept), tc.wantKept)
			}
			if tc.record {
				ttl, err := c.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= window-time.Minute || ttl > window {
					t.Errorf("log TTL %s, want about the window %s", ttl, window)
				}
			}
		})
	}
}

// wantLog checks that the 429 log holds n entries, kept among them.
func wantLog(t *testing.T, c redis.UniversalClient, key string, n int, kept []string) {
	t.Helper()
	all, err := c.ZRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Errorf("log holds %v, want %d entries", all, n)
	}
	got := map[string]bool{}
	for _, m := range all {
		got[m] = true
	}
	for _, m := range kept {
		if !got[m] {
			t.Errorf("entry %s inside the window was trimmed", m)
		}
	}
}
