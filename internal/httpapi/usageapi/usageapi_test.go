package usageapi

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/sms"
)

func TestWindow(t *testing.T) {
	now := time.Date(2026, 12, 7, 15, 4, 5, 0, time.UTC)
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		from, to         string
		wantFrom, wantTo string
		field            string
	}{
		{"", "", "2026-11-30", "2026-12-07", ""},
		{"2026-12-05", "", "2026-12-05", "2026-12-07", ""},
		{"2026-01-01", "2027-01-01", "2026-11-30", "2026-12-07", ""}, // cut to the retention
		{"", "2026-12-06", "2026-11-30", "2026-12-06", ""},
		{"", "2000-01-01", "2000-01-01", "2000-01-01", ""}, // before the retention: Read answers no rows
		{"2026-12-7", "", "", "", "from"},
		{"", "today", "", "", "to"},
		{"2026-12-07", "2026-12-06", "", "", "from"},
	} {
		from, to, err := Window(tc.from, tc.to, now, week)
		var ve *sms.ValidationError
		switch {
		case tc.field != "":
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Errorf("from %q to %q: %v, want an error naming %s", tc.from, tc.to, err, tc.field)
			}
		case err != nil:
			t.Errorf("from %q to %q: %v", tc.from, tc.to, err)
		case tc.wantFrom != "2000-01-01" && (from.Format(time.DateOnly) != tc.wantFrom || to.Format(time.DateOnly) != tc.wantTo):
			t.Errorf("from %q to %q: %s..%s, want %s..%s", tc.from, tc.to, from.Format(time.DateOnly), to.Format(time.DateOnly), tc.wantFrom, tc.wantTo)
		case tc.wantFrom == "2000-01-01" && !to.Before(from):
			t.Errorf("from %q to %q: %s..%s, want an empty range", tc.from, tc.to, from, to)
		}
	}
}

// Only configured producers have series; a message of another producer
// (or an invalid class) adds to none and creates none.
func TestUnitsOnlyConfiguredProducers(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := NewUnits(reg, map[string][]sms.Class{"notify": {sms.ClassTransactional, sms.ClassMarketing}})
	if err != nil {
		t.Fatal(err)
	}
	u.Add(&sms.Message{Producer: "notify", Class: sms.ClassMarketing, Segments: 3},
		&sms.Message{Producer: "notify", Class: sms.ClassTransactional},
		&sms.Message{Producer: "stranger", Class: sms.ClassOTP, Segments: 2},
		&sms.Message{Producer: "notify", Class: sms.Class(9)})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, mf.GetName()+"{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(m.GetCounter().GetValue(), 'g', -1, 64))
		}
	}
	want := []string{
		"smsgw_producer_units_total{class=marketing,producer=notify} 3",
		"smsgw_producer_units_total{class=transactional,producer=notify} 1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
