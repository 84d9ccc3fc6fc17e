package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Budget is StepBudget: a producer's cap of units a day and a month
// (producers[].budget), units being what the provider charges: a message's
// segments when Pipeline.CountSegments (provider.count_segments), else one
// a message. Stamp sets each message's charge (sms.Budget: its units, the
// ids and limits of the day and month it is accepted in, in the budget's
// time zone); the store decides it in the step that stores the message
// (queue/budget.go), so accepted units never exceed a budget however many
// replicas accept at once, and a refusal charges nothing. It runs after
// the ingress GCRA: a request the budget refuses has spent its ingress
// unit, so a producer that keeps asking while its budget is spent is
// throttled like any other. A batch is charged item by item in order:
// the items that fit are stored, the others refused one by one.
type Budget struct {
	Daily, Monthly int64          // 0: no cap for the period
	Loc            *time.Location // nil: UTC
}

// Set reports whether the producer has a budget at all.
func (b Budget) Set() bool { return b.Daily > 0 || b.Monthly > 0 }

func (b Budget) loc() *time.Location {
	if b.Loc == nil {
		return time.UTC
	}
	return b.Loc
}

// Units is what m costs a budget.
func (p *Pipeline) Units(m *sms.Message) int { return m.Cost(p.CountSegments) }

// charge is m's charge for a sender with budget b, accepted at now; the
// zero Budget without one.
func (p *Pipeline) charge(b Budget, m *sms.Message, now time.Time) sms.Budget {
	if !b.Set() {
		return sms.Budget{}
	}
	loc := b.loc()
	return sms.Budget{Units: p.Units(m),
		Day:   sms.BudgetPeriod{ID: sms.BudgetDay(now, loc), Limit: b.Daily},
		Month: sms.BudgetPeriod{ID: sms.BudgetMonth(now, loc), Limit: b.Monthly}}
}

// BudgetExhausted refuses a message of s that the store found over its
// budget at now, with Retry-After to the period's reset.
func BudgetExhausted(s Sender, ob *queue.OverBudget, now time.Time) *Rejection {
	loc := s.Budget.loc()
	end, key := sms.BudgetDayEnd(now, loc), "daily_units"
	if ob.Period != queue.BudgetPeriodNames[0] {
		end, key = sms.BudgetMonthEnd(now, loc), "monthly_units"
	}
	return &Rejection{Kind: RejectBudget, RetryAfter: max(end.Sub(now), time.Second),
		Detail: fmt.Sprintf("producer %s has spent %d of its %s budget of %d units (producers[].budget.%s); it resets at %s",
			s.Name, ob.Used, ob.Period, ob.Limit, key, end.UTC().Format(time.RFC3339)),
		Extra: map[string]any{"period": ob.Period, "budget_units": ob.Limit, "used_units": ob.Used,
			"resets_at": end.UTC().Format(time.RFC3339)}}
}

// overBudget is the refusal when err is the store's *OverBudget.
func overBudget(s Sender, err error, now time.Time) (*Rejection, bool) {
	var ob *queue.OverBudget
	if !errors.As(err, &ob) {
		return nil, false
	}
	return BudgetExhausted(s, ob, now), true
}

// ChargeOTP is StepBudget for an OTP (POST /v1/otp), m stamped: it queues
// nothing, so its units are charged here, in one atomic step of the store,
// before the send. giveBack returns them when it ends without reaching
// the provider (the caller calls it then; nil when nothing was charged).
// OTP first: a store that fails (Redis down) lets the OTP through
// uncharged, logged, as the OTP's other shared steps do in an outage.
func (p *Pipeline) ChargeOTP(ctx context.Context, s Sender, m *sms.Message) (giveBack func(), err error) {
	if p.Budgets == nil || m.Budget.Units <= 0 {
		return nil, nil
	}
	b := m.Budget
	if err := p.Budgets.ChargeBudget(ctx, s.Name, b); err != nil {
		if rj, ok := overBudget(s, err, m.CreatedAt); ok {
			return nil, rj
		}
		if p.Log != nil {
			p.Log.WarnContext(ctx, "budget: an OTP sent uncharged: the store failed", "producer", s.Name, "err", err)
		}
		return nil, nil
	}
	return func() {
		// the request's context may be over: the give-back is owed anyway
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := p.Budgets.RefundBudget(ctx, s.Name, b); err != nil && p.Log != nil {
			p.Log.WarnContext(ctx, "budget: give back an OTP's units", "producer", s.Name, "err", err)
		}
	}, nil
}
