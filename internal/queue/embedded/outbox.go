package embedded

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// eventRecord is the value of the cbev bucket: the storage schema of one
// event, short names, times in Unix ms.
type eventRecord struct {
	Message     string `json:"m"`
	Producer    string `json:"p"`
	CallbackURL string `json:"u,omitempty"`
	Status      string `json:"s"` // status word
	Reference   string `json:"r,omitempty"`
	Class       uint8  `json:"c"` // class code (queue.ClassCode)
	Segments    int    `json:"g,omitempty"`
	ProviderID  string `json:"pm,omitempty"`
	ErrorCode   string `json:"ec,omitempty"`
	ErrorReason string `json:"er,omitempty"`
	At          int64  `json:"t"`            // status change; also the start of its max age unless AgeFrom
	AgeFrom     int64  `json:"ta,omitempty"` // start of its max age after an operator's retry
	Due         int64  `json:"du"`           // its key in cbdue
	Attempts    int    `json:"n,omitempty"`
	LastError   string `json:"le,omitempty"`
	Token       string `json:"lt,omitempty"`
	Dead        bool   `json:"d,omitempty"`
	DeadAt      int64  `json:"td,omitempty"`
	// A reply's event (replies.go): kind "r", the recipient's number, our
	// number and the text; Message is the reply's id.
	Kind string `json:"k,omitempty"`
	From string `json:"fr,omitempty"`
	To   string `json:"to,omitempty"`
	Text string `json:"tx,omitempty"`
}

// addEvent is the one writer of the outbox: every transaction whose
// transition ends or changes a message's visible status calls it in the
// same transaction, after the change. It writes nothing for a message
// without Callbacks.
func addEvent(tx *bolt.Tx, m *sms.Message, status sms.Status, code string, now int64) error {
	if !m.Callbacks {
		return nil
	}
	b := tx.Bucket(bCbEvents)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	class, _ := queue.ClassCode(m.Class) // 0 for a class without a code
	id := "evt_" + m.ID[min(4, len(m.ID)):] + "_" + strconv.FormatUint(seq, 10)
	r := eventRecord{
		Message: m.ID, Producer: m.Producer, CallbackURL: m.CallbackURL, Status: string(status),
		Reference: m.Reference, Class: class, Segments: m.Segments, ProviderID: m.ProviderID,
		At: now, Due: now,
	}
	if code != "" {
		r.ErrorCode, r.ErrorReason = code, m.LastError
	}
	return putNewEvent(tx, id, &r, now)
}

// putNewEvent stores a new event r, due now and counted in the backlog.
func putNewEvent(tx *bolt.Tx, id string, r *eventRecord, now int64) error {
	if err := putEvent(tx, id, r); err != nil {
		return err
	}
	if err := tx.Bucket(bCbDue).Put(timeKey(now, id), nil); err != nil {
		return err
	}
	if err := addCount(tx.Bucket(bCounts), countBacklog, 1); err != nil {
		return err
	}
	return tx.Bucket(bCbAge).Put(timeKey(now, id), nil)
}

// Counters of the outbox in the counts bucket (3-byte keys, apart from the
// classes' 2-byte ones).
var (
	countBacklog    = []byte("cbb")
	countDeadEvents = []byte("cbd")
)

// ageKey is the time of its key in cbage: when its max age started.
func (r *eventRecord) ageKey() int64 {
	if r.AgeFrom != 0 {
		return r.AgeFrom
	}
	return r.At
}

func putEvent(tx *bolt.Tx, id string, r *eventRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return tx.Bucket(bCbEvents).Put([]byte(id), v)
}

func getEvent(tx *bolt.Tx, id string) (*eventRecord, error) {
	v := tx.Bucket(bCbEvents).Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	var r eventRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("event %s: %w", id, err)
	}
	return &r, nil
}

func (r *eventRecord) event(id string) *queue.Event {
	if r.Kind == replyKind {
		return r.replyEvent(id)
	}
	class, ok := queue.CodeClass(r.Class)
	if !ok {
		class = sms.ClassOTP
	}
	return &queue.Event{
		ID: id, MessageID: r.Message, Producer: r.Producer, CallbackURL: r.CallbackURL,
		Status: sms.Status(r.Status), Reference: r.Reference, Class: class, Segments: r.Segments,
		ProviderID: r.ProviderID, ErrorCode: r.ErrorCode, ErrorReason: r.ErrorReason, At: queue.FromMs(r.At),
		Attempts: r.Attempts, LastError: r.LastError, Dead: r.Dead, DeadAt: queue.FromMs(r.DeadAt),
	}
}

