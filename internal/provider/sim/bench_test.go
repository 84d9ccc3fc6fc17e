package sim_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// BenchmarkHandler measures the simulator's own cost per send (decision,
// recording) without the network, unlimited so every send is recorded.
func BenchmarkHandler(b *testing.B) {
	s, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	h := s.Handler()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := []byte(`{"to":"+819012345678","body":"hello","class":"otp","reference":"r` + strconv.FormatInt(n.Add(1), 10) + `"}`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/send", bytes.NewReader(body)))
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
	b.StopTimer()
	start := time.Now()
	st := s.Stats()
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "stats-ms")
	if st.Accepted != int(n.Load()) {
		b.Fatalf("accepted %d of %d", st.Accepted, n.Load())
	}
}

// BenchmarkHTTP measures sends per second through the generic adapter to a
// simulator over loopback: the ceiling the provider side puts on a gateway
// benchmark run with the provider unlimited.
func BenchmarkHTTP(b *testing.B) {
	s, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	p, _ := adapterTo(b, s, 0)
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "hello", Segments: 1, Class: sms.ClassMarketing}
			if _, err := p.Send(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
}
