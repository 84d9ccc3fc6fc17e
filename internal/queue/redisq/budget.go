package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// budget is the HASH of the producers' budget counts (queue/budget.go):
// field queue.BudgetField → units, and queue.BudgetCurrent → the id of the
// producer's current period of that kind. Only current periods are kept
// (charging the next drops the previous), so it holds at most four fields
// per producer with a budget.
func (k keys) budget() string { return k.tag + "budget" }

// budgetArgsPerMessage is how many ARGV entries the budget step takes per
// message (luasrc.Budget).
const budgetArgsPerMessage = 6

// budgetArgs appends m's budget arguments (zeros for none).
func (c *scriptCall) budgetArgs(q *Queue, m *sms.Message) {
	b := &m.Budget
	if b.Units <= 0 || (b.Day.ID == "" && b.Month.ID == "") {
		c.args = append(c.args, 0, 0, "", 0, "", 0)
		return
	}
	c.args = append(c.args, c.index(q.k.budget()), b.Units, b.Day.ID, b.Day.Limit, b.Month.ID, b.Month.Limit)
}

// overBudget reads the value of a budget refusal ("<period> <count>") and
// the message's limits.
func overBudget(value string, m *sms.Message) error {
	k, used, _ := strings.Cut(value, " ")
	n, _ := strconv.ParseInt(used, 10, 64)
	e := &queue.OverBudget{Used: n}
	switch k {
	case "1":
		e.Period, e.Limit = queue.BudgetPeriodNames[0], m.Budget.Day.Limit
	default:
		e.Period, e.Limit = queue.BudgetPeriodNames[1], m.Budget.Month.Limit
	}
	return e
}

// chargeBudgetScript charges one budget outside an enqueue (an OTP).
// KEYS[1] the budget HASH. ARGV as the enqueue script's budget arguments
// at offset -20 (ARGV[1] is "1": the HASH's index; ARGV[2] units, ARGV[3..6]
// the periods), ARGV[7] the producer. Returns "" charged, or the refusal
// "<period> <count>".
var chargeBudgetScript = redis.NewScript(luasrc.Budget + `
local p = ARGV[7]
local bp, used = budget_check(-20, p)
if bp ~= 0 then return bp .. ' ' .. used end
budget_charge(-20, p)
budget_write()
return ''
`)

// refundBudgetScript gives a budget back (an OTP not sent). KEYS[1] the
// budget HASH; ARGV[1] a record carrying the producer and the charge.
var refundBudgetScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.BudgetRefund + `
budget_refund(KEYS[1], cjson.decode(ARGV[1]))
return 1
`)

var _ queue.Budgets = (*Queue)(nil)

// ChargeBudget charges b outside an enqueue; see queue.Budgets.
func (q *Queue) ChargeBudget(ctx context.Context, producer string, b sms.Budget) error {
	if b.Units <= 0 {
		return nil
	}
	v, err := chargeBudgetScript.Run(ctx, q.c, []string{q.k.budget()}, 1, b.Units, b.Day.ID, b.Day.Limit,
		b.Month.ID, b.Month.Limit, producer).Text()
	if err != nil {
		return fmt.Errorf("redisq: charge budget: %w", err)
	}
	if v != "" {
		return overBudget(v, &sms.Message{Budget: b})
	}
	return nil
}

// RefundBudget gives b back; see queue.Budgets.
func (q *Queue) RefundBudget(ctx context.Context, producer string, b sms.Budget) error {
	if b.Units <= 0 {
		return nil
	}
	rec, err := toRecord(&sms.Message{Producer: producer, Status: sms.StatusQueued, Budget: b})
	if err != nil {
		return fmt.Errorf("redisq: refund budget: %w", err)
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("redisq: refund budget: %w", err)
	}
	if err := refundBudgetScript.Run(ctx, q.c, []string{q.k.budget()}, js).Err(); err != nil {
		return fmt.Errorf("redisq: refund budget: %w", err)
	}
	return nil
}

// BudgetUsed reads counts; see queue.Budgets.
func (q *Queue) BudgetUsed(ctx context.Context, producer string, ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	fields := make([]string, 0, len(ids))
	for _, id := range ids {
		fields = append(fields, queue.BudgetField(producer, id))
	}
	if len(fields) == 0 {
		return out, nil
	}
	vs, err := q.c.HMGet(ctx, q.k.budget(), fields...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisq: budget used: %w", err)
	}
	for i, v := range vs {
		if s, ok := v.(string); ok && ids[i] != "" {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out, nil
}
