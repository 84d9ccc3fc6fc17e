package sms

import "time"

// Budget is what a message costs its producer's budget (producers[].budget):
// Units in the day and the month it was accepted in. The store decides the
// charge atomically with storing the message (refusing it when a period
// would go over its limit) and keeps Units and the period ids with the
// message, to give them back to those periods when it ends unsent. The
// zero Budget charges nothing.
type Budget struct {
	Units int
	Day   BudgetPeriod
	Month BudgetPeriod
}

// BudgetPeriod is one period a message is charged to: its id ("" none) and
// the limit in force at accept (not stored with the message).
type BudgetPeriod struct {
	ID    string
	Limit int64
}

// Periods are b's periods, daily first.
func (b *Budget) Periods() [2]*BudgetPeriod { return [2]*BudgetPeriod{&b.Day, &b.Month} }

// BudgetDay and BudgetMonth are the period ids of t in loc: a period id
// names its kind and its start, so one from another kind or date never
// matches.
func BudgetDay(t time.Time, loc *time.Location) string { return "d" + t.In(loc).Format("20060102") }

// BudgetMonth is the id of t's month in loc (BudgetDay).
func BudgetMonth(t time.Time, loc *time.Location) string { return "m" + t.In(loc).Format("200601") }

// BudgetDayEnd and BudgetMonthEnd are when the day and month of t in loc
// end: the reset of a period.
func BudgetDayEnd(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
}

// BudgetMonthEnd is when t's month in loc ends (BudgetDayEnd).
func BudgetMonthEnd(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, loc)
}
