package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi/auththrottle"
	"smsgw/internal/opsview"
	"smsgw/internal/sms"
)

// fakeAdmission answers AdmitOne with decide; any other method of
// Admission panics (the embedded interface is nil): the handler under test
// calls no more than it should.
type fakeAdmission struct {
	Admission
	decide func(one admission.One, now time.Time) (admission.Decision, error)
	calls  int
}

func (f *fakeAdmission) Scripted() bool { return false }

func (f *fakeAdmission) AdmitOne(_ context.Context, one admission.One, now time.Time) (admission.Decision, error) {
	f.calls++
	return f.decide(one, now)
}

// fakeDispatcher records the wake-ups; SendNow is not expected.
type fakeDispatcher struct {
	Dispatcher
	woken []sms.Class
}

func (f *fakeDispatcher) Notify(c sms.Class) { f.woken = append(f.woken, c) }

// TestServerAloneAcceptsThroughAdmission: the HTTP layer with fakes for
// its collaborators, no store and no send loop. POST /v1/messages answers
// 202 with the message Admission stored and wakes the send loop for its
// class; a rejection Admission answers is the HTTP answer it maps to (429
// with Retry-After), and nothing is woken.
func TestServerAloneAcceptsThroughAdmission(t *testing.T) {
	const key = "alone-notify-key-0123456789"
	cfg := config.Default()
	cfg.Producers = []config.Producer{{Name: "notify", Key: key, Classes: []string{"marketing"}, Rate: 10, Burst: 10}}
	m, err := opsview.NewAPIMetrics(prometheus.NewRegistry(), KindLabels())
	if err != nil {
		t.Fatal(err)
	}
	admit := &fakeAdmission{}
	disp := &fakeDispatcher{}
	s := &Server{Cfg: cfg, Log: slog.New(slog.DiscardHandler), Now: time.Now, Metrics: m, Admit: admit, Dispatch: disp,
		Edge: Edge{Auth: NewAuthenticator(cfg, m.PreviousKeys), AuthThrottle: auththrottle.New(time.Now),
			BodyGate: NewBodyGate(cfg.HTTP.BodyBytesInFlight, cfg.HTTP.BodyBytesInFlightPerProducer, cfg.HTTP.MaxBodyBytes)}}
	h := s.Routes()
	post := func() *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/messages",
			strings.NewReader(`{"to":"+819012345678","body":"hello","class":"marketing"}`))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	admit.decide = func(one admission.One, now time.Time) (admission.Decision, error) {
		if one.Sender.Name != "notify" || one.Msg.To != "+819012345678" || one.Msg.Class != sms.ClassMarketing {
			t.Errorf("admitted %+v from %q", one.Msg, one.Sender.Name)
		}
		msg := *one.Msg
		msg.ID, msg.Producer, msg.CreatedAt = sms.NewID(now), one.Sender.Name, now
		return admission.Decision{Msg: &msg, ETA: now}, nil
	}
	w := post()
	body, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusAccepted || !strings.HasPrefix(w.Header().Get("Location"), "/v1/messages/") {
		t.Fatalf("accepted: %d %s, Location %q", w.Code, body, w.Header().Get("Location"))
	}
	if len(disp.woken) != 1 || disp.woken[0] != sms.ClassMarketing {
		t.Errorf("woken %v, want [marketing]", disp.woken)
	}

	admit.decide = func(one admission.One, now time.Time) (admission.Decision, error) {
		return admission.Decision{}, admission.RateLimited(one.Sender, 2*time.Second)
	}
	w = post()
	body, _ = io.ReadAll(w.Body)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("refused: %d %s, Retry-After %q", w.Code, body, w.Header().Get("Retry-After"))
	}
	if admit.calls != 2 || len(disp.woken) != 1 {
		t.Errorf("admission called %d times, woken %v", admit.calls, disp.woken)
	}
}
