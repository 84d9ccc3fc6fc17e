package httpapi

// GET /v1/admin/history: the last 15 minutes of send figures for the ops
// page, from internal/history (a ring in this process when embedded; the
// account's shared steps in Redis, which every replica adds to), with the
// limits to draw them against and how long the backlog takes to drain at
// the current pace.

import (
	"net/http"
	"time"

	"smsgw/internal/history"
	"smsgw/internal/sms"
)

type historyLimits struct {
	ContractRPS float64            `json:"contract_rps"`
	TargetRPS   float64            `json:"target_rps"`
	ClassMaxRPS map[string]float64 `json:"class_max_rps"`
}

type paceStats struct {
	Backlog      int64    `json:"backlog"`
	SendRate     float64  `json:"send_rate"`
	ArrivalRate  float64  `json:"arrival_rate"`
	DrainSeconds *float64 `json:"drain_seconds"` // null: the backlog does not shrink
}

type drainStats struct {
	OverSeconds float64              `json:"over_seconds"`
	Total       paceStats            `json:"total"`
	ByClass     map[string]paceStats `json:"by_class"`
}

// HistoryResponse is the answer of GET /v1/admin/history.
type HistoryResponse struct {
	Scope       string              `json:"scope"`
	StepSeconds float64             `json:"step_seconds"`
	Start       time.Time           `json:"start"`
	End         time.Time           `json:"end"`
	Sent        map[string][]int64  `json:"sent"`
	Accepted    map[string][]int64  `json:"accepted"`
	Queued      map[string][]*int64 `json:"queued"`
	Throttled   []int64             `json:"throttled"`
	Limits      historyLimits       `json:"limits"`
	Drain       *drainStats         `json:"drain"` // null: no queue depth recorded lately
}

func paceOf(p history.Pace) paceStats {
	out := paceStats{Backlog: p.Backlog, SendRate: p.SendRate, ArrivalRate: p.ArrivalRate}
	if d, ok := p.Drain(); ok {
		secs := d.Seconds()
		out.DrainSeconds = &secs
	}
	return out
}

func (s *Server) adminHistory(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, err := s.History.Store.Now(ctx)
	var series history.Series
	if err == nil {
		series, err = s.History.Store.Read(ctx, now)
	}
	if err != nil {
		s.WriteError(w, r, &apiError{Kind: kindUnavailable, Detail: "the history store did not answer",
			RetryAfter: time.Second, Err: err})
		return
	}
	n := len(series.Samples)
	out := HistoryResponse{Scope: s.History.Scope, StepSeconds: series.Step.Seconds(),
		Start: series.Start.UTC(), End: series.End().UTC(), Throttled: make([]int64, n),
		Sent: map[string][]int64{}, Accepted: map[string][]int64{}, Queued: map[string][]*int64{},
		Limits: historyLimits{ContractRPS: s.Cfg.Provider.ContractRPS, TargetRPS: s.Cfg.Limits.TargetRPS,
			ClassMaxRPS: map[string]float64{}}}
	for name, cl := range s.Cfg.Limits.Classes {
		out.Limits.ClassMaxRPS[name] = cl.MaxRPS
	}
	for _, cl := range sms.Classes {
		name := cl.String()
		sent, acc, queued := make([]int64, n), make([]int64, n), make([]*int64, n)
		for i, smp := range series.Samples {
			sent[i], acc[i] = smp.Sent[cl], smp.Accepted[cl]
			if smp.HasQueued {
				queued[i] = &smp.Queued[cl]
			}
		}
		out.Sent[name], out.Accepted[name], out.Queued[name] = sent, acc, queued
	}
	for i, smp := range series.Samples {
		out.Throttled[i] = smp.Throttled
	}
	if total, byClass, known := series.Pace(int(drainOver / series.Step)); known {
		out.Drain = &drainStats{OverSeconds: drainOver.Seconds(), Total: paceOf(total), ByClass: map[string]paceStats{}}
		for _, cl := range sms.Classes {
			out.Drain.ByClass[cl.String()] = paceOf(byClass[cl])
		}
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

// drainOver is how far back the current pace is measured.
const drainOver = time.Minute
