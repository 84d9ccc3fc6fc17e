package opsview

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"smsgw/internal/dispatch"
	"smsgw/internal/history"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// HistoryView is the recorder of this replica and the store it reads.
type HistoryView struct {
	Store history.Store
	Rec   *history.Recorder
	Scope string // shared | process
}

// NewHistoryView records this process's dispatcher counters, the messages
// the API queued (the smsgw_api_accepted_total counters, read back) and
// the backlog due now (ready + leased: scheduled messages wait for their
// time, not for us), every history.DefaultStep, into store.
func NewHistoryView(store history.Store, scope string, q queue.Queue, snap func() dispatch.Snapshot,
	accepted *prometheus.CounterVec, quiet func() bool, log *slog.Logger) (*HistoryView, error) {
	v := &HistoryView{Store: store, Scope: scope}
	var err error
	counters := func() history.Counters {
		s := snap()
		out := history.Counters{Direct: s.SendNow.Sent, Throttled: s.Throttled}
		for _, cl := range sms.Classes {
			out.Sent[cl] = s.Classes[cl].Sent
			var m dto.Metric
			if accepted.WithLabelValues(cl.String()).Write(&m) == nil {
				out.Accepted[cl] = int64(m.GetCounter().GetValue())
			}
		}
		return out
	}
	depth := func(ctx context.Context) (history.PerClass, error) {
		var out history.PerClass
		st, err := q.Stats(ctx)
		if err != nil {
			return out, err
		}
		for _, cl := range sms.Classes {
			out[cl] = st[cl].Ready + st[cl].Leased
		}
		return out, nil
	}
	v.Rec, err = history.NewRecorder(history.RecorderConfig{Store: v.Store, Counters: counters, Depth: depth, Logger: log,
		Quiet: quiet})
	if err != nil {
		return nil, fmt.Errorf("gateway: history: %w", err)
	}
	return v, nil
}
