package opsview

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/config"
	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// BudgetCollector exports each budgeted producer's units used in its
// current day and month and the limit of each (producers[].budget), read
// from the store at scrape time: the alert rules compare the two. Labels
// are configured producer names and the two periods only. With Redis every
// replica reports the same shared counts: aggregate with max.
type BudgetCollector struct {
	b         queue.Budgets
	producers []budgeted
	now       func() time.Time
	log       *slog.Logger
	used      *prometheus.Desc
	limit     *prometheus.Desc
	failLog   logsample.Sampler
}

type budgeted struct {
	name string
	cfg  config.BudgetConfig
	loc  *time.Location
}

// NewBudgetCollector reports the budgets of cfg's producers kept in b.
func NewBudgetCollector(b queue.Budgets, cfg config.Config, now func() time.Time, log *slog.Logger) *BudgetCollector {
	c := &BudgetCollector{b: b, now: now, log: log,
		used: metricdef.Desc("smsgw_producer_budget_used_units",
			"Units (segments with provider.count_segments, else messages) the producer has spent in its current period (daily, monthly) of producers[].budget; units of messages that ended unsent are given back.",
			"producer", "period"),
		limit: metricdef.Desc("smsgw_producer_budget_limit_units",
			"producers[].budget.daily_units or monthly_units: the producer's cap for the period (no series without a cap).",
			"producer", "period"),
	}
	for _, p := range cfg.Producers {
		if p.Budget.Set() {
			c.producers = append(c.producers, budgeted{name: p.Name, cfg: p.Budget, loc: p.Budget.Location()})
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *BudgetCollector) Describe(ch chan<- *prometheus.Desc) {
	metricdef.Describe(ch, c.used, c.limit)
}

// Collect implements prometheus.Collector: one read per budgeted producer.
func (c *BudgetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := c.now()
	for _, p := range c.producers {
		ids := []string{sms.BudgetDay(now, p.loc), sms.BudgetMonth(now, p.loc)}
		limits := []int64{p.cfg.DailyUnits, p.cfg.MonthlyUnits}
		used, err := c.b.BudgetUsed(ctx, p.name, ids)
		if err != nil {
			if n, ok := c.failLog.Add(time.Now(), statsLogEvery); ok {
				c.log.Warn("metrics: producer budgets", "count", n, "err", err)
			}
			return
		}
		for i, period := range queue.BudgetPeriodNames {
			ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(used[i]), p.name, period)
			if limits[i] > 0 {
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limits[i]), p.name, period)
			}
		}
	}
	c.failLog.Reset()
}
