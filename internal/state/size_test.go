package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

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
