package history

import (
	"testing"
	"time"

	"smsgw/internal/sms"
)

func TestPaceAndDrain(t *testing.T) {
	t.Parallel()
	// 12 steps of 5 s; over the last 4 (20 s): marketing sent 1400 and
	// 200 queued; OTP sent 30, 20 of them on the fast path, 10 queued.
	s := Series{Start: base, Step: 5 * time.Second, Samples: make([]Sample, 12)}
	otpSent, otpQueued := []int64{10, 5, 10, 5}, []int64{3, 2, 3, 2}
	for i := range 4 {
		s.Samples[8+i] = Sample{Sent: sent(otpSent[i], 0, 350), Direct: 5, Accepted: sent(otpQueued[i], 0, 50)}
	}
	s.Samples[10].Queued, s.Samples[10].HasQueued = sent(0, 0, 99999), true
	s.Samples[11].Queued, s.Samples[11].HasQueued = sent(20, 0, 6000), true

	total, by, known := s.Pace(4)
	if !known {
		t.Fatal("depth unknown")
	}
	mkt := by[sms.ClassMarketing]
	if mkt.Backlog != 6000 || mkt.SendRate != 70 || mkt.ArrivalRate != 10 {
		t.Fatalf("marketing pace %+v, want backlog 6000 (the last depth), 70/s out, 10/s in", mkt)
	}
	if d, ok := mkt.Drain(); !ok || d != 100*time.Second {
		t.Fatalf("marketing drains in %s (%v), want 6000 / (70 - 10) = 100s", d, ok)
	}
	otp := by[sms.ClassOTP]
	if otp.SendRate != 0.5 || otp.ArrivalRate != 0.5 {
		t.Fatalf("OTP pace %+v: the fast path's 20 of 30 sends must not count as draining the queue", otp)
	}
	if _, ok := otp.Drain(); ok {
		t.Fatal("an OTP backlog with arrivals equal to sends drains")
	}
	if total.Backlog != 6020 || total.SendRate != 70.5 || total.ArrivalRate != 10.5 {
		t.Fatalf("total pace %+v", total)
	}
	if d, ok := (Pace{Backlog: 0, SendRate: 0, ArrivalRate: 5}).Drain(); !ok || d != 0 {
		t.Fatalf("an empty queue drains in %s (%v), want 0", d, ok)
	}
	if _, ok := (Pace{Backlog: 1, SendRate: 1e-300, ArrivalRate: 0}).Drain(); ok {
		t.Fatal("a drain time beyond time.Duration is reported")
	}

	// No depth recorded among the steps measured: unknown.
	if _, _, known := s.Pace(1); !known {
		t.Fatal("the last step has a depth")
	}
	s.Samples[11].HasQueued = false
	s.Samples[10].HasQueued = false
	if _, _, known := s.Pace(2); known {
		t.Fatal("depth known without a recorded depth")
	}
	if _, _, known := (Series{}).Pace(4); known {
		t.Fatal("an empty series has a pace")
	}
}
