package opsview

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

type lanesOf []queue.LaneStats

func (l lanesOf) Lanes(context.Context) ([]queue.LaneStats, error) { return l, nil }

// TestSenderLaneBacklogMetrics: a configured sender is its own label, every other
// sender (the default one included) is summed as other, whatever their
// number, and the drain time is the configured sender's backlog at its
// max_rps; the stats answer's lanes get the same backlog and oldest age.
func TestSenderLaneBacklogMetrics(t *testing.T) {
	lanes := lanesOf{
		{Lane: "SlowCo", Queued: map[sms.Class]int64{sms.ClassMarketing: 90, sms.ClassOTP: 2}, OldestAge: 40 * time.Second, HeldFor: time.Second},
		{Lane: "+15550000001", Queued: map[sms.Class]int64{sms.ClassMarketing: 3}, OldestAge: time.Second},
		{Lane: "", Queued: map[sms.Class]int64{sms.ClassMarketing: 4, sms.ClassTransactional: 1}, OldestAge: 5 * time.Second},
	}
	c := NewSenderLaneCollector(lanes, map[string]float64{"SlowCo": 2, "Idle": 1}, slog.New(slog.DiscardHandler))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += " " + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"smsgw_queue_sender_drain_seconds SlowCo": 46, "smsgw_queue_sender_drain_seconds Idle": 0,
		"smsgw_queue_sender_oldest_seconds SlowCo": 40, "smsgw_queue_sender_oldest_seconds Idle": 0,
		"smsgw_queue_sender_oldest_seconds other":     5,
		"smsgw_queue_sender_backlog marketing SlowCo": 90, "smsgw_queue_sender_backlog otp SlowCo": 2,
		"smsgw_queue_sender_backlog marketing other": 7, "smsgw_queue_sender_backlog transactional other": 1,
		"smsgw_queue_sender_backlog otp other": 0, "smsgw_queue_sender_backlog marketing Idle": 0,
		"smsgw_queue_sender_backlog otp Idle": 0, "smsgw_queue_sender_backlog transactional Idle": 0,
		"smsgw_queue_sender_backlog transactional SlowCo": 0,
	}
	if !maps.Equal(got, want) {
		t.Errorf("metrics\n%v\nwant\n%v", got, want)
	}
	sl := NewSenderLanes(map[string]float64{"SlowCo": 2}, nil, nil).Read(t.Context())
	withBacklog(sl, lanes, map[string]float64{"SlowCo": 2})
	if len(sl) != 2 || sl[0].Sender != "SlowCo" || *sl[0].Backlog != 92 || *sl[0].OldestSeconds != 40 ||
		sl[1].Sender != SenderLaneOther || *sl[1].Backlog != 8 || *sl[1].OldestSeconds != 5 {
		t.Errorf("sender lanes %+v", sl)
	}
}
