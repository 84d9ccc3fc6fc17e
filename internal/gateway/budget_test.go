package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// budgetUnits is the budget of the exactness test: a few hundred messages.
const budgetUnits = 500

// twoSegments is a GSM-7 body of two segments (over 160 characters).
var twoSegments = strings.Repeat("Your parcel arrives today. ", 7)

// withBudget gives notify a daily budget of units.
func withBudget(units int64) func(*config.Config) {
	return func(c *config.Config) {
		for i := range c.Producers {
			if c.Producers[i].Name == "notify" {
				c.Producers[i].Budget = config.BudgetConfig{DailyUnits: units}
			}
		}
	}
}

// budgetClient posts to its replica until a one-segment message is
// refused for the budget (a two-segment one refused may leave one unit,
// which a one-segment message then takes), and returns the ids and units
// it had accepted. Every refusal must be budget-exhausted.
type budgetClient struct {
	ids   []string
	units []int
	bad   []string
}

func (c *budgetClient) run(h *harness, seed int) {
	for i := seed; ; i++ {
		body := "Your parcel arrives today"
		if i%2 == 0 {
			body = twoSegments
		}
		r := h.post("/v1/messages", keyNotify, msg("transactional", "body", body))
		switch r.status {
		case http.StatusAccepted:
			var a struct {
				ID       string `json:"id"`
				Segments int    `json:"segments"`
			}
			r.json(h.t, &a)
			c.ids, c.units = append(c.ids, a.ID), append(c.units, a.Segments)
		case http.StatusTooManyRequests:
			if p := r.problem(h.t); p["type"] != httpapi.ProblemTypeBase+"budget-exhausted" || p["period"] != "daily" {
				c.bad = append(c.bad, string(r.body))
				return
			}
			if body != twoSegments {
				return
			}
		default:
			c.bad = append(c.bad, strconv.Itoa(r.status)+" "+string(r.body))
			return
		}
	}
}

// fill runs 8 clients at once over the replicas until the budget is spent;
// it returns every accepted id with its units.
func fill(t *testing.T, replicas []*harness) map[string]int {
	t.Helper()
	clients := make([]budgetClient, 8)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { clients[i].run(replicas[i%len(replicas)].with(t), i) })
	}
	wg.Wait()
	out := map[string]int{}
	for _, c := range clients {
		if len(c.bad) > 0 {
			t.Fatalf("a refusal that is not the daily budget: %v", c.bad)
		}
		for k, id := range c.ids {
			out[id] = c.units[k]
		}
	}
	return out
}

func sumUnits(m map[string]int) int {
	n := 0
	for _, u := range m {
		n += u
	}
	return n
}

// TestBudgetExactUnderConcurrency: 8 concurrent clients against a daily
// budget of 500 units, mixed one- and two-segment messages, accept
// exactly 500 units, through real HTTP on the embedded store and on two
// Redis replicas sharing one account; the refusal is 429 budget-exhausted
// with Retry-After to the next UTC midnight and the RateLimit headers.
// Then canceling 10 queued one-segment messages gives exactly 10 units
// back: 10 more are accepted, the 11th refused.
func TestBudgetExactUnderConcurrency(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, withBudget(budgetUnits))
			replicas := []*harness{h}
			if m == redisMode {
				replicas = append(replicas, startWith(t, h.cfg, h.sim))
			}
			// Nothing is sent: every accepted message stays queued, cancelable.
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
			accepted := fill(t, replicas)
			if got := sumUnits(accepted); got != budgetUnits {
				t.Fatalf("accepted %d units in %d messages; want exactly %d", got, len(accepted), budgetUnits)
			}
			twos := 0
			for _, u := range accepted {
				if u == 2 {
					twos++
				}
			}
			if twos == 0 || twos == len(accepted) {
				t.Fatalf("%d of %d messages had two segments; want a mix", twos, len(accepted))
			}
			t.Logf("%s: %d replicas, 8 clients: %d messages (%d of two segments) = %d units accepted",
				m, len(replicas), len(accepted), twos, sumUnits(accepted))

			// Every replica reports the shared count against the cap.
			for _, rep := range replicas {
				got := metricValues(rep.metrics(), "smsgw_producer_budget_used_units", "smsgw_producer_budget_limit_units")
				if got[`smsgw_producer_budget_used_units{period="daily",producer="notify"}`] != budgetUnits ||
					got[`smsgw_producer_budget_limit_units{period="daily",producer="notify"}`] != budgetUnits {
					t.Errorf("budget metrics %v; want %d used of %d", got, budgetUnits, budgetUnits)
				}
			}

			r := replicas[len(replicas)-1].post("/v1/messages", keyNotify, msg("transactional"))
			p := wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			toMidnight := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour))
			if err != nil || time.Duration(ra)*time.Second < toMidnight-time.Minute || time.Duration(ra)*time.Second > toMidnight+time.Minute {
				t.Errorf("Retry-After %q; want the %s to the next UTC midnight", r.header.Get("Retry-After"), toMidnight.Round(time.Second))
			}
			if r.header.Get("RateLimit-Limit") == "" || r.header.Get("RateLimit-Remaining") == "" {
				t.Errorf("no RateLimit headers: %v", r.header)
			}
			if p["budget_units"] != float64(budgetUnits) || p["used_units"] != float64(budgetUnits) ||
				!strings.Contains(p["detail"].(string), "producers[].budget.daily_units") {
				t.Errorf("problem %v", p)
			}

			// The paused send loop may hold a few messages it took before
			// the pause (sending: 409); the others are queued.
			canceled := 0
			for id, u := range accepted {
				if u != 1 || canceled == 10 {
					continue
				}
				r := replicas[canceled%len(replicas)].do(req{method: http.MethodDelete, path: "/v1/messages/" + id, key: keyNotify})
				if r.status == http.StatusConflict {
					continue
				}
				wantStatus(t, r, http.StatusOK)
				canceled++
			}
			if canceled != 10 {
				t.Fatalf("canceled %d queued one-unit messages; want 10", canceled)
			}
			more := 0
			for i := range 11 {
				r := replicas[i%len(replicas)].post("/v1/messages", keyNotify, msg("transactional"))
				if r.status == http.StatusAccepted {
					more++
					continue
				}
				wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			}
			if more != 10 {
				t.Fatalf("after canceling 10 one-unit messages, %d more were accepted; want exactly 10", more)
			}
		})
	}
}

