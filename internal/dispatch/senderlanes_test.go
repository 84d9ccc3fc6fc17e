package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestHeldSenderBacklogNotMetByTakes: with 2,000 messages of a 1/s sender
// ahead in line, another sender's message of the same class is sent at
// once, and the send loop put the slow sender's messages back only a few
// times meanwhile: its lane is held in the queue, so a take passes its
// backlog over instead of taking and putting back its messages one by
// one.
func TestHeldSenderBacklogNotMetByTakes(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	cfg := defaultLimits
	cfg.Senders = map[string]limiter.Rate{"Slow": {PerSecond: 1, Burst: 1}}
	lim := acct.limiter(t, nil, cfg)
	var mu sync.Mutex
	sent := map[string]int{}
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		sent[req.From]++
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	slow := make([]*sms.Message, 2000)
	for i := range slow {
		slow[i] = newMsg(sms.ClassMarketing)
		slow[i].From = "Slow"
	}
	enqueue(t, q, slow...)
	other := newMsg(sms.ClassMarketing)
	other.From = "Other"
	enqueue(t, q, other)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, Pacing: cfg})
	waitTerminal(t, q, other.ID)
	took := time.Since(start)
	waits := value(d.sm.waits.WithLabelValues("Slow", requeueSenderLimit))
	mu.Lock()
	slowSent := sent["Slow"]
	mu.Unlock()
	t.Logf("the other sender's message sent %s after start; the slow sender had sent %d and been put back %v times", took, slowSent, waits)
	if slowSent > 3 {
		t.Errorf("the slow sender sent %d before the other sender's message: more than its 1/s allows", slowSent)
	}
	// Every take of a slow message beyond the first of each slot is one
	// put back; without a held lane there would be about one per message
	// queued ahead.
	if waits > 10 {
		t.Errorf("the slow sender's messages were put back %v times before the other's was sent: the take met its backlog", waits)
	}
}
