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
	"smsgw/internal/opsview"
	"smsgw/internal/sms"
)

func paceOf(p history.Pace) opsview.PaceStats {
	out := opsview.PaceStats{Backlog: p.Backlog, SendRate: p.SendRate, ArrivalRate: p.ArrivalRate}
	if d, ok := p.Drain(); ok {
		secs := d.Seconds()
		out.DrainSeconds = &secs
	}
	return out
}

func (s *Server) adminHistory(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, err := s.Ops.History.Store.Now(ctx)
	var series history.Series
	if err == nil {
		series, err = s.Ops.History.Store.Read(ctx, now)
	}
	if err != nil {
		s.WriteError(w, r, &apiError{Kind: kindUnavailable, Detail: "the history store did not answer",
			RetryAfter: time.Second, Err: err})
		return
	}
	n := len(series.Samples)
	out := opsview.HistoryResponse{Scope: s.Ops.History.Scope, StepSeconds: series.Step.Seconds(),
		Start: series.Start.UTC(), End: series.End().UTC(), Throttled: make([]int64, n),
		Sent: map[string][]int64{}, Accepted: map[string][]int64{}, Queued: map[string][]*int64{},
		Limits: opsview.HistoryLimits{ContractRPS: s.Cfg.Provider.ContractRPS, TargetRPS: s.Cfg.Limits.TargetRPS,
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
		out.Drain = &opsview.DrainStats{OverSeconds: drainOver.Seconds(), Total: paceOf(total), ByClass: map[string]opsview.PaceStats{}}
		for _, cl := range sms.Classes {
			out.Drain.ByClass[cl.String()] = paceOf(byClass[cl])
		}
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

// drainOver is how far back the current pace is measured.
const drainOver = time.Minute