// TestBudgetAdmission is the budget step of the admission order on both
// executors: a batch accepts the items that fit, in order, each other item
// refused with its own budget-exhausted problem; an OTP is charged at
// accept, gets its units back when the provider refuses it, and is
// refused over the budget with Retry-After to the reset of the budget's
// own time zone.
func TestBudgetAdmission(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) {
				withBudget(5)(c)
				for i := range c.Producers {
					if c.Producers[i].Name == "login" {
						c.Producers[i].Budget = config.BudgetConfig{MonthlyUnits: 1, Timezone: "Asia/Tokyo"}
					}
				}
			})
			two := msg("transactional", "body", twoSegments)
			one := msg("transactional")
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{two, two, two, one, one}})
			wantStatus(t, r, http.StatusOK) // some items accepted, some refused
			var b httpapi.BatchResponse
			r.json(t, &b)
			var got []int
			for _, it := range b.Results {
				got = append(got, it.Status)
			}
			want := []int{http.StatusAccepted, http.StatusAccepted, http.StatusTooManyRequests, http.StatusAccepted, http.StatusTooManyRequests}
			if !slices.Equal(got, want) {
				t.Fatalf("batch item statuses %v; want %v (2+2 units, the third 2 over, 1 fits, then none)", got, want)
			}
			if !strings.Contains(string(r.body), "urn:smsgw:problem:budget-exhausted") {
				t.Errorf("batch refusals are not budget-exhausted: %s", r.body)
			}

			// An OTP that is never sent (the operator's pause holds it
			// past its deadline: 503, nothing sent) gives its unit back;
			// the next is sent, then the month's budget is spent.
			otp := map[string]any{"to": "+819012345678", "body": "Your code is 123456"}
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
			r = h.post("/v1/otp", keyLogin, otp)
			if p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable", ""); !strings.Contains(p["detail"].(string), "paused") {
				t.Fatalf("paused OTP: %v", p)
			}
			wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
			var sent reply
			eventually(t, "the resume", func() bool { // each OTP still paused gives its unit back too
				sent = h.post("/v1/otp", keyLogin, otp)
				return sent.status != http.StatusServiceUnavailable
			})
			wantStatus(t, sent, http.StatusOK)
			r = h.post("/v1/otp", keyLogin, otp)
			p := wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			if p["period"] != "monthly" {
				t.Errorf("OTP refusal %v; want the monthly period", p)
			}
			tokyo, _ := time.LoadLocation("Asia/Tokyo")
			now := time.Now().In(tokyo)
			reset := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, tokyo)
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || (time.Until(reset)-time.Duration(ra)*time.Second).Abs() > time.Minute {
				t.Errorf("Retry-After %q; want the time to %s", r.header.Get("Retry-After"), reset)
			}
		})
	}
}
