// Package usageapi answers GET /v1/usage (the calling producer's own
// usage) and GET /v1/admin/usage (every configured producer's): messages
// and units per day, by class, destination country and final status, as
// the queue counts them (queue.UsageReader). It also keeps
// smsgw_producer_units_total. The router (internal/httpapi) authenticates
// and turns the errors returned here into problems.
package usageapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Counts is a number of messages and the units they cost.
type Counts struct {
	Messages int64 `json:"messages"`
	Units    int64 `json:"units"`
}

// Row is one producer's messages created on Day, of Class, to Country:
// how many were accepted, and how many the queue ended with each final
// status (those still queued or sending are in Accepted only).
type Row struct {
	Day      string            `json:"day"`
	Producer string            `json:"producer"`
	Class    string            `json:"class"`
	Country  string            `json:"country"`
	Accepted Counts            `json:"accepted"`
	Final    map[string]Counts `json:"final"`
}

// Answer is the body of both routes.
type Answer struct {
	From string `json:"from"` // first day, UTC
	To   string `json:"to"`   // last day, UTC
	Rows []Row  `json:"rows"`
}

// Handler serves the two routes.
type Handler struct {
	Reader    queue.UsageReader
	Producers []string      // configured producer names: the admin view's, in order
	Retention time.Duration // messages.retention: how far back the days go
	Now       func() time.Time
	// Producer is the calling producer's name (GET /v1/usage).
	Producer func(r *http.Request) string
	// WriteError answers err as a problem (a *sms.ValidationError: 400
	// naming its field).
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
}

// Own answers GET /v1/usage.
func (h *Handler) Own(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, []string{h.Producer(r)})
}

// All answers GET /v1/admin/usage.
func (h *Handler) All(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, h.Producers)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, producers []string) {
	from, to, err := Window(r.URL.Query().Get("from"), r.URL.Query().Get("to"), h.Now(), h.Retention)
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	ans, err := Read(r.Context(), h.Reader, producers, from, to)
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(ans)
}

// Days is how many days the retention covers, today included: a message
// created that many days ago may still be read.
func Days(retention time.Duration) int {
	return int((retention+24*time.Hour-1)/(24*time.Hour)) + 1
}

// Window reads the from and to query parameters (YYYY-MM-DD, UTC): both
// optional, from at most to. The answer covers the days of the retention
// (messages.retention) up to today: a range reaching outside is cut to it.
func Window(fromQ, toQ string, now time.Time, retention time.Duration) (from, to time.Time, err error) {
	today := queue.UsageDay(now)
	first := today.AddDate(0, 0, 1-Days(retention))
	from, to = first, today
	parse := func(field, v string, out *time.Time) error {
		if v == "" {
			return nil
		}
		t, err := time.Parse(queue.UsageDayLayout, v)
		if err != nil {
			return &sms.ValidationError{Field: field, Reason: "must be a day written YYYY-MM-DD"}
		}
		*out = t
		return nil
	}
	if err := parse("from", fromQ, &from); err != nil {
		return from, to, err
	}
	if err := parse("to", toQ, &to); err != nil {
		return from, to, err
	}
	if fromQ == "" && to.Before(from) {
		from = to // only to, before the retention: an empty range
	}
	if to.Before(from) {
		return from, to, &sms.ValidationError{Field: "from", Reason: "must not be after to"}
	}
	return maxTime(from, first), minTime(to, today), nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Read is the answer for producers over from..to.
func Read(ctx context.Context, u queue.UsageReader, producers []string, from, to time.Time) (Answer, error) {
	ans := Answer{From: from.Format(queue.UsageDayLayout), To: to.Format(queue.UsageDayLayout), Rows: []Row{}}
	if to.Before(from) {
		// the whole range lies outside the retention: nothing to read
		ans.From = ans.To
		return ans, nil
	}
	rows, err := u.Usage(ctx, producers, from, to)
	if err != nil {
		return Answer{}, err
	}
	for _, r := range rows {
		n := len(ans.Rows)
		if n == 0 || ans.Rows[n-1].Day != r.Day || ans.Rows[n-1].Producer != r.Producer ||
			ans.Rows[n-1].Class != r.Class.String() || ans.Rows[n-1].Country != r.Country {
			ans.Rows = append(ans.Rows, Row{Day: r.Day, Producer: r.Producer, Class: r.Class.String(), Country: r.Country,
				Final: map[string]Counts{}})
			n++
		}
		c := Counts{Messages: r.Messages, Units: r.Units}
		if r.Status == queue.UsageAccepted {
			ans.Rows[n-1].Accepted = c
		} else {
			ans.Rows[n-1].Final[r.Status] = c
		}
	}
	return ans, nil
}

// Units is smsgw_producer_units_total: the units producers had accepted
// (queued, or sent on the OTP fast path), one series per configured
// producer and class; a message of a producer the configuration does not
// name creates none.
type Units struct {
	vec   *prometheus.CounterVec
	known map[string]bool
}

// NewUnits registers the counter with a zero series for each producer and
// each of its classes.
func NewUnits(reg prometheus.Registerer, producers map[string][]sms.Class) (*Units, error) {
	u := &Units{known: map[string]bool{},
		vec: metricdef.CounterVec("smsgw_producer_units_total",
			"Units (provider charges: segments with provider.count_segments) of the messages each producer had accepted, by class.",
			"producer", "class")}
	names := make([]string, 0, len(producers))
	for p := range producers {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		u.known[p] = true
		for _, c := range producers[p] {
			u.vec.WithLabelValues(p, c.String())
		}
	}
	if err := metricdef.Register(reg, u.vec); err != nil {
		return nil, err
	}
	return u, nil
}

// Add counts messages just accepted.
func (u *Units) Add(ms ...*sms.Message) {
	if u == nil {
		return
	}
	for _, m := range ms {
		if u.known[m.Producer] && m.Class.Valid() {
			u.vec.WithLabelValues(m.Producer, m.Class.String()).Add(float64(max(m.Segments, 1)))
		}
	}
}
