package metricdef

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Each constructor exports the family with the name, help, type, labels
// and buckets it was given, as the registry gathers it.
func TestMetricsExportAsDeclared(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	buckets := []float64{.01, .1, 1}
	cv := CounterVec("t_counter_vec_total", "a counter with labels", "lane", "result")
	gv := GaugeVec("t_gauge_vec", "a gauge with labels", "class")
	hv := HistogramVec("t_histogram_vec_seconds", "a histogram with labels", buckets, "step")
	c, g, h := Counter("t_counter_total", "a counter"), Gauge("t_gauge", "a gauge"), Histogram("t_histogram_seconds", "a histogram", buckets)
	if err := Register(reg, cv, gv, hv, c, g, h); err != nil {
		t.Fatal(err)
	}
	cv.WithLabelValues("otp", "message").Add(2)
	gv.WithLabelValues("marketing").Set(3)
	hv.WithLabelValues("reserve").Observe(.05)
	c.Inc()
	g.Set(4)
	h.Observe(.5)

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		help   string
		typ    dto.MetricType
		labels []string
	}{
		"t_counter_vec_total":     {"a counter with labels", dto.MetricType_COUNTER, []string{"lane", "result"}},
		"t_gauge_vec":             {"a gauge with labels", dto.MetricType_GAUGE, []string{"class"}},
		"t_histogram_vec_seconds": {"a histogram with labels", dto.MetricType_HISTOGRAM, []string{"step"}},
		"t_counter_total":         {"a counter", dto.MetricType_COUNTER, nil},
		"t_gauge":                 {"a gauge", dto.MetricType_GAUGE, nil},
		"t_histogram_seconds":     {"a histogram", dto.MetricType_HISTOGRAM, nil},
	}
	if len(fams) != len(want) {
		t.Fatalf("gathered %d families, want %d", len(fams), len(want))
	}
	for _, f := range fams {
		w, ok := want[f.GetName()]
		if !ok {
			t.Errorf("unexpected family %s", f.GetName())
			continue
		}
		if f.GetHelp() != w.help || f.GetType() != w.typ {
			t.Errorf("%s: help %q type %v, want %q %v", f.GetName(), f.GetHelp(), f.GetType(), w.help, w.typ)
		}
		m := f.GetMetric()[0]
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName())
		}
		if !slices.Equal(labels, w.labels) {
			t.Errorf("%s: labels %v, want %v", f.GetName(), labels, w.labels)
		}
		if w.typ == dto.MetricType_HISTOGRAM {
			var bounds []float64
			for _, b := range m.GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if !slices.Equal(bounds, buckets) {
				t.Errorf("%s: buckets %v, want %v", f.GetName(), bounds, buckets)
			}
		}
	}
}

// Register stops at the first collector the registry refuses: the ones
// before it stay registered, the ones after it are not registered.
func TestRegisterStopsAtFirstError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	first := Counter("t_first_total", "registered")
	if err := Register(reg, first); err != nil {
		t.Fatal(err)
	}
	before, after := Gauge("t_before", "before the clash"), Gauge("t_after", "after the clash")
	err := Register(reg, before, Counter("t_first_total", "registered"), after)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second t_first_total: err %v, want the registry's refusal", err)
	}
	if !reg.Unregister(before) {
		t.Error("the collector before the clash was not registered")
	}
	if reg.Unregister(after) {
		t.Error("the collector after the clash was registered")
	}
}

// scraped is a collector of two metrics computed at scrape time.
type scraped struct{ depth, up *prometheus.Desc }

func (c scraped) Describe(ch chan<- *prometheus.Desc) { Describe(ch, c.depth, c.up) }

func (c scraped) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, 7, "otp", "ready")
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
}

// Describe sends every description it is given, in order, and a collector
// built on Desc and Describe exports its metrics with the declared names,
// help and labels.
func TestDescribedCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := scraped{depth: Desc("t_depth", "a depth by class and state", "class", "state"), up: Desc("t_up", "whether the read worked")}
	ch := make(chan *prometheus.Desc, 3)
	c.Describe(ch)
	close(ch)
	if descs := slices.Collect(func(yield func(*prometheus.Desc) bool) {
		for d := range ch {
			if !yield(d) {
				return
			}
		}
	}); !slices.Equal(descs, []*prometheus.Desc{c.depth, c.up}) {
		t.Fatalf("Describe sent %v, want depth and up", descs)
	}
	if err := Register(reg, c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		got[f.GetName()] = f.GetHelp() + " " + strings.Join(labels, ",")
	}
	want := map[string]string{"t_depth": "a depth by class and state class=otp,state=ready", "t_up": "whether the read worked "}
	if !maps.Equal(got, want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
}
