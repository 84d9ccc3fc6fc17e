package dispatch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// slowSenderRig is a Redis queue and limiter of a fresh account whose
// sender "Slow" is limited to 1/s, and a provider that records when each
// sender sent.
type slowSenderRig struct {
	q    queue.Queue
	lim  limiter.Limiter
	cfg  limiter.Config
	p    provider.Provider
	sent recorded[time.Time] // when each sender sent, so far
}

func newSlowSenderRig(t *testing.T) *slowSenderRig {
	t.Helper()
	acct := newAccount(t)
	r := &slowSenderRig{q: acct.queue(t, nil), cfg: defaultLimits}
	r.cfg.Senders = map[string]limiter.Rate{"Slow": {PerSecond: 1, Burst: 1}}
	r.lim = acct.limiter(t, nil, r.cfg)
	r.p = funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		r.sent.add(req.From, time.Now())
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	return r
}

// recorded is what a test stand-in saw, by key (a class, a sender), safe
// for the send loop's goroutines. The zero value is ready.
type recorded[V any] struct {
	mu sync.Mutex
	m  map[string][]V
}

func (r *recorded[V]) add(key string, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string][]V{}
	}
	r.m[key] = append(r.m[key], v)
}

// of is what was recorded under key so far.
func (r *recorded[V]) of(key string) []V {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.m[key])
}

// TestHeldSenderBacklogNotMetByTakes: with 2,000 messages of a 1/s sender
// ahead in line, another sender's message of the same class is sent at
// once, and the send loop put the slow sender's messages back only a few
// times meanwhile: its lane is held in the queue, so a take passes its
// backlog over instead of taking and putting back its messages one by
// one.
func TestHeldSenderBacklogNotMetByTakes(t *testing.T) {
	t.Parallel()
	r := newSlowSenderRig(t)
	slow := make([]*sms.Message, 2000)
	for i := range slow {
		slow[i] = newMsg(sms.ClassMarketing)
		slow[i].From = "Slow"
	}
	enqueue(t, r.q, slow...)
	other := newMsg(sms.ClassMarketing)
	other.From = "Other"
	enqueue(t, r.q, other)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: r.q, Limiter: r.lim, Provider: r.p, Pacing: r.cfg})
	waitTerminal(t, r.q, other.ID)
	took := time.Since(start)
	waits := value(d.sm.waits.WithLabelValues("Slow", requeueSenderLimit))
	slowSent := len(r.sent.of("Slow"))
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
