package embedded

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := newClock()
	dir := t.TempDir()
	q := open(t, Config{Path: dir, Now: clk.Now, Registerer: reg})
	ctx := t.Context()
	if _, err := q.Enqueue(ctx, msg("p", sms.ClassOTP, clk.Now())); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if n, err := q.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"smsgw_queue_embedded_commit_ops":              3, // enqueue, take, recover
		"smsgw_queue_embedded_commit_duration_seconds": 3,
		"smsgw_queue_embedded_recovered_total":         1,
		"smsgw_queue_embedded_pruned_total":            0,
		"smsgw_queue_embedded_commit_errors_total":     0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	// Reopening on the same registry must not fail on duplicate collectors.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, Config{Path: dir, Now: clk.Now, Registerer: reg})
}

// TestGroupCommit: concurrent enqueues share fsyncs. 64 callers released at
// once cannot each get a commit of their own unless every one arrives after
// the previous fsync ended.
func TestGroupCommit(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := open(t, Config{Registerer: reg})
	const callers = 64
	start := make(chan struct{})
	errs := make(chan error, callers)
	for range callers {
		go func() {
			<-start
			_, err := q.Enqueue(t.Context(), msg("p", sms.ClassMarketing, time.Now()))
			errs <- err
		}()
	}
	close(start)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "smsgw_queue_embedded_commit_ops" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleSum() != callers {
			t.Fatalf("%v ops committed, want %d", h.GetSampleSum(), callers)
		}
		if h.GetSampleCount() >= callers {
			t.Fatalf("%d commits for %d concurrent enqueues: no grouping", h.GetSampleCount(), callers)
		}
		t.Logf("%d concurrent enqueues in %d commits", callers, h.GetSampleCount())
		return
	}
	t.Fatal("commit ops histogram missing")
}