// RecordSent stores m, sent outside the queue (the OTP fast path), as a
// sent message's final record with its provider id indexed and its event,
// a receipt kept early for it applied, in one transaction as Complete
// does; see queue.Queue.
func (q *Queue) RecordSent(ctx context.Context, m *sms.Message) (sms.Status, error) {
	var stored sms.Status
	err := q.update(ctx, func(tx *bolt.Tx) error {
		stored = ""
		if storedID(tx, m.ID) {
			return nil // stored already: the first record stays
		}
		now := q.now()
		sent := *m
		sent.Status, sent.Attempts = sms.StatusSent, max(m.Attempts, 1)
		sent.SentAt, sent.UpdatedAt = now, now
		st, code, early, err := takeEarly(tx, m.ID)
		if err != nil {
			return err
		}
		if early {
			sent.Status = st
			if code != "" {
				sent.LastError = code
			}
		}
		v, err := queue.EncodeFinal(&sent)
		if err != nil {
			return err
		}
		if err := indexProviderID(tx, sent.ProviderID, sent.ID); err != nil {
			return err
		}
		if err := addEvent(tx, &sent, sent.Status, queue.EventErrorCode(sent.Status, false), ms(now)); err != nil {
			return err
		}
		stored = sent.Status
		return tx.Bucket(bFinal).Put(finalKey(sent.ID), []byte(v))
	})
	if err != nil {
		return "", fmt.Errorf("queue: record sent %s: %w", m.ID, err)
	}
	return stored, nil
}

