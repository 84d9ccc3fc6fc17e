package queue

import (
	"context"
	"fmt"

	"smsgw/internal/sms"
)

// Producer budgets (producers[].budget). A message carries its charge
// (sms.Budget: units, and each period's id and limit); both backends decide
// it in the step that stores the message, in the message's turn: a
// message whose units would take a period's count past its limit is
// refused (the EnqueueResult's Err is an *OverBudget) and charges nothing,
// one that fits adds its units to every period it names. The counts live
// beside the queue (Redis: one HASH of the account; embedded: a bucket),
// one per producer and period id (BudgetField), and only the current
// period of each kind is kept: charging a new day or month drops the
// producer's previous one.
//
// A message that ends without being sent (canceled, expired, suppressed)
// gives its units back to the periods it was charged to, in the step that
// ends it; a period already dropped (over) gets nothing back, and a count
// never goes below 0. A sent message never gives back, nor does a failed
// one (it may have reached the provider) or a dead letter (retrying it
// charges nothing again).

// OverBudget refuses a message whose units would take Period ("daily" or
// "monthly") past its limit.
type OverBudget struct {
	Period string
	Used   int64 // the period's count before this message
	Limit  int64
}

func (e *OverBudget) Error() string {
	return fmt.Sprintf("the %s budget of %d units is spent (%d used)", e.Period, e.Limit, e.Used)
}

// BudgetPeriodNames are the names of sms.Budget.Periods, in order.
var BudgetPeriodNames = [2]string{"daily", "monthly"}

// BudgetField is the name of a producer's count for period id (sms.Budget):
// the same in both backends (redisq's scripts build it as producer, the
// byte 0x1f, id).
func BudgetField(producer, id string) string { return producer + "\x1f" + id }

// BudgetCurrent is the name of the field that remembers a producer's
// current period of kind ("d" or "m", the first byte of its ids), so that
// charging the next one drops it.
func BudgetCurrent(producer, id string) string { return producer + "\x1f" + id[:1] }

// BudgetRefunds reports whether a message that ends in st gives its units
// back.
func BudgetRefunds(st sms.Status) bool {
	return st == sms.StatusCanceled || st == sms.StatusExpired || st == sms.StatusSuppressed
}

// Budgets is a backend's budget counts outside an enqueue: an OTP (sent at
// once, never queued) is charged and given back through it, and the
// metrics read it.
type Budgets interface {
	// ChargeBudget adds b's units to producer's periods if none goes over
	// its limit (else an *OverBudget, nothing charged).
	ChargeBudget(ctx context.Context, producer string, b sms.Budget) error
	// RefundBudget gives b's units back to producer's periods (a period
	// dropped since gets nothing).
	RefundBudget(ctx context.Context, producer string, b sms.Budget) error
	// BudgetUsed is the count of each of producer's period ids given ("" or
	// a period no longer kept: 0).
	BudgetUsed(ctx context.Context, producer string, ids []string) ([]int64, error)
}
