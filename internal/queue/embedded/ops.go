package embedded

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Limits that keep every key well inside bbolt's key size.
const (
	maxIDLen       = 128
	maxProducerLen = 256
	maxIdemKeyLen  = 1024
	// chunk bounds the work of one Recover or Prune transaction.
	chunk = 1000
)

var errInvalid = errors.New("invalid message")

func validate(m *sms.Message) error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: nil", errInvalid)
	case m.ID == "" || len(m.ID) > maxIDLen:
		return fmt.Errorf("%w: id %q", errInvalid, m.ID)
	case !m.Class.Valid():
		return fmt.Errorf("%w: class %d", errInvalid, uint8(m.Class))
	case m.Producer == "" || len(m.Producer) > maxProducerLen:
		return fmt.Errorf("%w: producer must have 1 to %d bytes", errInvalid, maxProducerLen)
	case len(m.IdempotencyKey) > maxIdemKeyLen:
		return fmt.Errorf("%w: idempotency key longer than %d", errInvalid, maxIdemKeyLen)
	}
	return nil
}

// Enqueue stores m in one transaction; see queue.Queue.
func (q *Queue) Enqueue(ctx context.Context, m *sms.Message) (queue.EnqueueResult, error) {
	rs, err := q.EnqueueMany(ctx, []*sms.Message{m})
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	return rs[0], rs[0].Err
}

