package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/sms"
)

// Batch is one batch request to admit on the in-process executor: its
// items' validated messages, nil for an item already refused (decoding).
type Batch struct {
	Sender Sender
	Key    string // the request's Idempotency-Key; "" none
	Msgs   []*sms.Message
	TTLs   []time.Duration

	// BatchID is stored with each of its messages (sms.Message.BatchID).
	BatchID string
}

// Item is the outcome of one batch item admitted: Err its refusal, else
// Msg stored with its estimate, or Existing, the message its item key
// already named.
type Item struct {
	Msg      *sms.Message
	ETA      time.Time
	Existing *sms.Message
	Err      error
}

// Stored reports whether the item's message was stored now.
func (it *Item) Stored() bool { return it.Err == nil && it.Msg != nil && it.Existing == nil }

// AdmitBatch runs Order over a batch's items at now, each step over the
// items still admitted, in item order: the schedule, protection, the TTL
// (items of one class queue behind each other) and the suppression list
// refuse items one by one; then as many as max_outstanding and the
// ingress quota allow are stored, the rest refused. The items slice has
// one entry per message (nil messages are left zero). The error refuses
// the whole batch: no room at all under max_outstanding, no ingress unit,
// or a store failure. A batch refused whole before the outstanding step
// still costs one unit of ingress quota, so repeating it is throttled like
// any other request. The decision is the ingress GCRA's, when it ran.
func (p *Pipeline) AdmitBatch(ctx context.Context, b Batch, now time.Time) (items []Item, kd *limiter.KeyDecision, err error) {
	items = make([]Item, len(b.Msgs))
	var open []int
	for i, m := range b.Msgs {
		if m == nil {
			continue
		}
		if rj := Schedule(m.SendAt, now, itemField(i, "send_at")); rj != nil {
			items[i].Err = rj
			continue
		}
		open = append(open, i)
	}
	open, suppressed, held, err := p.protectItems(ctx, b, open, items)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		// an OTP item refused after protection, answered by an earlier
		// message, or in a batch that failed does not count against its
		// number
		held.Only(func(i int) bool { return err != nil || !items[i].Stored() }).GiveBack(ctx, p.Log)
	}()
	var eligible []int
	n := len(open) - len(suppressed)
	if n > 0 {
		room, err := p.Room(ctx, b.Sender, n)
		if err != nil {
			return nil, nil, err
		}
		eligible = p.planItems(ctx, b, now, open, suppressed, items, room)
	} else {
		for i, e := range suppressed {
			items[i].Err = e
		}
	}
	if n > 0 && len(eligible) == 0 {
		return items, nil, nil // refused item by item after the outstanding step: nothing charged
	}
	granted, d, err := p.Charge(ctx, b.Sender, max(len(eligible), 1))
	var rj *Rejection
	if err == nil || errors.As(err, &rj) {
		kd = &d
	}
	if err != nil || len(eligible) == 0 {
		return items, kd, err
	}
	for _, i := range eligible[min(granted, len(eligible)):] {
		items[i].Msg, items[i].Err = nil, ItemRateLimited(b.Sender)
	}
	return items, kd, p.storeItems(ctx, b.Sender, eligible[:min(granted, len(eligible))], items, now)
}

func itemField(i int, name string) string { return "messages[" + strconv.Itoa(i) + "]." + name }

// protectItems is the protect step over the open items, by class: the
// items it refuses leave open, which it returns with the OTPs it counted
// (each hold's target is its item's index). A suppressed item stays open
// with its refusal in suppressed: it is answered at its own step, after
// the TTL's. The messages of the others carry their numbers' ids.
func (p *Pipeline) protectItems(ctx context.Context, b Batch, open []int, items []Item) ([]int, map[int]*Rejection, Holds, error) {
	var held Holds
	byClass := map[sms.Class][]int{}
	for _, i := range open {
		byClass[b.Msgs[i].Class] = append(byClass[b.Msgs[i].Class], i)
	}
	suppressed := map[int]*Rejection{}
	for _, cls := range sms.Classes {
		idx := byClass[cls]
		if len(idx) == 0 {
			continue
		}
		ts := make([]Target, len(idx))
		for k, i := range idx {
			ts[k] = Target{To: b.Msgs[i].To, Field: itemField(i, "to"), Producer: b.Sender.Name}
		}
		errs, hs, err := p.Protect.Check(ctx, cls, ts)
		if err != nil {
			held.GiveBack(ctx, p.Log)
			return nil, nil, nil, err
		}
		for _, h := range hs {
			h.Target = idx[h.Target]
			held = append(held, h)
		}
		for k, e := range errs {
			switch {
			case e != nil && e.Kind == RejectSuppressed:
				suppressed[idx[k]] = e
			case e != nil:
				items[idx[k]].Err = e
			default:
				items[idx[k]].Msg = &sms.Message{NumberID: ts[k].ID} // the id, until stamped
			}
		}
	}
	out := open[:0:0]
	for _, i := range open {
		if items[i].Err == nil {
			out = append(out, i)
		}
	}
	return out, suppressed, held, nil
}

// planItems stamps the open items and refuses those that would expire
// before their turn, those whose number is suppressed, and those beyond
// room (max_outstanding); it returns the rest, in order.
func (p *Pipeline) planItems(ctx context.Context, b Batch, now time.Time, open []int, suppressed map[int]*Rejection,
	items []Item, room int) []int {
	ms := make([]*sms.Message, len(open))
	for k, i := range open {
		ik := ""
		if b.Key != "" {
			// A space never appears in a header key, so an item key
			// cannot collide with a single message's key.
			ik = b.Key + " #" + strconv.Itoa(i)
		}
		ms[k] = p.stamp(*b.Msgs[i], b.Sender, ik, b.TTLs[i], now)
		ms[k].BatchID = b.BatchID
		if items[i].Msg != nil {
			ms[k].NumberID = items[i].Msg.NumberID // a take checks the suppression list again with it
		}
		items[i].Msg = nil
	}
	p.Pools.assignSenders(ctx, b.Sender.Name, ms, p.CountSegments, now)
	var eligible []int
	p.ETA.Plan(ctx, now, ms, func(k int, eta time.Time) bool {
		i := open[k]
		if err := AdmitTTL(ms[k], eta, b.TTLs[i]); err != nil {
			items[i].Err = err
			return false
		}
		if e := suppressed[i]; e != nil {
			items[i].Err = e
			return false
		}
		if len(eligible) >= room {
			items[i].Err = ItemTooManyQueued(b.Sender)
			return false
		}
		eligible = append(eligible, i)
		items[i].Msg, items[i].ETA = ms[k], eta
		return true
	})
	return eligible
}

// storeItems is the store step: the eligible items in one call.
func (p *Pipeline) storeItems(ctx context.Context, sender Sender, eligible []int, items []Item, now time.Time) error {
	if len(eligible) == 0 {
		return nil
	}
	ms := make([]*sms.Message, len(eligible))
	for k, i := range eligible {
		ms[k] = items[i].Msg
	}
	results, err := p.Queue.EnqueueMany(ctx, ms)
	if err != nil {
		return fmt.Errorf("enqueue batch: %w", err)
	}
	for k, i := range eligible {
		rj, over := overBudget(sender, results[k].Err, now) // StepBudget, decided by the store item by item
		switch res := results[k]; {
		case over:
			items[i].Msg, items[i].Err = nil, rj
		case res.Err != nil:
			items[i].Err = fmt.Errorf("enqueue batch item %d: %w", i, res.Err)
		case res.Existed:
			items[i].Existing = res.Message
		default:
			p.Accepted(now, ms[k])
		}
	}
	return nil
}
