package webhook

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/queue/embedded"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// BenchmarkCallbackDelivery measures what one replica delivers to a local
// receiver that answers 204 at once: events written to the embedded
// outbox (b.N of them), then claimed, signed, posted and acked. The
// figure is events/s; each op is one event delivered.
func BenchmarkCallbackDelivery(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		q, err := embedded.Open(embedded.Config{Path: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = q.Close() })
		benchDelivery(b, q)
	})
	b.Run("redis", func(b *testing.B) {
		q, err := redisq.New(redisq.Config{Client: redistest.Client(b), Account: redistest.Prefix(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = q.Close() })
		benchDelivery(b, q)
	})
}

func benchDelivery(b *testing.B, q outboxQueue) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	f := newFixtureOn(b, q, map[string]string{"notify": srv.URL + "/hook"}, func(c *Config) { c.Workers, c.PerEndpoint = 64, 64 })
	ctx := b.Context()
	for range b.N {
		m := smstest.Message("notify", sms.ClassTransactional)
		m.Callbacks = true
		m.ProviderID = "pm"
		if _, err := f.q.RecordSent(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	f.run(b)
	for {
		s, err := f.q.OutboxStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.Backlog == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	if got.Load() < int64(b.N) {
		b.Fatalf("receiver got %d of %d", got.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
}