// ClaimEvents leases up to max due events; see queue.Outbox.
func (q *Queue) ClaimEvents(ctx context.Context, owner string, lease time.Duration, max int) ([]*queue.LeasedEvent, error) {
	if lease <= 0 || max < 1 {
		return nil, errors.New("queue: claim events: lease and max must be positive")
	}
	token := owner + ":" + rand.Text()
	var out []*queue.LeasedEvent
	err := q.update(ctx, func(tx *bolt.Tx) error {
		out = out[:0]
		now := ms(q.now())
		due := tx.Bucket(bCbDue)
		for _, k := range dueKeys(tx, bCbDue, now, max) {
			id := timeKeyID(k)
			if err := due.Delete(k); err != nil {
				return err
			}
			r, err := getEvent(tx, id)
			if err != nil {
				return err
			}
			if r == nil {
				continue
			}
			r.Token = token
			r.Due = now + durMs(lease)
			if err := due.Put(timeKey(r.Due, id), nil); err != nil {
				return err
			}
			if err := putEvent(tx, id, r); err != nil {
				return err
			}
			out = append(out, &queue.LeasedEvent{Event: r.event(id), Token: token})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: claim events: %w", err)
	}
	return out, nil
}

// held runs fn on the event le claims, inside a group commit, only while
// the claim is held; otherwise ErrLeaseLost and nothing changes.
func (q *Queue) held(ctx context.Context, verb string, le *queue.LeasedEvent, fn func(tx *bolt.Tx, r *eventRecord, now int64) error) error {
	id := le.Event.ID
	var lost bool
	err := q.update(ctx, func(tx *bolt.Tx) error {
		lost = false
		r, err := getEvent(tx, id)
		if err != nil {
			return err
		}
		if r == nil || r.Dead || r.Token != le.Token {
			lost = true
			return nil
		}
		if err := tx.Bucket(bCbDue).Delete(timeKey(r.Due, id)); err != nil {
			return err
		}
		return fn(tx, r, ms(q.now()))
	})
	if err != nil {
		return fmt.Errorf("queue: %s %s: %w", verb, id, err)
	}
	if lost {
		return fmt.Errorf("queue: %s %s: %w", verb, id, queue.ErrLeaseLost)
	}
	return nil
}

// AckEvent removes a delivered event; see queue.Outbox.
func (q *Queue) AckEvent(ctx context.Context, le *queue.LeasedEvent) error {
	return q.held(ctx, "ack event", le, func(tx *bolt.Tx, r *eventRecord, _ int64) error {
		if err := tx.Bucket(bCbAge).Delete(timeKey(r.ageKey(), le.Event.ID)); err != nil {
			return err
		}
		if err := addCount(tx.Bucket(bCounts), countBacklog, -1); err != nil {
			return err
		}
		return tx.Bucket(bCbEvents).Delete([]byte(le.Event.ID))
	})
}

// deadEventsKept bounds how long dead events stay listed; each death
// prunes a few older than this.
const deadEventsKept = 7 * 24 * time.Hour

// RetryEvent ends a claim without delivery; see queue.Outbox.
func (q *Queue) RetryEvent(ctx context.Context, le *queue.LeasedEvent, o queue.EventRetry) (bool, error) {
	var dead bool
	id := le.Event.ID
	err := q.held(ctx, "retry event", le, func(tx *bolt.Tx, r *eventRecord, now int64) error {
		dead = false
		r.Token = ""
		if o.SpendAttempt {
			r.Attempts++
		}
		if o.LastError != "" {
			r.LastError = o.LastError[:min(len(o.LastError), queue.MaxEventError)]
		}
		r.Due = now + durMs(max(o.After, 0))
		from := r.At
		if r.AgeFrom != 0 {
			from = r.AgeFrom
		}
		if r.Due <= from+durMs(o.MaxAge) {
			if err := tx.Bucket(bCbDue).Put(timeKey(r.Due, id), nil); err != nil {
				return err
			}
			return putEvent(tx, id, r)
		}
		dead = true
		r.Dead, r.DeadAt, r.Due = true, now, 0
		if err := tx.Bucket(bCbAge).Delete(timeKey(r.ageKey(), id)); err != nil {
			return err
		}
		if err := addCount(tx.Bucket(bCounts), countBacklog, -1); err != nil {
			return err
		}
		if err := addCount(tx.Bucket(bCounts), countDeadEvents, 1); err != nil {
			return err
		}
		dl := tx.Bucket(bCbDead)
		for _, k := range dueKeys(tx, bCbDead, now-durMs(deadEventsKept), 8) {
			if err := dl.Delete(k); err != nil {
				return err
			}
			if err := addCount(tx.Bucket(bCounts), countDeadEvents, -1); err != nil {
				return err
			}
			if err := tx.Bucket(bCbEvents).Delete(k[8:]); err != nil {
				return err
			}
		}
		if err := dl.Put(timeKey(now, id), nil); err != nil {
			return err
		}
		return putEvent(tx, id, r)
	})
	return dead, err
}

// DeadEvents lists dead events; see queue.Outbox.
func (q *Queue) DeadEvents(ctx context.Context, limit int) ([]*queue.Event, error) {
	var out []*queue.Event
	err := q.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bCbDead).Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			r, err := getEvent(tx, timeKeyID(k))
			if err != nil {
				return err
			}
			if r != nil {
				out = append(out, r.event(timeKeyID(k)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: dead events: %w", err)
	}
	return out, nil
}

// RetryDeadEvent makes a dead event due now; see queue.Outbox. Its max age
// counts from the retry; its id and body stay the same.
func (q *Queue) RetryDeadEvent(ctx context.Context, id string) error {
	var found bool
	err := q.update(ctx, func(tx *bolt.Tx) error {
		found = false
		r, err := getEvent(tx, id)
		if err != nil || r == nil || !r.Dead {
			return err
		}
		found = true
		if err := tx.Bucket(bCbDead).Delete(timeKey(r.DeadAt, id)); err != nil {
			return err
		}
		now := ms(q.now())
		r.Dead, r.DeadAt, r.Attempts, r.Token, r.AgeFrom, r.Due = false, 0, 0, "", now, now
		if err := tx.Bucket(bCbDue).Put(timeKey(now, id), nil); err != nil {
			return err
		}
		if err := tx.Bucket(bCbAge).Put(timeKey(now, id), nil); err != nil {
			return err
		}
		if err := addCount(tx.Bucket(bCounts), countBacklog, 1); err != nil {
			return err
		}
		if err := addCount(tx.Bucket(bCounts), countDeadEvents, -1); err != nil {
			return err
		}
		return putEvent(tx, id, r)
	})
	if err != nil {
		return fmt.Errorf("queue: retry dead event: %w", err)
	}
	if !found {
		return fmt.Errorf("queue: retry dead event: %w", queue.ErrNotFound)
	}
	return nil
}

// OutboxStats reads the outbox's depth; see queue.Outbox.
func (q *Queue) OutboxStats(ctx context.Context) (queue.OutboxStats, error) {
	var s queue.OutboxStats
	err := q.view(ctx, func(tx *bolt.Tx) error {
		s.Backlog = getCount(tx.Bucket(bCounts), countBacklog)
		s.Dead = getCount(tx.Bucket(bCounts), countDeadEvents)
		if k, _ := tx.Bucket(bCbAge).Cursor().First(); k != nil {
			s.OldestAge = max(q.now().Sub(queue.FromMs(timeKeyAt(k))), 0)
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("queue: outbox stats: %w", err)
	}
	return s, nil
}
