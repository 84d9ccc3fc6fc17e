package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/nyaruka/phonenumbers"

	"smsgw/internal/config"
	"smsgw/internal/provider/sim"
)

// pumpingRequest is one request of TestPumpingRun.
type pumpingRequest struct {
	kind, to string // kind: real, premium, foreign, hammered, campaign
}

// TestPumpingRun is an SMS pumping attack mixed with real traffic, over
// real HTTP against the simulator: OTPs to premium-rate numbers, to
// foreign and satellite numbers, and to one number over and over, among
// real OTPs and a marketing campaign. The provider receives exactly the
// real traffic and the hammered number's allowance; the stats count every
// refusal by reason.
func TestPumpingRun(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Protection.Countries = []string{"JP", "GB"}
	cfg.Protection.OTPPerNumber = config.OTPPerNumberConfig{Limit: 3, Window: 3600e9}
	cfg.Producers[1].Rate, cfg.Producers[1].Burst = 1000, 1000
	h := startWith(t, cfg, s)

	rng := rand.New(rand.NewPCG(1, 2))
	premium := phonenumbers.Format(phonenumbers.GetExampleNumberForType("GB", phonenumbers.PREMIUM_RATE), phonenumbers.E164)
	var reqs []pumpingRequest
	for i := range 60 {
		reqs = append(reqs, pumpingRequest{"real", fmt.Sprintf("+81901%07d", i*7919%10_000_000)})
	}
	for i := range 30 {
		reqs = append(reqs, pumpingRequest{"premium", fmt.Sprintf("%s%d", premium[:len(premium)-1], i%10)})
		foreign := fmt.Sprintf("+88216%06d", rng.IntN(1_000_000)) // Thuraya satellite
		if i%2 == 1 {
			foreign = fmt.Sprintf("+3712%07d", rng.IntN(10_000_000)) // Latvian mobiles
		}
		reqs = append(reqs, pumpingRequest{"foreign", foreign})
	}
	const hammered = "+819055512345"
	for range 20 {
		reqs = append(reqs, pumpingRequest{"hammered", hammered})
	}
	for i := range 40 {
		reqs = append(reqs, pumpingRequest{"campaign", fmt.Sprintf("+44791%07d", i*104729%10_000_000)})
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })

	statuses := runPumping(t, h, reqs)
	allowed := map[string]int{}
	for _, r := range reqs {
		if r.kind == "real" || r.kind == "campaign" {
			allowed[r.to]++
		}
	}
	allowed[hammered] = 3
	eventually(t, "the allowed messages at the provider", func() bool { return len(s.Accepted()) == 60+40+3 })
	got := map[string]int{}
	for _, a := range s.Accepted() {
		got[a.To]++
		if got[a.To] > allowed[a.To] {
			t.Errorf("the provider received a message to %s, which was not allowed that many times", a.To)
		}
	}
	st := h.stats().Protection.Refused
	t.Logf("requests %d: answers %v; provider received %d (60 real OTPs, 40 campaign, 3 of 20 to the hammered number); refused %v",
		len(reqs), statuses, len(s.Accepted()), st)
	if st["number_type"] != 30 || st["country"] != 30 || st["otp_per_number"] != 17 {
		t.Errorf("refusals %v, want 30 number_type, 30 country, 17 otp_per_number", st)
	}
}

// runPumping sends reqs with 8 concurrent clients and counts the answers.
func runPumping(t *testing.T, h *harness, reqs []pumpingRequest) map[int]int {
	statuses := map[int]int{}
	var mu sync.Mutex
	work := make(chan pumpingRequest)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for r := range work {
				var res reply
				if r.kind == "campaign" {
					res = h.with(t).post("/v1/messages", keyNotify, msg("marketing", "to", r.to))
				} else {
					res = h.with(t).post("/v1/otp", keyLogin, otpBody("to", r.to, "deadline_ms", 5000))
				}
				mu.Lock()
				statuses[res.status]++
				mu.Unlock()
			}
		})
	}
	for _, r := range reqs {
		work <- r
	}
	close(work)
	wg.Wait()
	if statuses[http.StatusInternalServerError] > 0 || statuses[http.StatusServiceUnavailable] > 0 {
		t.Errorf("answers %v: an error or an unavailable", statuses)
	}
	return statuses
}
