package embedded

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// bBudget holds the producers' budget counts (queue/budget.go): field
// queue.BudgetField → units (8 bytes, kept at 0 while its period is
// current), and queue.BudgetCurrent → the current period's id.
var bBudget = []byte("budget")

// chargeBudget is the budget step of an enqueue, in the store's
// transaction: an *OverBudget when a period of b would go over its limit
// (nothing changed), else b's units added to every period it names.
func chargeBudget(tx *bolt.Tx, producer string, b sms.Budget) error {
	if b.Units <= 0 {
		return nil
	}
	bk, err := tx.CreateBucketIfNotExists(bBudget)
	if err != nil {
		return err
	}
	for i, p := range b.Periods() {
		if p.ID == "" || p.Limit <= 0 {
			continue
		}
		if used := budgetCount(bk, queue.BudgetField(producer, p.ID)); used+int64(b.Units) > p.Limit {
			return &queue.OverBudget{Period: queue.BudgetPeriodNames[i], Used: used, Limit: p.Limit}
		}
	}
	for _, p := range b.Periods() {
		if p.ID == "" {
			continue
		}
		cur := []byte(queue.BudgetCurrent(producer, p.ID))
		if old := bk.Get(cur); string(old) != p.ID {
			if old != nil {
				if err := bk.Delete([]byte(queue.BudgetField(producer, string(old)))); err != nil {
					return err
				}
			}
			if err := bk.Put(cur, []byte(p.ID)); err != nil {
				return err
			}
		}
		f := queue.BudgetField(producer, p.ID)
		if err := bk.Put([]byte(f), u64(budgetCount(bk, f)+int64(b.Units))); err != nil {
			return err
		}
	}
	return nil
}

// refundBudget gives m's units back when it ends unsent
// (queue.BudgetRefunds), in the transaction that ends it.
func refundBudget(tx *bolt.Tx, m *sms.Message) error {
	if !queue.BudgetRefunds(m.Status) {
		return nil
	}
	return giveBack(tx, m.Producer, m.Budget)
}

func giveBack(tx *bolt.Tx, producer string, b sms.Budget) error {
	bk := tx.Bucket(bBudget)
	if b.Units <= 0 || bk == nil {
		return nil
	}
	for _, p := range b.Periods() {
		f := []byte(queue.BudgetField(producer, p.ID))
		if p.ID == "" || bk.Get(f) == nil {
			continue // a period over: nothing to give back
		}
		if err := bk.Put(f, u64(max(budgetCount(bk, string(f))-int64(b.Units), 0))); err != nil {
			return err
		}
	}
	return nil
}

func budgetCount(bk *bolt.Bucket, field string) int64 {
	v := bk.Get([]byte(field))
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

var _ queue.Budgets = (*Queue)(nil)

// ChargeBudget charges b outside an enqueue (an OTP); see queue.Budgets.
func (q *Queue) ChargeBudget(ctx context.Context, producer string, b sms.Budget) error {
	var over error
	err := q.update(ctx, func(tx *bolt.Tx) error {
		over = chargeBudget(tx, producer, b)
		if _, ok := over.(*queue.OverBudget); ok {
			return nil
		}
		return over
	})
	if err != nil {
		return fmt.Errorf("queue: charge budget: %w", err)
	}
	return over
}

// RefundBudget gives b back; see queue.Budgets.
func (q *Queue) RefundBudget(ctx context.Context, producer string, b sms.Budget) error {
	if err := q.update(ctx, func(tx *bolt.Tx) error { return giveBack(tx, producer, b) }); err != nil {
		return fmt.Errorf("queue: refund budget: %w", err)
	}
	return nil
}

// BudgetUsed reads counts; see queue.Budgets.
func (q *Queue) BudgetUsed(ctx context.Context, producer string, ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	err := q.view(ctx, func(tx *bolt.Tx) error {
		bk := tx.Bucket(bBudget)
		for i, id := range ids {
			if bk != nil && id != "" {
				out[i] = budgetCount(bk, queue.BudgetField(producer, id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: budget used: %w", err)
	}
	return out, nil
}
