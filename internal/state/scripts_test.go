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

// TestIdempotencyScripts is a state table for acquireScript and
// finishScript on real Redis: seed the answer and lock keys, call through
// the wrapper, compare both keys (value and TTL) afterwards.
func TestIdempotencyScripts(t *testing.T) {
	t.Parallel()
	stored := Answer{Hash: "h", Status: 202, Body: []byte(`{"id":"m1"}`), Location: "/v1/messages/m1"}
	storedJSON, _ := json.Marshal(stored)
	const window = time.Hour
	type keyState struct {
		val string        // "" absent
		ttl time.Duration // 0: any (only checked when the key is present)
	}
	cases := []struct {
		name        string
		answer      string // seeded answer JSON ("" none)
		lock        string // seeded lock token ("" none)
		call        string // "acquire" | "finish" | "finish-answer"
		token       string // the caller's token for finish
		wantAnswer  bool   // acquire returned the stored answer
		wantToken   bool   // acquire took the lock
		after       [2]keyState
		lockIsToken bool // the lock now holds the token acquire returned
	}{
		{name: "acquire, nothing stored: takes the lock", call: "acquire", wantToken: true,
			after: [2]keyState{{}, {ttl: time.Minute}}, lockIsToken: true},
		{name: "acquire, answer stored: the answer, lock untouched", answer: string(storedJSON), lock: "other", call: "acquire",
			wantAnswer: true, after: [2]keyState{{val: string(storedJSON)}, {val: "other"}}},
		{name: "acquire, locked: in flight, nothing written", lock: "other", call: "acquire",
			after: [2]keyState{{}, {val: "other"}}},
		{name: "finish nil with the lock: released", lock: "mine", call: "finish", token: "mine",
			after: [2]keyState{{}, {}}},
		{name: "finish nil, lock passed on: left alone", lock: "other", call: "finish", token: "mine",
			after: [2]keyState{{}, {val: "other"}}},
		{name: "finish answer with the lock: stored for the window, released", lock: "mine", call: "finish-answer", token: "mine",
			after: [2]keyState{{val: string(storedJSON), ttl: window}, {}}},
		{name: "finish answer, lock passed on: stored, lock left alone", lock: "other", call: "finish-answer", token: "mine",
			after: [2]keyState{{val: string(storedJSON), ttl: window}, {val: "other"}}},
		{name: "finish answer, no lock: stored", call: "finish-answer", token: "mine",
			after: [2]keyState{{val: string(storedJSON), ttl: window}, {}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := redistest.Client(t)
			sp := newSpace(t)
			s, err := NewRedisIdempotency(c, sp, window)
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
				a, token, err = s.Acquire(ctx, "key", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if (a != nil) != tc.wantAnswer || (token != "") != tc.wantToken {
					t.Fatalf("Acquire = %+v, %q; want answer %v, token %v", a, token, tc.wantAnswer, tc.wantToken)
				}
				if a != nil && (a.Status != stored.Status || string(a.Body) != string(stored.Body) || a.Location != stored.Location) {
					t.Fatalf("answer %+v, want %+v", a, stored)
				}
			case "finish":
				err = s.Finish(ctx, "key", tc.token, nil)
			case "finish-answer":
				err = s.Finish(ctx, "key", tc.token, &stored)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.after {
				if i == 1 && tc.lockIsToken {
					want.val = token
				}
				got, err := c.Get(ctx, names[i]).Result()
				if err == redis.Nil {
					got = ""
				} else if err != nil {
					t.Fatal(err)
				}
				if got != want.val {
					t.Errorf("%s = %q, want %q", names[i], got, want.val)
				}
				if got != "" && want.ttl > 0 {
					ttl := c.PTTL(ctx, names[i]).Val()
					if ttl <= want.ttl-time.Minute || ttl > want.ttl {
						t.Errorf("%s TTL %s, want about %s", names[i], ttl, want.ttl)
					}
				}
			}
		})
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
			all, err := c.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != tc.wantCount {
				t.Errorf("log holds %v, want %d entries", all, tc.wantCount)
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
