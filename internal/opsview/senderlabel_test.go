package opsview

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/sms"
)

// TestSenderLanesMaskNumbers: a configured sender that is a phone number
// (a long code) is shown masked in the stats answer's sender_lanes and in
// the backlog metrics, and its backlog still reaches its lane; an
// alphanumeric sender is shown as it is.
func TestSenderLanesMaskNumbers(t *testing.T) {
	const number, masked = "+15551234567", "+155****4567"
	limits := map[string]float64{number: 1, "Mkt1": 3}
	queued := lanesOf{{Lane: number, Queued: map[sms.Class]int64{sms.ClassMarketing: 7}, OldestAge: 3 * time.Second}}

	sl := NewSenderLanes(limits, nil, nil).Read(t.Context())
	withBacklog(sl, queued, limits)
	body, err := json.Marshal(sl)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "5551234567") {
		t.Fatalf("the number in clear in the stats answer: %s", body)
	}
	var got *SenderLane
	for i := range sl {
		if sl[i].Sender == masked {
			got = &sl[i]
		}
	}
	if got == nil || got.Backlog == nil || *got.Backlog != 7 {
		t.Fatalf("lanes %s: want %s with its backlog 7", body, masked)
	}
	if !strings.Contains(string(body), `"sender":"Mkt1"`) {
		t.Errorf("alphanumeric sender not shown as it is: %s", body)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewSenderLaneCollector(queued, limits, slog.New(slog.DiscardHandler)))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "5551234567") {
					t.Errorf("%s: the number in clear in label %s", mf.GetName(), l.GetName())
				}
				seen = seen || l.GetValue() == masked
			}
		}
	}
	if !seen {
		t.Errorf("no series labelled %s", masked)
	}
}
