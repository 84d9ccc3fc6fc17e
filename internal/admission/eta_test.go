package admission

import (
	"math"
	"slices"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TestWhen is the estimate's model as a table: work ahead now, work
// falling due later, a pause, and when a message of a class due d from now
// goes. Rates: 90 units/s in all, marketing capped at 70.
func TestWhen(t *testing.T) {
	const otp, tx, mk = sms.ClassOTP, sms.ClassTransactional, sms.ClassMarketing
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for _, tc := range []struct {
		name     string
		ahead    [NumClasses]float64
		pause    time.Duration
		class    sms.Class
		d        time.Duration
		arrivals []arrival
		want     float64 // seconds
	}{
		{"nothing ahead", [NumClasses]float64{}, 0, mk, 0, nil, 0},
		{"own class at its cap", [NumClasses]float64{mk: 140}, 0, mk, 0, nil, 2},
		{"classes above at the target first", [NumClasses]float64{otp: 45, tx: 45, mk: 70}, 0, mk, 0, nil, 2},
		{"classes below do not count", [NumClasses]float64{mk: 700}, 0, tx, 0, nil, 0},
		{"a pause first", [NumClasses]float64{mk: 70}, sec(10), mk, 0, nil, 11},
		{"due later: the backlog drained meanwhile", [NumClasses]float64{mk: 140}, 0, mk, sec(10), nil, 10},
		{"due later, behind a campaign due with it", [NumClasses]float64{}, 0, mk, sec(10), []arrival{{sec(10), mk, 700}}, 20},
		{"a campaign due earlier drains partly", [NumClasses]float64{}, 0, mk, sec(10), []arrival{{sec(5), mk, 700}}, 15},
		{"work due after it is not ahead", [NumClasses]float64{}, 0, mk, sec(10), []arrival{{sec(11), mk, 700}}, 10},
		{"an OTP burst due with it goes first", [NumClasses]float64{}, 0, mk, sec(10), []arrival{{sec(10), otp, 90}}, 11},
		{"scheduled work of a lower class is not ahead", [NumClasses]float64{}, 0, tx, sec(10), []arrival{{sec(5), mk, 700}}, 10},
		{"a pause past the due time", [NumClasses]float64{mk: 70}, sec(20), mk, sec(10), nil, 21},
		{"the classes above take the capacity before it", [NumClasses]float64{tx: 900}, 0, mk, sec(5), []arrival{{sec(5), mk, 70}}, 5 + 5 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := etaState{ahead: tc.ahead, pause: tc.pause, target: 90, pace: [NumClasses]float64{otp: 90, tx: 90, mk: 70}}
			got := st.when(tc.class, tc.d, tc.arrivals).Seconds()
			if math.Abs(got-tc.want) > 0.001 {
				t.Errorf("when = %.3fs, want %.3fs", got, tc.want)
			}
		})
	}
}

// The horizons read for a request: every due time exactly (and the
// profile before it while there is room), at most queue.MaxHorizons,
// ascending, each longer by the clock margin.
func TestScheduleHorizons(t *testing.T) {
	now := time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *sms.Message { return &sms.Message{NotBefore: now.Add(d)} }
	if h := scheduleHorizons(now, []*sms.Message{{}, at(-time.Minute), at(0)}); len(h) != 0 {
		t.Errorf("nothing due later, horizons %v", h)
	}
	h := scheduleHorizons(now, []*sms.Message{at(16 * time.Second)})
	want := []time.Duration{1, 2, 4, 8, 12, 16}
	for i := range want {
		want[i] = want[i]*time.Second + clockSkew
	}
	if !slices.Equal(h, want) {
		t.Errorf("one due in 16 s: %v, want %v", h, want)
	}
	var ms []*sms.Message
	for i := 1; i <= 200; i++ {
		ms = append(ms, at(time.Duration(i)*time.Minute))
	}
	h = scheduleHorizons(now, ms)
	if len(h) > queue.MaxHorizons || !slices.IsSorted(h) || h[len(h)-1] != 200*time.Minute+clockSkew {
		t.Errorf("200 dues: %d horizons, last %v", len(h), h[len(h)-1])
	}
	if err := queue.CheckHorizons(h); err != nil {
		t.Error(err)
	}
}
