package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Window is how the simulator measures "a second".
type Window string

const (
	// WindowSliding rejects a send that would make more than Limit units in
	// any trailing interval (t-1s, t].
	WindowSliding Window = "sliding"
	// WindowFixed counts per wall-clock window [k+offset, k+1+offset) and
	// resets at each boundary, so up to 2×Limit can pass in one second that
	// straddles a boundary — the shape a gateway must survive without
	// knowing the offset.
	WindowFixed Window = "fixed"
)

// Defaults of the contract in docs/design.md section 1.
const (
	DefaultRetryAfter    = time.Second
	DefaultSuspendAfter  = 300
	DefaultSuspendWindow = 10 * time.Minute
	DefaultSuspendFor    = 60 * time.Minute
	DefaultFailStatus    = 503
)

// Config is the simulated provider contract and its initial faults.
type Config struct {
	// Limit is units per second; 0 (or less) means unlimited. A unit is one
	// message, or its "segments" when the request gives them (see
	// IgnoreSegments).
	Limit  int
	Window Window        // default WindowSliding
	Offset time.Duration // WindowFixed: where windows start past each second, in [0, 1s)

	// Senders limits each sender (a send's "from") to so many units per
	// second, in a sliding window, as real providers limit a long code,
	// a toll-free number or a short code. A send over its sender's limit
	// is answered 429 with Retry-After and {"scope": "sender"}; a send must
	// fit both its sender's limit and the account's. 0: no sender limit.
	Senders map[string]int

	// RetryAfter is sent with a rate-limit 429 (rounded up to whole
	// seconds); default 1 s.
	RetryAfter time.Duration

	// More than SuspendAfter 429s within a rolling SuspendWindow suspend the
	// account for SuspendFor: every send answers 403. 0 means the default
	// (300 / 10 min / 60 min); SuspendAfter < 0 never suspends.
	SuspendAfter  int
	SuspendWindow time.Duration
	SuspendFor    time.Duration

	// NoIdempotency makes the simulator ignore the Idempotency-Key header:
	// a retry of a send it already accepted is accepted (and delivered)
	// again, as by a provider without idempotency (Twilio, Vonage). By
	// default a repeated key is answered with the first id and not sent
	// again, as the generic protocol (docs/design.md section 7.2) specifies.
	NoIdempotency bool

	// IgnoreSegments counts every message as one unit even when the request
	// says it has several segments (a provider that bills per message).
	IgnoreSegments bool

	Faults Faults // faults active from the start; /reset returns to these

	// Receipts, when it names URLs, posts a delivery receipt for every
	// accepted message back to the gateway.
	Receipts Receipts

	Logger *slog.Logger     // default: discard
	Now    func() time.Time // default time.Now; tests pass a fake clock
}

// Faults are the injected misbehaviours. Rates are probabilities in [0, 1]
// applied to each send independently, after Latency.
type Faults struct {
	Latency       Duration `json:"latency"`         // added before answering every send
	LatencyJitter Duration `json:"latency_jitter"`  // uniformly random extra in [0, jitter)
	FailRate      float64  `json:"fail_rate"`       // answer FailStatus without accepting
	FailStatus    int      `json:"status"`          // default 503
	TimeoutRate   float64  `json:"timeout_rate"`    // never answer (until the client gives up) and do not accept
	LostReplyRate float64  `json:"lost_reply_rate"` // accept and record, then never answer: an unknown outcome
}

func (f Faults) validate() error {
	for name, r := range map[string]float64{"fail_rate": f.FailRate, "timeout_rate": f.TimeoutRate, "lost_reply_rate": f.LostReplyRate} {
		if r < 0 || r > 1 || r != r {
			return fmt.Errorf("%s %v: want a probability in [0, 1]", name, r)
		}
	}
	if f.Latency < 0 || f.LatencyJitter < 0 {
		return fmt.Errorf("latency and latency_jitter must not be negative")
	}
	if f.FailStatus != 0 && (f.FailStatus < 500 || f.FailStatus > 599) {
		return fmt.Errorf("status %d: want a 5xx", f.FailStatus)
	}
	return nil
}

func (c *Config) setDefaults() error {
	c.Window = cmp.Or(c.Window, WindowSliding)
	if c.Window != WindowSliding && c.Window != WindowFixed {
		return fmt.Errorf("sim: window %q: want sliding or fixed", c.Window)
	}
	if c.Offset < 0 || c.Offset >= time.Second {
		return fmt.Errorf("sim: offset %v: want [0, 1s)", c.Offset)
	}
	if c.RetryAfter < 0 || c.SuspendWindow < 0 || c.SuspendFor < 0 {
		return fmt.Errorf("sim: retry_after, suspend_window and suspend_for must not be negative")
	}
	c.RetryAfter = cmp.Or(c.RetryAfter, DefaultRetryAfter)
	c.SuspendAfter = cmp.Or(c.SuspendAfter, DefaultSuspendAfter)
	c.SuspendWindow = cmp.Or(c.SuspendWindow, DefaultSuspendWindow)
	c.SuspendFor = cmp.Or(c.SuspendFor, DefaultSuspendFor)
	if err := validateSenders(c.Senders); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := c.Faults.validate(); err != nil {
		return fmt.Errorf("sim: faults: %w", err)
	}
	if err := c.Receipts.validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Duration is a time.Duration that reads and writes JSON as "50ms"; a bare
// number is taken as seconds.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string ("50ms").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string, or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err := json.Unmarshal(b, &secs); err != nil {
			return fmt.Errorf("duration %s: want \"50ms\" or seconds", b)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if secs, err2 := strconv.ParseFloat(s, 64); err2 == nil {
			*d = Duration(secs * float64(time.Second))
			return nil
		}
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
