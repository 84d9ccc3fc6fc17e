package tests

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// otpSteps is, per OTP id, the time (ms) of each step of the fast path as
// its answer's Server-Timing header gave it (dispatch.Step).
type otpSteps map[string]map[string]float64

// stepOrder is the fast path's steps in the order a request meets them.
var stepOrder = []string{"decode", "idempotency", "protect", "ingress", "reserve", "wait", "provider"}

// add records the Server-Timing of id's answer.
func (s otpSteps) add(id string, h http.Header) {
	st := map[string]float64{}
	for part := range strings.SplitSeq(h.Get("Server-Timing"), ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(part), ";dur=")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(dur, 64); err == nil {
			st[name] = v
		}
	}
	if len(st) > 0 {
		s[id] = st
	}
}

// log logs where the OTPs' milliseconds went: per step its p50, p99 and
// max over the OTPs, and the steps of the slowest OTPs by the provider's
// measure (recs: the simulator's records). "to provider" is the
// simulator's arrival minus the steps before the provider call: the
// request's way to the simulator (the rest of the provider step is the
// answer's way back).
func (s otpSteps) log(t *testing.T, label string, recs []simRecord) {
	t.Helper()
	type one struct {
		id    string
		total float64
	}
	var all []one
	for _, r := range recs {
		if _, ok := s[r.Reference]; ok && !r.AcceptedAt.IsZero() {
			all = append(all, one{r.Reference, float64(r.Arrived.Sub(r.AcceptedAt).Microseconds()) / 1000})
		}
	}
	if len(all) == 0 {
		t.Logf("%s: no OTP with both steps and a provider record", label)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: where the milliseconds go (%d OTPs; ms p50/p99/max):", label, len(all))
	for _, name := range append(slices.Clone(stepOrder), "to provider") {
		var xs []float64
		for _, o := range all {
			xs = append(xs, s.step(o.id, name, o.total))
		}
		slices.Sort(xs)
		fmt.Fprintf(&b, " %s %.2f/%.2f/%.2f;", name, pct(xs, .5), pct(xs, .99), pct(xs, 1))
	}
	slices.SortFunc(all, func(a, b one) int { return cmp.Compare(b.total, a.total) })
	b.WriteString("\n  slowest:")
	for _, o := range all[:min(5, len(all))] {
		fmt.Fprintf(&b, "\n  %.2f ms:", o.total)
		for _, name := range append(slices.Clone(stepOrder), "to provider") {
			fmt.Fprintf(&b, " %s %.2f", name, s.step(o.id, name, o.total))
		}
	}
	t.Log(b.String())
}

// step is the time of step name of id; "to provider" is total (the
// simulator's measure) minus the steps before the provider call.
func (s otpSteps) step(id, name string, total float64) float64 {
	if name != "to provider" {
		return s[id][name]
	}
	before := 0.0
	for _, n := range stepOrder[:len(stepOrder)-1] {
		before += s[id][n]
	}
	return total - before
}
