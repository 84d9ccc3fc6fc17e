package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"smsgw/internal/httpapi"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
)

// panickyProvider panics on every message whose body contains "boom" and
// sends the others.
type panickyProvider struct{ panics atomic.Int64 }

func (p *panickyProvider) Name() string { return "panicky" }

func (p *panickyProvider) Send(_ context.Context, req *provider.Request) (provider.Result, error) {
	if strings.Contains(req.Body, "boom") {
		p.panics.Add(1)
		panic("adapter bug")
	}
	return provider.Result{ProviderID: "p-" + req.ID}, nil
}

// TestSenderPanicPoison: a panic in a sender does not
// kill the process; the crash is counted on the message, which goes back
// to the queue and, after dispatch.poison_after crashes, becomes a dead
// letter marked poison. Other messages keep flowing.
func TestSenderPanicPoison(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		prov := &panickyProvider{}
		cfg := testConfig(t, m, newSim(t, sim.Config{}).URL())
		cfg.Dispatch.PoisonAfter = 3
		cfg.Dispatch.BackoffBase = 1e6 // 1 ms
		h := startOpts(t, cfg, nil, Options{Provider: prov})
		bad := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "body", "boom")))
		good := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional")))
		var v httpapi.MessageView
		eventually(t, "the poison message to be a dead letter", func() bool {
			h.get("/v1/messages/"+bad.ID, keyNotify).json(t, &v)
			return v.Status == "failed"
		})
		if n := prov.panics.Load(); n != 3 {
			t.Errorf("the provider panicked %d times, want poison_after 3", n)
		}
		if !strings.Contains(v.LastError, "poison") {
			t.Errorf("last_error %q does not say poison", v.LastError)
		}
		dead := h.get("/v1/admin/dead-letters", keyAdmin)
		if !strings.Contains(string(dead.body), bad.ID) {
			t.Errorf("not among the dead letters: %s", dead.body)
		}
		eventually(t, "the good message to be sent", func() bool {
			h.get("/v1/messages/"+good.ID, keyNotify).json(t, &v)
			return v.Status == "sent"
		})
		mv := metricValues(h.metrics(), "smsgw_dispatch_sender_panics_total", "smsgw_dispatch_poison_total")
		if mv["smsgw_dispatch_sender_panics_total"] != 3 || mv["smsgw_dispatch_poison_total"] != 1 {
			t.Errorf("metrics %v", mv)
		}
		wantStatus(t, h.get("/healthz", ""), http.StatusOK)
	})
}