// EnqueueMany stores all of ms in one transaction (shared with whatever else
// is committing at the time). An invalid item gets its own Err; the others
// are stored.
func (q *Queue) EnqueueMany(ctx context.Context, ms []*sms.Message) ([]queue.EnqueueResult, error) {
	var results []queue.EnqueueResult
	err := q.update(ctx, func(tx *bolt.Tx) error {
		results = make([]queue.EnqueueResult, len(ms))
		now := q.now()
		for i, m := range ms {
			r, err := q.enqueueTx(tx, m, now)
			if err != nil {
				return err
			}
			results[i] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: enqueue %d: %w", len(ms), err)
	}
	return results, nil
}

// enqueueTx stores one message; a problem with the message itself is the
// item's Err, an error return is a storage failure.
func (q *Queue) enqueueTx(tx *bolt.Tx, m *sms.Message, now time.Time) (queue.EnqueueResult, error) {
	if err := validate(m); err != nil {
		return queue.EnqueueResult{Err: fmt.Errorf("queue: enqueue: %w", err)}, nil
	}
	nowMs := ms(now)
	idem := tx.Bucket(bIdem)
	var ik []byte
	if m.IdempotencyKey != "" {
		ik = idemKey(m.Producer, m.IdempotencyKey)
		if v := idem.Get(ik); len(v) > 8 && int64(binary.BigEndian.Uint64(v[:8]))+q.window.Milliseconds() > nowMs {
			first, err := getMessage(tx, string(v[8:]))
			if err != nil {
				return queue.EnqueueResult{}, err
			}
			// A first message already pruned leaves a stale entry: the key
			// is free again.
			if first != nil {
				return queue.EnqueueResult{Message: first, Existed: true}, nil
			}
		}
	}
	// the same id stored before (a retried enqueue) is not stored twice
	if stored, err := getMessage(tx, m.ID); err != nil || stored != nil {
		return queue.EnqueueResult{Message: stored, Existed: stored != nil}, err
	}
	if err := chargeBudget(tx, m.Producer, m.Budget); err != nil { // budget.go
		if _, over := err.(*queue.OverBudget); over {
			return queue.EnqueueResult{Err: err}, nil
		}
		return queue.EnqueueResult{}, err
	}
	seq, err := tx.Bucket(bMsgs).NextSequence()
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	r := &entry{Msg: *m, Seq: seq, Due: max(nowMs, msCeil(m.NotBefore))}
	r.Msg.Status = sms.StatusQueued
	r.Msg.Dead = false
	r.Msg.UpdatedAt = now
	if err := putEntry(tx, r); err != nil {
		return queue.EnqueueResult{}, err
	}
	if err := putReady(tx, r); err != nil {
		return queue.EnqueueResult{}, err
	}
	if err := addOut(tx, m.Producer, 1); err != nil {
		return queue.EnqueueResult{}, err
	}
	if err := putBatch(tx, m); err != nil {
		return queue.EnqueueResult{}, err
	}
	if err := countUsage(tx, &r.Msg, "", 1); err != nil {
		return queue.EnqueueResult{}, err
	}
	if ik != nil {
		if err := idem.Put(ik, append(u64(nowMs), m.ID...)); err != nil {
			return queue.EnqueueResult{}, err
		}
	}
	out := r.Msg
	return queue.EnqueueResult{Message: &out}, nil
}

func takeClasses(opt queue.TakeOptions) ([]sms.Class, error) {
	if opt.Lease <= 0 {
		return nil, fmt.Errorf("queue: take: lease %v must be positive", opt.Lease)
	}
	if opt.Classes == nil {
		return sms.Classes, nil
	}
	for _, c := range opt.Classes {
		if !c.Valid() {
			return nil, fmt.Errorf("queue: take: invalid class %d", uint8(c))
		}
	}
	return opt.Classes, nil
}

// head finds the first ready message among classes at now, in a lane not
// held (lanes.go), or else the wait until the earliest scheduled one, or
// the end of a hold (0 if none), and the class it found it in.
func head(tx *bolt.Tx, classes []sms.Class, now int64) (at *readyAt, cl sms.Class, wait time.Duration) {
	var next int64
	for _, cl := range classes {
		at, due := classHead(tx, cl, now)
		if at != nil {
			return at, cl, 0
		}
		if due != 0 && (next == 0 || due < next) {
			next = due
		}
	}
	if next == 0 {
		return nil, 0, 0
	}
	return nil, 0, time.Duration(next-now) * time.Millisecond
}

// Take leases the next ready message. A read-only look comes first so that
// idle takers polling an empty queue cost no fsync.
func (q *Queue) Take(ctx context.Context, opt queue.TakeOptions) (*queue.Leased, time.Duration, error) {
	classes, err := takeClasses(opt)
	if err != nil {
		return nil, 0, err
	}
	var wait time.Duration
	err = q.view(ctx, func(tx *bolt.Tx) error {
		var at *readyAt
		at, _, wait = head(tx, classes, ms(q.now()))
		if at == nil {
			return queue.ErrEmpty
		}
		return nil
	})
	if errors.Is(err, queue.ErrEmpty) {
		return nil, wait, queue.ErrEmpty
	}
	if err != nil {
		return nil, 0, fmt.Errorf("queue: take: %w", err)
	}
	sup := &suppressing{ctx: ctx, s: opt.Suppression}
	for {
		var leased *queue.Leased
		err = q.update(ctx, func(tx *bolt.Tx) error {
			leased, wait = nil, 0
			sup.reset()
			var err error
			leased, wait, err = takeTx(tx, classes, opt, q.now(), sup)
			return err
		})
		if err != nil {
			return nil, 0, fmt.Errorf("queue: take: %w", err)
		}
		sup.report()
		switch {
		case leased != nil:
			return leased, 0, nil
		case sup.err != nil:
			return nil, 0, fmt.Errorf("queue: take: suppression list: %w", sup.err)
		case !sup.more:
			return nil, wait, queue.ErrEmpty
		}
	}
}

// TakeMore leases up to most more messages in one commit; see queue.Queue.
func (q *Queue) TakeMore(ctx context.Context, opt queue.TakeOptions, most, units int) ([]*queue.Leased, error) {
	classes, err := takeClasses(opt)
	if err != nil || most <= 0 || units <= 0 {
		return nil, err
	}
	var out []*queue.Leased
	sup := &suppressing{ctx: ctx, s: opt.Suppression}
	for {
		err = q.update(ctx, func(tx *bolt.Tx) error {
			out = out[:0]
			sup.reset()
			now := q.now()
			from := classes
			for used := 0; len(out) < most && used < units; {
				l, _, err := takeTx(tx, from, opt, now, sup)
				if err != nil || l == nil {
					return err
				}
				out = append(out, l)
				used += max(l.Message.Segments, 1)
				from = []sms.Class{l.Message.Class} // the rest from the same class
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("queue: take more: %w", err)
		}
		sup.report()
		switch {
		case len(out) > 0:
			return out, nil
		case sup.err != nil:
			return nil, fmt.Errorf("queue: take more: suppression list: %w", sup.err)
		case !sup.more:
			return out, nil
		}
	}
}

// suppressing is what one take does with its Suppression across the
// takeTx calls of a transaction: the messages it ended suppressed, whether
// it stopped at queue.MaxSuppressedPerTake, and an error of the list
// (which stops it too). reset starts a transaction (a group commit may run
// one again); report tells Ended once the transaction is durable.
type suppressing struct {
	ctx   context.Context
	s     *queue.Suppression
	ended []*sms.Message
	more  bool  // stopped at MaxSuppressedPerTake: more may be ready
	err   error // the list could not be read: stopped before the message asked about
}

func (s *suppressing) reset() { s.ended, s.more, s.err = s.ended[:0], false, nil }

func (s *suppressing) report() {
	if s.s == nil || s.s.Ended == nil {
		return
	}
	for _, m := range s.ended {
		s.s.Ended(m)
	}
}

// stopped reports whether the take must not look at another message.
func (s *suppressing) stopped() bool { return s.more || s.err != nil }

// listed asks the list whether r's number is on it, when the list covers
// r (queue.Suppression). An error is kept in s.err: the caller leaves r
// where it is and stops.
func (s *suppressing) listed(r *entry) bool {
	m := &r.Msg
	if s.s == nil || s.s.Listed == nil || m.NumberID == "" || r.Parked != "" || !s.s.Covers(m.Class) {
		return false
	}
	found, err := s.s.Listed(s.ctx, []string{m.NumberID})
	switch {
	case err != nil:
		s.err = err
		return false
	case len(found) != 1:
		s.err = fmt.Errorf("%d answers for 1 id", len(found))
		return false
	}
	return found[0]
}

// takeTx leases the head of classes at now; nil (and how long until the
// next is due) when none is ready, or when sup stopped the take. A head
// whose number sup finds on the suppression list is ended suppressed on
// the way (suppressTx).
func takeTx(tx *bolt.Tx, classes []sms.Class, opt queue.TakeOptions, now time.Time, sup *suppressing) (*queue.Leased, time.Duration, error) {
	nowMs := ms(now)
	var r *entry
	for r == nil {
		if sup.stopped() {
			return nil, 0, nil
		}
		at, cl, wait := head(tx, classes, nowMs)
		if at == nil {
			return nil, wait, nil // another taker was first
		}
		id := string(tx.Bucket(at.bucket).Get(at.key))
		e, err := getEntry(tx, id)
		if err != nil {
			return nil, 0, err
		}
		live := e != nil && e.Msg.Status == sms.StatusQueued
		suppressed := live && sup.listed(e)
		if sup.err != nil {
			return nil, 0, nil // e stays queued where it is
		}
		if _, err := takeFrom(tx, at, cl); err != nil {
			return nil, 0, err
		}
		switch {
		case suppressed:
			if err := suppressTx(tx, e, now); err != nil {
				return nil, 0, err
			}
			sup.ended = append(sup.ended, &e.Msg)
			sup.more = len(sup.ended) >= queue.MaxSuppressedPerTake
		case live:
			// An index entry without its queued message (never written
			// so) is dropped, not handed out and not left to block its
			// class: as the Redis take script does.
			r = e
		}
	}
	if err := addClass(tx, r.Msg.Class, kindQueued, -1); err != nil {
		return nil, 0, err
	}
	id := r.Msg.ID
	r.Token = rand.Text()
	r.Owner = opt.Owner
	r.Lease = nowMs + durMs(opt.Lease)
	r.Msg.Status = sms.StatusSending
	r.Msg.UpdatedAt = now
	if err := tx.Bucket(bLeases).Put(timeKey(r.Lease, id), nil); err != nil {
		return nil, 0, err
	}
	if err := addClass(tx, r.Msg.Class, kindLeased, 1); err != nil {
		return nil, 0, err
	}
	if err := putEntry(tx, r); err != nil {
		return nil, 0, err
	}
	m := r.Msg
	return &queue.Leased{Message: &m, Token: r.Token, Receipt: r.Parked}, 0, nil
}

// suppressTx ends queued message r, just out of the ready index, as
// suppressed at now: the take found its number on the suppression list.
// It is Complete's end (finalize: its event, its final record, out of
// Outstanding) with the list's reason and event code, and no attempt
// spent.
func suppressTx(tx *bolt.Tx, r *entry, now time.Time) error {
	if err := addClass(tx, r.Msg.Class, kindQueued, -1); err != nil {
		return err
	}
	r.Msg.Status = sms.StatusSuppressed
	r.Msg.LastError = queue.ListedReason
	r.Msg.UpdatedAt = now
	if err := countUsage(tx, &r.Msg, sms.StatusSuppressed, 1); err != nil {
		return err
	}
	_, err := finalize(tx, r, queue.EventErrorSuppressed, ms(now))
	return err
}

// ack runs fn on the entry l leases, inside a group commit. fn sees the
// entry only while the lease is still held; otherwise the call returns
// ErrLeaseLost and nothing changes.
func (q *Queue) ack(ctx context.Context, verb string, l *queue.Leased, fn func(tx *bolt.Tx, r *entry, now time.Time) error) error {
	if l == nil || l.Message == nil {
		return fmt.Errorf("queue: %s: no lease", verb)
	}
	id := l.Message.ID
	var lost bool
	err := q.update(ctx, func(tx *bolt.Tx) error {
		lost = false
		r, err := getEntry(tx, id)
		if err != nil {
			return err
		}
		if r == nil || r.Msg.Status != sms.StatusSending || r.Token == "" || r.Token != l.Token {
			lost = true
			return nil
		}
		return fn(tx, r, q.now())
	})
	if err != nil {
		return fmt.Errorf("queue: %s %s: %w", verb, id, err)
	}
	if lost {
		return fmt.Errorf("queue: %s %s: %w", verb, id, queue.ErrLeaseLost)
	}
	return nil
}

// Extend moves the lease's expiry to now+lease (heartbeat).
func (q *Queue) Extend(ctx context.Context, l *queue.Leased, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("queue: extend: lease %v must be positive", lease)
	}
	return q.ack(ctx, "extend", l, func(tx *bolt.Tx, r *entry, now time.Time) error {
		leases := tx.Bucket(bLeases)
		if err := leases.Delete(timeKey(r.Lease, r.Msg.ID)); err != nil {
			return err
		}
		r.Lease = ms(now) + durMs(lease)
		if err := leases.Put(timeKey(r.Lease, r.Msg.ID), nil); err != nil {
			return err
		}
		return putEntry(tx, r)
	})
}

// Complete ends the lease with o.Status (sent, failed, expired or
// suppressed).
func (q *Queue) Complete(ctx context.Context, l *queue.Leased, o queue.Outcome) error {
	if !queue.CompleteStatus(o.Status) {
		return fmt.Errorf("queue: complete: status %q cannot end a lease", o.Status)
	}
	return q.ack(ctx, "complete", l, func(tx *bolt.Tx, r *entry, now time.Time) error {
		if err := endLease(tx, r); err != nil {
			return err
		}
		r.Msg.Status = o.Status
		r.Msg.Attempts = o.Attempts
		r.Msg.ProviderID = o.ProviderID
		if o.Reason != "" {
			r.Msg.LastError = o.Reason
		}
		r.Msg.UpdatedAt = now
		if o.Status == sms.StatusSent {
			r.Msg.SentAt = now
			if r.Parked != "" {
				r.Msg.Status = r.Parked
				if r.ParkedCode != "" {
					r.Msg.LastError = r.ParkedCode
				}
			}
			if err := indexProviderID(tx, o.ProviderID, r.Msg.ID); err != nil {
				return err
			}
		}
		// Usage counts how the queue ended it (o.Status), not the receipt.
		if err := countUsage(tx, &r.Msg, o.Status, 1); err != nil {
			return err
		}
		// The event reports the status stored: a receipt parked before the
		// send was recorded makes it delivered or undelivered at once.
		_, err := finalize(tx, r, queue.EventErrorCode(r.Msg.Status, false), ms(now))
		return err
	})
}

// Requeue ends the lease and queues the message again after o.After.
func (q *Queue) Requeue(ctx context.Context, l *queue.Leased, o queue.RequeueOptions) error {
	if o.After < 0 {
		o.After = 0
	}
	return q.ack(ctx, "requeue", l, func(tx *bolt.Tx, r *entry, now time.Time) error {
		if err := endLease(tx, r); err != nil {
			return err
		}
		r.Msg.Status = sms.StatusQueued
		if o.SpendAttempt {
			r.Msg.Attempts++
		}
		if o.Crashed {
			r.Msg.Crashes++
		}
		if o.LastError != "" {
			r.Msg.LastError = o.LastError
		}
		r.Msg.UpdatedAt = now
		if o.KeepPlace {
			// Due and Seq are the place it was taken from (kept while
			// leased), as Recover puts it back.
			if err := putReady(tx, r); err != nil {
				return err
			}
			return putEntry(tx, r)
		}
		r.Due = ms(now) + durMs(o.After)
		if o.After > 0 {
			r.Msg.NotBefore = time.UnixMilli(r.Due).UTC()
		}
		// Behind everything already queued, even in the same millisecond:
		// a new place in line, as redisq's requeue takes a new sequence.
		seq, err := tx.Bucket(bMsgs).NextSequence()
		if err != nil {
			return err
		}
		r.Seq = seq
		if err := putReady(tx, r); err != nil {
			return err
		}
		return putEntry(tx, r)
	})
}

// Dead ends the lease and moves the message to the dead letters.
func (q *Queue) Dead(ctx context.Context, l *queue.Leased, reason string, attempts int) error {
	return q.ack(ctx, "dead", l, func(tx *bolt.Tx, r *entry, now time.Time) error {
		if err := endLease(tx, r); err != nil {
			return err
		}
		r.Msg.Status = sms.StatusFailed
		r.Msg.Dead = true
		r.Msg.Attempts = attempts
		if reason != "" {
			r.Msg.LastError = reason
		}
		r.Msg.UpdatedAt = now
		nowMs := ms(now)
		if err := finish(tx, r, nowMs); err != nil {
			return err
		}
		if err := tx.Bucket(bDead).Put(timeKey(nowMs, r.Msg.ID), nil); err != nil {
			return err
		}
		if err := addClass(tx, r.Msg.Class, kindDead, 1); err != nil {
			return err
		}
		if err := addEvent(tx, &r.Msg, sms.StatusFailed, queue.EventErrorExhausted, nowMs); err != nil {
			return err
		}
		if err := countUsage(tx, &r.Msg, sms.StatusFailed, 1); err != nil {
			return err
		}
		return putEntry(tx, r)
	})
}

// Recover hands expired leases back to their old place in line, then prunes
// one chunk of messages past retention.
func (q *Queue) Recover(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := q.recoverChunk(ctx)
		total += n
		if err != nil {
			return total, fmt.Errorf("queue: recover: %w", err)
		}
		if n < chunk {
			break
		}
	}
	q.metrics.recovered.Add(float64(total))
	if total > 0 {
		q.log.Info("recovered expired leases", "count", total)
	}
	if _, err := q.prune(ctx); err != nil {
		return total, fmt.Errorf("queue: recover: %w", err)
	}
	return total, nil
}

// dueKeys returns up to limit keys of a time-keyed bucket (leases, done)
// whose time is at or before cutoff, oldest first.
func dueKeys(tx *bolt.Tx, bucket []byte, cutoff int64, limit int) [][]byte {
	var keys [][]byte
	c := tx.Bucket(bucket).Cursor()
	for k, _ := c.First(); k != nil && timeKeyAt(k) <= cutoff && len(keys) < limit; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}

// anyDue looks in a read-only transaction whether bucket holds a key due at
// cutoff, so that an idle Recover or Prune costs no write and no fsync.
func (q *Queue) anyDue(ctx context.Context, bucket []byte, cutoff int64) (bool, error) {
	var due bool
	err := q.view(ctx, func(tx *bolt.Tx) error {
		due = len(dueKeys(tx, bucket, cutoff, 1)) > 0
		return nil
	})
	return due, err
}

func (q *Queue) recoverChunk(ctx context.Context) (int, error) {
	if due, err := q.anyDue(ctx, bLeases, ms(q.now())); err != nil || !due {
		return 0, err
	}
	n := 0
	err := q.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		now := q.now()
		for _, k := range dueKeys(tx, bLeases, ms(now), chunk) {
			id := timeKeyID(k)
			r, err := getEntry(tx, id)
			if err != nil {
				return err
			}
			if r == nil || r.Msg.Status != sms.StatusSending {
				// A lease entry without its lease: drop it, never resurrect.
				if err := tx.Bucket(bLeases).Delete(k); err != nil {
					return err
				}
				continue
			}
			if err := endLease(tx, r); err != nil {
				return err
			}
			r.Msg.Status = sms.StatusQueued
			r.Msg.UpdatedAt = now
			if err := putReady(tx, r); err != nil {
				return err
			}
			if err := putEntry(tx, r); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Prune deletes up to one chunk of terminal messages older than the
// retention, with their idempotency entries, and returns how many it deleted.
// Recover calls it; it is exported for operators and tests.
func (q *Queue) Prune(ctx context.Context) (int, error) {
	n, err := q.prune(ctx)
	if err != nil {
		return n, fmt.Errorf("queue: prune: %w", err)
	}
	return n, nil
}

func (q *Queue) prune(ctx context.Context) (int, error) {
	n, err := q.pruneFinal(ctx)
	if err != nil {
		return n, err
	}
	m, err := q.pruneDone(ctx)
	if err != nil {
		return n + m, err
	}
	if err := q.pruneReplies(ctx); err != nil {
		return n + m, err
	}
	if err := q.pruneBatches(ctx); err != nil {
		return n + m, err
	}
	if err := q.pruneEarly(ctx); err != nil {
		return n + m, err
	}
	return n + m, q.pruneUsage(ctx)
}

// pruneEarly deletes the early receipts (bEarly) of ids created longer
// than queue.EarlyReceiptWindow ago: their message never came.
func (q *Queue) pruneEarly(ctx context.Context) error {
	cutoff := q.now().Add(-queue.EarlyReceiptWindow)
	var stale [][]byte
	err := q.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bEarly).Cursor()
		for k, _ := c.First(); k != nil && len(stale) < chunk; k, _ = c.Next() {
			if created, ok := sms.IDTime("msg_" + string(k)); ok && created.After(cutoff) {
				break
			}
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return q.deleteKeys(ctx, bEarly, stale)
}

// deleteKeys deletes keys (found by a read) from bucket in one write
// transaction; none: no transaction.
func (q *Queue) deleteKeys(ctx context.Context, bucket []byte, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	return q.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// pruneFinal deletes up to one chunk of final records completed longer than
// the retention ago, and stale idempotency entries. It walks bFinal from
// where the last call stopped: keys sort by creation, and nothing created
// after the cutoff can have completed before it, so the walk returns to the
// start there; what it passes (created long ago, completed recently, such as
// a message scheduled far ahead) is looked at again on the next round. The
// walk is a read; a write transaction runs only when there is something to
// delete.
func (q *Queue) pruneFinal(ctx context.Context) (int, error) {
	q.pruneMu.Lock()
	defer q.pruneMu.Unlock()
	now := q.now()
	cutoff := now.Add(-q.retention)
	var finals, idems [][]byte
	err := q.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bFinal).Cursor()
		k, v := c.Seek(q.pruneFrom)
		for seen := 0; seen < chunk && k != nil; seen++ {
			if finalDue(k, v, cutoff) {
				finals = append(finals, append([]byte(nil), k...))
			}
			if created, _ := sms.IDTime("msg_" + string(k)); created.After(cutoff) {
				k = nil
				break
			}
			k, v = c.Next()
		}
		q.pruneFrom = append([]byte(nil), k...)
		c = tx.Bucket(bIdem).Cursor()
		k, v = c.Seek(q.idemFrom)
		for seen := 0; seen < chunk && k != nil; seen++ {
			if q.idemStale(v, now) {
				idems = append(idems, append([]byte(nil), k...))
			}
			k, v = c.Next()
		}
		q.idemFrom = append([]byte(nil), k...)
		return nil
	})
	if err != nil || len(finals)+len(idems) == 0 {
		return 0, err
	}
	n := 0
	err = q.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		fin, idem, pids := tx.Bucket(bFinal), tx.Bucket(bIdem), tx.Bucket(bPids)
		for _, k := range finals {
			v := fin.Get(k)
			if v == nil || !finalDue(k, v, cutoff) {
				continue
			}
			id := "msg_" + string(k)
			if m, err := queue.DecodeFinal(id, string(v)); err == nil && m.ProviderID != "" &&
				string(pids.Get([]byte(m.ProviderID))) == id {
				if err := pids.Delete([]byte(m.ProviderID)); err != nil {
					return err
				}
			}
			if err := fin.Delete(k); err != nil {
				return err
			}
			n++
		}
		for _, k := range idems {
			if v := idem.Get(k); v != nil && q.idemStale(v, now) {
				if err := idem.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	q.metrics.pruned.Add(float64(n))
	return n, err
}

// finalDue: the final record (k, v) was completed at or before cutoff (an
// unreadable one is due too).
func finalDue(k, v []byte, cutoff time.Time) bool {
	m, err := queue.DecodeFinal("msg_"+string(k), string(v))
	return err != nil || !m.UpdatedAt.After(cutoff)
}

// idemStale: the idempotency entry v is older than the window (a final
// record does not keep its key, so its entry is not found from it).
func (q *Queue) idemStale(v []byte, now time.Time) bool {
	return len(v) < 8 || int64(binary.BigEndian.Uint64(v[:8]))+q.window.Milliseconds() <= ms(now)
}

// pruneDone deletes up to one chunk of terminal messages kept in msgs (dead
// letters, and messages an earlier release completed) older than the
// retention.
func (q *Queue) pruneDone(ctx context.Context) (int, error) {
	cutoff := func() int64 { return ms(q.now()) - q.retention.Milliseconds() }
	if due, err := q.anyDue(ctx, bDone, cutoff()); err != nil || !due {
		return 0, err
	}
	n := 0
	err := q.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		for _, k := range dueKeys(tx, bDone, cutoff(), chunk) {
			if err := tx.Bucket(bDone).Delete(k); err != nil {
				return err
			}
			id := timeKeyID(k)
			r, err := getEntry(tx, id)
			if err != nil {
				return err
			}
			// A done entry whose message was retried and is live again
			// (RetryDead removes it, but be safe): keep the message.
			if r == nil || !r.Msg.Status.Done() {
				continue
			}
			if r.Msg.Dead {
				if err := tx.Bucket(bDead).Delete(timeKey(r.At, id)); err != nil {
					return err
				}
				if err := addClass(tx, r.Msg.Class, kindDead, -1); err != nil {
					return err
				}
			}
			if r.Msg.IdempotencyKey != "" {
				ik := idemKey(r.Msg.Producer, r.Msg.IdempotencyKey)
				if v := tx.Bucket(bIdem).Get(ik); len(v) > 8 && string(v[8:]) == id {
					if err := tx.Bucket(bIdem).Delete(ik); err != nil {
						return err
					}
				}
			}
			if pid := []byte(r.Msg.ProviderID); len(pid) > 0 && string(tx.Bucket(bPids).Get(pid)) == id {
				if err := tx.Bucket(bPids).Delete(pid); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bMsgs).Delete([]byte(id)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	q.metrics.pruned.Add(float64(n))
	if n > 0 {
		q.log.Debug("pruned terminal messages", "count", n)
	}
	return n, err
}

// DeadLetters returns up to limit dead letters, those that died first first.
func (q *Queue) DeadLetters(ctx context.Context, limit int) ([]*sms.Message, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	var out []*sms.Message
	err := q.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bDead).Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			r, err := getEntry(tx, timeKeyID(k))
			if err != nil {
				return err
			}
			if r != nil {
				out = append(out, &r.Msg)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: dead letters: %w", err)
	}
	return out, nil
}

// RetryDead queues the dead letter id again with its attempts reset.
func (q *Queue) RetryDead(ctx context.Context, id string) error {
	var missing bool
	err := q.update(ctx, func(tx *bolt.Tx) error {
		missing = false
		r, err := getEntry(tx, id)
		if err != nil {
			return err
		}
		if r == nil || !r.Msg.Dead || r.Msg.Status != sms.StatusFailed {
			missing = true
			return nil
		}
		now := q.now()
		if err := tx.Bucket(bDead).Delete(timeKey(r.At, id)); err != nil {
			return err
		}
		if err := tx.Bucket(bDone).Delete(timeKey(r.At, id)); err != nil {
			return err
		}
		if err := addClass(tx, r.Msg.Class, kindDead, -1); err != nil {
			return err
		}
		if err := addOut(tx, r.Msg.Producer, 1); err != nil {
			return err
		}
		// queued again: its failed end no longer counts
		if err := countUsage(tx, &r.Msg, sms.StatusFailed, -1); err != nil {
			return err
		}
		r.At = 0
		r.Msg.Status = sms.StatusQueued
		r.Msg.Dead = false
		r.Msg.Attempts = 0
		r.Msg.Crashes = 0
		r.Msg.UpdatedAt = now
		r.Due = ms(now)
		if err := putReady(tx, r); err != nil {
			return err
		}
		return putEntry(tx, r)
	})
	if err != nil {
		return fmt.Errorf("queue: retry dead %s: %w", id, err)
	}
	if missing {
		return fmt.Errorf("queue: retry dead %s: %w", id, queue.ErrNotFound)
	}
	return nil
}

// Get returns the stored message with id.
func (q *Queue) Get(ctx context.Context, id string) (*sms.Message, error) {
	var m *sms.Message
	err := q.view(ctx, func(tx *bolt.Tx) error {
		var err error
		if m, err = getMessage(tx, id); err == nil && m == nil {
			err = queue.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue: get %s: %w", id, err)
	}
	return m, nil
}

// Stats reads the per-class counters and counts the scheduled tail of each
// class (messages not yet due are few: delays and requeues).
func (q *Queue) Stats(ctx context.Context) (map[sms.Class]queue.ClassStats, error) {
	out := make(map[sms.Class]queue.ClassStats, len(sms.Classes))
	err := q.view(ctx, func(tx *bolt.Tx) error {
		now := ms(q.now())
		counts := tx.Bucket(bCounts)
		for _, cl := range sms.Classes {
			st := queue.ClassStats{
				Leased: getCount(counts, countKey(cl, kindLeased)),
				Dead:   getCount(counts, countKey(cl, kindDead)),
			}
			for _, tag := range append([][]byte{nil}, lanesOf(tx, cl)...) {
				if due, ok := laneHeadDue(tx, cl, tag); ok && due <= now {
					st.OldestAge = max(st.OldestAge, time.Duration(now-due)*time.Millisecond)
				}
				laneTail(tx, cl, tag, now+1, func(int64) bool { st.Scheduled++; return true })
			}
			st.Ready = getCount(counts, countKey(cl, kindQueued)) - st.Scheduled
			out[cl] = st
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: stats: %w", err)
	}
	return out, nil
}

// ScheduledWithin walks the scheduled tail of each class up to the
// longest horizon; see queue.Queue.
func (q *Queue) ScheduledWithin(ctx context.Context, horizons []time.Duration) (map[sms.Class][]int64, error) {
	if err := queue.CheckHorizons(horizons); err != nil {
		return nil, err
	}
	out := make(map[sms.Class][]int64, len(sms.Classes))
	err := q.view(ctx, func(tx *bolt.Tx) error {
		now := ms(q.now())
		last := now + durMs(horizons[len(horizons)-1])
		for _, cl := range sms.Classes {
			counts := make([]int64, len(horizons))
			for _, tag := range append([][]byte{nil}, lanesOf(tx, cl)...) {
				laneTail(tx, cl, tag, now+1, func(due int64) bool {
					if due > last {
						return false
					}
					// Counted under the first horizon that covers it ...
					i, _ := slices.BinarySearchFunc(horizons, due-now, func(h time.Duration, d int64) int { return cmp.Compare(durMs(h), d) })
					counts[i]++
					return true
				})
			}
			for i := 1; i < len(counts); i++ {
				counts[i] += counts[i-1] // ... and every later one.
			}
			out[cl] = counts
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: scheduled within: %w", err)
	}
	return out, nil
}

// Outstanding is the number of producer's messages queued or leased.
func (q *Queue) Outstanding(ctx context.Context, producer string) (int64, error) {
	var n int64
	err := q.view(ctx, func(tx *bolt.Tx) error {
		n = getCount(tx.Bucket(bOut), []byte(producer))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("queue: outstanding %s: %w", producer, err)
	}
	return n, nil
}
