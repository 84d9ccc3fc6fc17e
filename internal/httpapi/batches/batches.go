// Package batches answers GET and DELETE /v1/batches/{id}: a producer
// follows and cancels the messages one batch request stored, by the batch
// id its answer gave (sms.Message.BatchID), through the queue's index of
// batches (queue.Batches). A producer sees only its own batches: another
// producer's id reads as missing, as a message id does.
package batches

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ErrNotFound answers an id that names no batch of the producer (a
// malformed one, another producer's, one past its retention).
var ErrNotFound = fmt.Errorf("no such batch: %w", queue.ErrNotFound)

// View is the answer of GET /v1/batches/{id}: the batch's messages
// counted by the status a reader is told (sms.Message.StatusAt).
type View struct {
	ID     string             `json:"id"`
	Total  int                `json:"total"`
	Counts map[sms.Status]int `json:"counts"`
}

// Canceled is the answer of DELETE /v1/batches/{id}.
type Canceled struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
	// Canceled counts the batch's messages canceled, by this call or an
	// earlier one (a message canceled on its own too): none of them is
	// ever sent.
	Canceled int `json:"canceled"`
	// NotCancelable counts the others by status: each was sending or done
	// when its cancel was decided (the answer DELETE /v1/messages/{id}
	// gives as 409), and is sent at most once.
	NotCancelable map[sms.Status]int `json:"not_cancelable"`
}

// Queue is the queue as the handlers use it: a message canceled, and a
// batch's messages read when it keeps batches (queue.Batches).
type Queue interface {
	Cancel(ctx context.Context, id, producer string) (*sms.Message, error)
}

// API is the two handlers and what they need of the HTTP layer.
type API struct {
	Queue    Queue
	Now      func() time.Time
	Producer func(r *http.Request) string                    // the authenticated producer's name
	Fail     func(http.ResponseWriter, *http.Request, error) // answers a problem
	OK       func(http.ResponseWriter, any)                  // answers 200 with a JSON body
	// CanceledBy, when set, is called with how many messages one DELETE
	// canceled (the metric of batch cancels).
	CanceledBy func(n int)
}

// workers bounds the cancels of one request in flight at once:
// a batch holds up to 1,000 messages, each one round trip on Redis.
const workers = 8

// Get is GET /v1/batches/{id}.
func (a *API) Get(w http.ResponseWriter, r *http.Request) {
	id, ms, err := a.messages(r)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	now := a.Now()
	v := View{ID: id, Total: len(ms), Counts: map[sms.Status]int{}}
	for _, m := range ms {
		v.Counts[m.StatusAt(now)]++
	}
	a.OK(w, v)
}

// Delete is DELETE /v1/batches/{id}: every message of the batch not yet
// sending is canceled, each by the queue's Cancel, the atomic step of
// DELETE /v1/messages/{id}: against the send loop's take exactly one of
// them wins, so a message is either canceled and never sent, or counted
// not cancelable and sent at most once. A message read done is counted as
// read (a done message never changes back); the others (queued, or
// sending, which a failed try may queue again) are each given to Cancel.
func (a *API) Delete(w http.ResponseWriter, r *http.Request) {
	id, ms, err := a.messages(r)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	producer, now := a.Producer(r), a.Now()
	v := Canceled{ID: id, NotCancelable: map[sms.Status]int{}}
	var (
		mu       sync.Mutex
		canceled int // by this call
	)
	count := func(m *sms.Message, byThis bool) {
		mu.Lock()
		defer mu.Unlock()
		v.Total++
		switch st := m.StatusAt(now); {
		case byThis:
			v.Canceled++
			canceled++
		case st == sms.StatusCanceled:
			v.Canceled++
		default:
			v.NotCancelable[st]++
		}
	}
	var open []*sms.Message
	for _, m := range ms {
		if m.Status.Done() {
			count(m, false)
		} else {
			open = append(open, m)
		}
	}
	err = each(r.Context(), open, func(ctx context.Context, m *sms.Message) error {
		c, err := a.Queue.Cancel(ctx, m.ID, producer)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			return nil
		case errors.Is(err, queue.ErrNotCancelable) && c != nil:
			count(c, false)
		case err != nil:
			return err
		default:
			count(c, true)
		}
		return nil
	})
	if a.CanceledBy != nil && canceled > 0 {
		a.CanceledBy(canceled)
	}
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	a.OK(w, v)
}

// messages reads the {id} route parameter and the producer's messages of
// that batch.
func (a *API) messages(r *http.Request) (string, []*sms.Message, error) {
	id := chi.URLParam(r, "id")
	b, ok := a.Queue.(queue.Batches)
	if !sms.ValidBatchID(id) || !ok {
		return id, nil, ErrNotFound
	}
	ms, err := b.BatchMessages(r.Context(), a.Producer(r), id)
	if errors.Is(err, queue.ErrNotFound) {
		return id, nil, ErrNotFound
	}
	return id, ms, err
}

// each runs fn for every message, workers at a time, and returns the
// first error (the rest are then left alone).
func each(ctx context.Context, ms []*sms.Message, fn func(context.Context, *sms.Message) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan *sms.Message)
	var wg sync.WaitGroup
	for range min(workers, len(ms)) {
		wg.Go(func() {
			for m := range next {
				if err := fn(ctx, m); err != nil {
					cancel(err)
				}
			}
		})
	}
	for _, m := range ms {
		if ctx.Err() != nil {
			break
		}
		next <- m
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
