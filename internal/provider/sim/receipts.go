package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"smsgw/internal/provider/httpprov"
)

// Receipts makes the simulator post a delivery receipt of the generic
// protocol for every message it accepts (never for a replay), signed as
// the gateway checks it, so that the demo and the tests show the whole
// story: delivered or undelivered, late, repeated, or early (before the
// send's own answer).
type Receipts struct {
	// URLs are the gateway's receipt endpoints (…/v1/receipts/http); each
	// post goes to one at random and a failed post is tried at another.
	// Empty: no receipts.
	URLs   []string
	Secret string // provider.receipt_secret

	Delay            time.Duration // after the accept; the early ones go at once
	UndeliveredShare float64       // share of receipts saying undelivered, [0, 1]
	Duplicates       int           // extra posts of each receipt (a vendor's retries and replays)
	// EarlyShare is the share of receipts posted before the send's answer
	// is written: the gateway cannot have recorded sent yet.
	EarlyShare float64
	// Attempts bounds the posts of one receipt while the gateway does not
	// take it (down, 5xx); default 20, one a second.
	Attempts int
}

// maxPending bounds the receipts waiting to be posted; more are dropped
// and counted (Stats.ReceiptsDropped).
const maxPending = 100_000

// receiptWorkers post receipts concurrently.
const receiptWorkers = 8

func (r *Receipts) validate() error {
	for name, v := range map[string]float64{"undelivered_share": r.UndeliveredShare, "early_share": r.EarlyShare} {
		if v < 0 || v > 1 || v != v {
			return fmt.Errorf("receipts %s %v: want a share in [0, 1]", name, v)
		}
	}
	if r.Delay < 0 || r.Duplicates < 0 || r.Attempts < 0 {
		return errors.New("receipts: delay, duplicates and attempts must not be negative")
	}
	if len(r.URLs) > 0 && r.Secret == "" {
		return errors.New("receipts: a secret is required to sign them")
	}
	if r.Attempts == 0 {
		r.Attempts = 20
	}
	return nil
}

// receiptJob is one receipt to post (with its repeats) once due.
type receiptJob struct {
	due  time.Time
	body []byte
}

// poster posts receipts in the background.
type poster struct {
	cfg    Receipts
	client *http.Client
	jobs   chan receiptJob
	done   <-chan struct{}
	wg     sync.WaitGroup

	mu                      sync.Mutex
	posted, failed, dropped int
}

func newPoster(cfg Receipts, done <-chan struct{}) *poster {
	p := &poster{cfg: cfg, client: &http.Client{Timeout: 5 * time.Second}, jobs: make(chan receiptJob, maxPending), done: done}
	for range receiptWorkers {
		p.wg.Go(p.work)
	}
	return p
}

// receiptFor decides a record's receipt status when it is accepted.
func (r *Receipts) statusFor() string {
	if rand.Float64() < r.UndeliveredShare {
		return "undelivered"
	}
	return "delivered"
}

func (p *poster) encode(rec Record) []byte {
	b, _ := json.Marshal(httpprov.ReceiptBody{ProviderMessageID: rec.ID, Reference: rec.Reference,
		Status: rec.Receipt, At: rec.At.UTC()})
	return b
}

// early reports whether this receipt goes before the send's answer.
func (p *poster) early() bool { return rand.Float64() < p.cfg.EarlyShare }

// postNow posts rec's receipt from the send handler, before its answer:
// one round, bounded, whatever happens to the send's own request; a
// receipt the gateway did not take then is posted later like the others.
func (p *poster) postNow(ctx context.Context, rec Record) {
	body := p.encode(rec)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n := p.cfg.Duplicates
	if p.try(ctx, body, 1) {
		p.count(true)
	} else {
		n++
	}
	p.queue(receiptJob{due: time.Now().Add(p.cfg.Delay), body: body}, n)
}

// later queues rec's receipt for after the delay.
func (p *poster) later(rec Record) {
	p.queue(receiptJob{due: time.Now().Add(p.cfg.Delay), body: p.encode(rec)}, 1+p.cfg.Duplicates)
}

func (p *poster) queue(j receiptJob, n int) {
	for range n {
		select {
		case p.jobs <- j:
		default:
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
		}
	}
}

func (p *poster) work() {
	for {
		select {
		case <-p.done:
			return
		case j := <-p.jobs:
			if wait := time.Until(j.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-p.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-p.done:
				case <-ctx.Done():
				}
				cancel()
			}()
			p.post(ctx, j.body)
			cancel()
		}
	}
}

// post sends one receipt until the gateway takes it, Attempts rounds run
// out or ctx ends: each round tries every URL once, from a random one
// (another replica takes it when one is down), and waits a second before
// the next round.
func (p *poster) post(ctx context.Context, body []byte) {
	if !p.try(ctx, body, p.cfg.Attempts) {
		p.count(false)
		return
	}
	p.count(true)
}

func (p *poster) try(ctx context.Context, body []byte, rounds int) bool {
	sig := httpprov.SignReceipt(p.cfg.Secret, body)
	urls := p.cfg.URLs
	for round := range rounds {
		if round > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(time.Second):
			}
		}
		first := rand.N(len(urls))
		for i := range urls {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[(first+i)%len(urls)], bytes.NewReader(body))
			if err != nil {
				return false
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(httpprov.HeaderReceiptSignature, sig)
			resp, err := p.client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					return true
				}
			}
		}
	}
	return false
}

func (p *poster) count(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.posted++
	} else {
		p.failed++
	}
}

func (p *poster) stats() (posted, failed, dropped int) {
	if p == nil {
		return 0, 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posted, p.failed, p.dropped
}
