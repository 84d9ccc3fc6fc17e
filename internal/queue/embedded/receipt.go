package embedded

import (
	"context"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ApplyReceipt applies a provider's delivery receipt in one transaction;
// see queue.Queue.
func (q *Queue) ApplyReceipt(ctx context.Context, rc queue.Receipt) (queue.ReceiptOutcome, error) {
	if err := queue.CheckReceipt(rc); err != nil {
		return queue.ReceiptOutcome{}, err
	}
	var out queue.ReceiptOutcome
	err := q.update(ctx, func(tx *bolt.Tx) error {
		out = queue.ReceiptOutcome{Result: queue.ReceiptUnknown}
		id := rc.Reference
		if id == "" {
			id = string(tx.Bucket(bPids).Get([]byte(rc.ProviderID)))
		}
		if id == "" {
			return nil
		}
		r, err := getEntry(tx, id)
		if err != nil {
			return err
		}
		if r == nil {
			return q.finalReceipt(tx, id, rc, &out)
		}
		switch {
		case r.Msg.Status == sms.StatusSent:
			r.Msg.Status = rc.Status
			r.Msg.UpdatedAt = q.now()
			if rc.ErrorCode != "" {
				r.Msg.LastError = rc.ErrorCode
			}
			out.Result = queue.ReceiptApplied
			if err := addEvent(tx, &r.Msg, rc.Status, queue.EventErrorCode(rc.Status, false), ms(r.Msg.UpdatedAt)); err != nil {
				return err
			}
		case (r.Msg.Status == sms.StatusQueued || r.Msg.Status == sms.StatusSending || r.Msg.Dead) && r.Parked == "":
			r.Parked, r.ParkedCode = rc.Status, rc.ErrorCode
			out.Result = queue.ReceiptParked
		default:
			out.Result = queue.ReceiptDuplicate
			m := r.Msg
			out.Message = &m
			return nil
		}
		if err := putEntry(tx, r); err != nil {
			return err
		}
		m := r.Msg
		out.Message = &m
		return nil
	})
	if err != nil {
		return queue.ReceiptOutcome{}, fmt.Errorf("queue: receipt: %w", err)
	}
	return out, nil
}

// finalReceipt applies rc to the final record of id (a message completed
// leaves msgs for bFinal): sent moves on, anything else is a duplicate.
func (q *Queue) finalReceipt(tx *bolt.Tx, id string, rc queue.Receipt, out *queue.ReceiptOutcome) error {
	if !sms.ValidID(id) {
		return nil
	}
	fin := tx.Bucket(bFinal)
	v := fin.Get(finalKey(id))
	if v == nil {
		return q.earlyReceipt(tx, id, rc, out)
	}
	m, err := queue.DecodeFinal(id, string(v))
	if err != nil {
		return err
	}
	out.Message = m
	if m.Status != sms.StatusSent {
		out.Result = queue.ReceiptDuplicate
		return nil
	}
	m.Status = rc.Status
	m.UpdatedAt = q.now()
	if rc.ErrorCode != "" {
		m.LastError = rc.ErrorCode
	}
	enc, err := queue.EncodeFinal(m)
	if err != nil {
		return err
	}
	out.Result = queue.ReceiptApplied
	// The final record keeps the callback fields, so the event is the one
	// a full record's receipt writes, in this same tx.
	if err := addEvent(tx, m, rc.Status, queue.EventErrorCode(rc.Status, false), ms(m.UpdatedAt)); err != nil {
		return err
	}
	return fin.Put(finalKey(id), []byte(enc))
}

// earlyReceipt keeps rc for id, not stored, when the receipt named it by
// reference and it was created within queue.EarlyReceiptWindow (an OTP of
// the fast path whose provider sent the receipt before its answer):
// RecordSent applies it. A second one is a duplicate.
func (q *Queue) earlyReceipt(tx *bolt.Tx, id string, rc queue.Receipt, out *queue.ReceiptOutcome) error {
	created, ok := sms.IDTime(id)
	if rc.Reference == "" || !ok || !q.now().Add(-queue.EarlyReceiptWindow).Before(created) {
		return nil
	}
	b := tx.Bucket(bEarly)
	if b.Get(finalKey(id)) != nil {
		out.Result = queue.ReceiptDuplicate
		return nil
	}
	out.Result = queue.ReceiptParked
	return b.Put(finalKey(id), []byte(string(rc.Status)+"\x1f"+rc.ErrorCode))
}

// takeEarly removes and returns the receipt kept early for id.
func takeEarly(tx *bolt.Tx, id string) (status sms.Status, code string, ok bool, err error) {
	b := tx.Bucket(bEarly)
	v := b.Get(finalKey(id))
	if v == nil {
		return "", "", false, nil
	}
	st, code, _ := strings.Cut(string(v), "\x1f")
	return sms.Status(st), code, true, b.Delete(finalKey(id))
}

// Cancel cancels producer's queued message id in one transaction, which
// bbolt serialises with Take's; see queue.Queue.
func (q *Queue) Cancel(ctx context.Context, id, producer string) (*sms.Message, error) {
	var (
		out *sms.Message
		res error
	)
	err := q.update(ctx, func(tx *bolt.Tx) error {
		out, res = nil, nil
		r, err := getEntry(tx, id)
		if err != nil {
			return err
		}
		if r == nil {
			// Done already: its final record, if it is this producer's.
			m, err := getMessage(tx, id)
			res = queue.ErrNotFound
			if err == nil && m != nil && m.Producer == producer {
				out, res = m, queue.ErrNotCancelable
			}
			return err
		}
		if r.Msg.Producer != producer {
			res = queue.ErrNotFound
			return nil
		}
		m := r.Msg
		out = &m
		if r.Msg.Status != sms.StatusQueued {
			res = queue.ErrNotCancelable
			return nil
		}
		if r.Parked != "" {
			// a receipt came: the provider has it, whatever the queue says
			m.Status = r.Parked
			res = queue.ErrNotCancelable
			return nil
		}
		if err := delLane(tx, r); err != nil {
			return err
		}
		if err := addClass(tx, r.Msg.Class, kindQueued, -1); err != nil {
			return err
		}
		now := q.now()
		r.Msg.Status = sms.StatusCanceled
		r.Msg.UpdatedAt = now
		if err := countUsage(tx, &r.Msg, sms.StatusCanceled, 1); err != nil {
			return err
		}
		// As Complete; the answer is what reading the final record gives.
		v, err := finalize(tx, r, "", ms(now))
		if err != nil {
			return err
		}
		out, err = queue.DecodeFinal(r.Msg.ID, v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue: cancel %s: %w", id, err)
	}
	if res != nil {
		if res == queue.ErrNotFound {
			out = nil
		}
		return out, fmt.Errorf("queue: cancel %s: %w", id, res)
	}
	return out, nil
}
