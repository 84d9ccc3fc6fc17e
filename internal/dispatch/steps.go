package dispatch

// Where the OTP fast path's time goes: the request's steps, each timed on
// the monotonic clock. The API starts a Steps when a request arrives and
// marks its own steps; SendNow marks the limiter's and the provider's. The
// API turns them into a metric (smsgw_api_otp_step_seconds) and the
// answer's Server-Timing header, so a slow OTP says which step was slow.

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Step is one step of the OTP fast path, in the order a request meets them.
type Step uint8

// The steps. Each Mark adds the time since the previous Mark to its step.
const (
	StepDecode      Step = iota // the body read, decoded and validated
	StepIdempotency             // the Idempotency-Key's lock and unknown-outcome entry (0 without a key)
	StepProtect                 // protection: region, type, suppression list, OTPs per number
	StepIngress                 // the producer's ingress quota
	StepReserve                 // the limiter's reservation (with Redis: one script)
	StepWait                    // sleeping to the reserved slot
	StepProvider                // the breaker and the provider's HTTP call, to its answer
	NumSteps
)

var stepNames = [NumSteps]string{"decode", "idempotency", "protect", "ingress", "reserve", "wait", "provider"}

func (s Step) String() string {
	if s >= NumSteps {
		return "unknown"
	}
	return stepNames[s]
}

// Steps times one request's steps. Not safe for concurrent use: one
// request's steps run one after the other. A nil *Steps ignores Mark.
type Steps struct {
	start time.Time
	last  time.Duration
	d     [NumSteps]time.Duration
}

// NewSteps starts timing a request that arrived at start (time.Now(), so
// that the monotonic clock times it).
func NewSteps(start time.Time) *Steps { return &Steps{start: start} }

// Mark adds the time since the previous mark (or the start) to step.
func (s *Steps) Mark(step Step) {
	if s == nil || step >= NumSteps {
		return
	}
	now := time.Since(s.start)
	s.d[step] += now - s.last
	s.last = now
}

// Duration is the time marked for step.
func (s *Steps) Duration(step Step) time.Duration {
	if s == nil || step >= NumSteps {
		return 0
	}
	return s.d[step]
}

// ServerTiming is the steps as a Server-Timing header value, in
// milliseconds: "decode;dur=0.081, idempotency;dur=0, ...".
func (s *Steps) ServerTiming() string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	for i, d := range s.d {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(stepNames[i])
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64))
	}
	return b.String()
}

type stepsKey struct{}

// WithSteps returns ctx carrying s, which SendNow marks.
func WithSteps(ctx context.Context, s *Steps) context.Context {
	return context.WithValue(ctx, stepsKey{}, s)
}

// stepsFrom is the Steps ctx carries, or nil.
func stepsFrom(ctx context.Context) *Steps {
	s, _ := ctx.Value(stepsKey{}).(*Steps)
	return s
}
