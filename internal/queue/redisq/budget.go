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
	"smsgw/internal/sms"
)

// budget is the HASH of the producers' budget counts (queue/budget.go):
// field queue.BudgetField → units, and queue.BudgetCurrent → the id of the
// producer's current period of that kind. Only current periods are kept
// (charging the next drops the previous), so it holds at most four fields
// per producer with a budget.
func (k keys) budget() string { return k.tag + "budget" }

// luaBudget is the budget step of the enqueue script. Field names are made as
// queue.BudgetField and queue.BudgetCurrent make them: the producer, the
// byte 0x1f, the period id (or its first letter, the kind).
//
// Enqueue ARGV, per message from its offset i: [i+21] index in KEYS of the
// budget HASH (0: no budget), [i+22] units, [i+23] the day's id ("" none),
// [i+24] its limit (0: none), [i+25] the month's id, [i+26] its limit.
// Each count is read at most once a run and written once at its end
// (budget_write), like the outstanding counts.
const luaBudget = `
local budget_used, budget_dirty = {}, {}
local function budget_count(bk, f)
  if budget_used[f] == nil then budget_used[f] = tonumber(redis.call('HGET', KEYS[bk], f) or '0') end
  return budget_used[f]
end
-- budget_check: 0 when message i's units fit every period it names,
-- else 1 (daily) or 2 (monthly) and that period's count.
local function budget_check(i, p)
  local bk = tonumber(ARGV[i + 21])
  if bk == 0 then return 0, 0 end
  local units = tonumber(ARGV[i + 22])
  for k = 0, 1 do
    local id, limit = ARGV[i + 23 + 2 * k], tonumber(ARGV[i + 24 + 2 * k])
    if id ~= '' and limit > 0 then
      local used = budget_count(bk, p .. '\31' .. id)
      if used + units > limit then return k + 1, used end
    end
  end
  return 0, 0
end
-- budget_charge adds message i's units to its periods (it is stored).
local function budget_charge(i, p)
  local bk = tonumber(ARGV[i + 21])
  if bk == 0 then return end
  local units = tonumber(ARGV[i + 22])
  for k = 0, 1 do
    local id = ARGV[i + 23 + 2 * k]
    if id ~= '' then
      local f = p .. '\31' .. id
      budget_used[f] = budget_count(bk, f) + units
      budget_dirty[f] = {KEYS[bk], p .. '\31', id}
    end
  end
end
-- budget_write stores the counts charged, dropping each producer's
-- previous period of the kind.
local function budget_write()
  for f, d in pairs(budget_dirty) do
    local cur = d[2] .. string.sub(d[3], 1, 1)
    local old = redis.call('HGET', d[1], cur)
    if old ~= d[3] then
      if old then redis.call('HDEL', d[1], d[2] .. old) end
      redis.call('HSET', d[1], cur, d[3])
    end
    redis.call('HSET', d[1], f, budget_used[f])
  end
end
`

// luaBudgetRefund is the give-back of the scripts that end a message
// unsent (with luaRecord).
const luaBudgetRefund = `
-- budget_refund gives the units of m (a decoded record) back to the
-- periods it was charged to; a period no longer kept gets nothing.
local function budget_refund(key, m)
  local units = tonumber(m.bu or 0)
  if units <= 0 then return end
  local p = get(m, 'p')
  for _, pf in ipairs({'bd', 'bm'}) do
    if m[pf] then
      local f = p .. '\31' .. m[pf]
      local used = redis.call('HGET', key, f)
      if used then redis.call('HSET', key, f, math.max(tonumber(used) - units, 0)) end
    end
  end
end
`

// budgetArgsPerMessage is how many ARGV entries the budget step takes per
// message (luaBudget).
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
var chargeBudgetScript = redis.NewScript(luaBudget + `
local p = ARGV[7]
local bp, used = budget_check(-20, p)
if bp ~= 0 then return bp .. ' ' .. used end
budget_charge(-20, p)
budget_write()
return ''
`)

// refundBudgetScript gives a budget back (an OTP not sent). KEYS[1] the
// budget HASH; ARGV[1] a record carrying the producer and the charge.
var refundBudgetScript = redis.NewScript(luaPrelude + luaRecord + luaBudgetRefund + `
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
