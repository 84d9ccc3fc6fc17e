package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// BenchmarkSendLoop measures messages/s through take → reserve → send →
// complete with an unlimited provider and limiter, on a real Redis queue
// and the real Redis limiter, and the Redis round trips per delivered
// message (counted by a hook on the dispatcher's client; enqueueing and
// waiting use another client). As in production, every message carries
// its number's id and every take reads the suppression list (none of
// the numbers is on it).
func BenchmarkSendLoop(b *testing.B) {
	unlimited := limiter.Config{Global: limiter.Rate{PerSecond: 1e6, Burst: 1000}}
	for _, bc := range []struct {
		name     string
		provider func(b *testing.B) provider.Provider
	}{
		{"func", func(*testing.B) provider.Provider {
			return funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
				return provider.Result{ProviderID: "x"}, nil
			})
		}},
		{"sim-http", func(b *testing.B) provider.Provider {
			_, p, _ := startSim(b, sim.Config{Limit: 0})
			return p
		}},
	} {
		for _, replicas := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/replicas=%d", bc.name, replicas), func(b *testing.B) {
				acct := newAccount(b)
				producer := acct.queue(b, nil)
				list := acct.suppression(b)
				n := b.N
				ms := make([]*sms.Message, 0, 1000)
				for i := range n {
					m := newMsg(sms.ClassTransactional)
					m.NumberID = fmt.Sprintf("%032x", i)
					ms = append(ms, m)
					if len(ms) == cap(ms) || i == n-1 {
						enqueue(b, producer, ms...)
						ms = ms[:0]
					}
				}
				p := bc.provider(b)
				c, hook := countedClient(b)
				b.ResetTimer()
				start := time.Now()
				for i := range replicas {
					newDispatcher(b, Config{Queue: acct.queue(b, c), Limiter: acct.limiter(b, c, unlimited), Provider: p,
						Owner: fmt.Sprint("bench", i), Workers: 16, Suppression: list})
				}
				waitDrained(b, producer)
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
				b.ReportMetric(float64(hook.N())/float64(n), "redis_rt/msg")
			})
		}
	}
}

// waitDrained waits until the queue holds nothing ready or leased.
func waitDrained(b *testing.B, q queue.Queue) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := q.Stats(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		left := int64(0)
		for _, cs := range st {
			left += cs.Ready + cs.Scheduled + cs.Leased
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d messages left after 5 minutes", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
