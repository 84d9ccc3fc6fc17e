package opsview

// The stats answer (GET /v1/admin/stats) as operators read it.

import (
	"time"

	"smsgw/internal/admission"
)

// ClassStats is one class in the stats answer.
type ClassStats struct {
	Ready            int64   `json:"ready"`
	Scheduled        int64   `json:"scheduled"`
	Leased           int64   `json:"leased"`
	Dead             int64   `json:"dead"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// Cumulative outcomes; their scope is statsResponse.Counters.
	SentTotal    int64 `json:"sent_total"`
	FailedTotal  int64 `json:"failed_total"`
	ExpiredTotal int64 `json:"expired_total"`
	DeadTotal    int64 `json:"dead_total"`
	// DeliveryRatio is delivered over every final receipt of the class
	// this replica took in the last 15 minutes; absent without receipts.
	DeliveryRatio *float64 `json:"delivery_ratio,omitempty"`
}

// CountersInfo says whose counters the totals are and since when.
type CountersInfo struct {
	Scope string    `json:"scope"` // shared | process
	Since time.Time `json:"since"`
}

// ProviderStats is the provider part of the stats answer.
type ProviderStats struct {
	Name string `json:"name"`
	// SentPerSecond and ThrottledTotal come from the counters: nil (absent)
	// when they could not be read. The rest is this replica's own.
	SentPerSecond     *float64 `json:"sent_per_second,omitempty"`
	RateScope         string   `json:"rate_scope"` // shared | process
	TargetRPS         float64  `json:"target_rps"`
	ContractRPS       float64  `json:"contract_rps"`
	ThrottledTotal    *int64   `json:"throttled_total,omitempty"`
	ThrottledInWindow int64    `json:"throttled_in_window"`
	GuardActivateAt   int64    `json:"guard_activate_at"`
	SuspendAfter      int      `json:"suspend_after"`
	WindowSeconds     float64  `json:"window_seconds"`
	GuardActive       bool     `json:"guard_active"`
}

// OTPStats is the OTP part of the stats answer.
type OTPStats struct {
	LatencyP50MS   *float64 `json:"latency_p50_ms,omitempty"`
	LatencyP99MS   *float64 `json:"latency_p99_ms,omitempty"`
	LatencySamples int      `json:"latency_samples"`
	// UnavailableTotal is the counters' (scope as counters): nil (absent)
	// when they could not be read.
	UnavailableTotal *int64 `json:"unavailable_total,omitempty"`
	// ReplicaUnavailableTotal is this process's own count since it
	// started, known without the shared store.
	ReplicaUnavailableTotal int64 `json:"replica_unavailable_total"`
}

// ReplicaStats describes the answering replica.
type ReplicaStats struct {
	Owner         string    `json:"owner"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Mode          string    `json:"mode"`
	LimiterMode   string    `json:"limiter_mode"`
}

// LimiterKey is one limiter key and how far ahead it is.
type LimiterKey struct {
	Name          string  `json:"name"`
	AheadMS       int64   `json:"ahead_ms"`
	RatePerSecond float64 `json:"rate_per_second"`
	Burst         int     `json:"burst"`
}

// LimiterStats is the limiter part of the stats answer.
type LimiterStats struct {
	Mode             string       `json:"mode"`
	PauseRemainingMS int64        `json:"pause_remaining_ms"`
	Keys             []LimiterKey `json:"keys"`
}

// StatsResponse is the answer of GET /v1/admin/stats. The sections read
// from the store (see the section names below) are nil, and absent, when
// the store could not answer; Unavailable names them. Everything else is
// this replica's own view and always present.
type StatsResponse struct {
	// Unavailable names the sections left out (never null; empty when the
	// answer is whole).
	Unavailable []string              `json:"unavailable"`
	Classes     map[string]ClassStats `json:"classes,omitempty"`
	Limiter     LimiterStats          `json:"limiter"`
	Pause       admission.PauseState  `json:"pause"`
	Counters    *CountersInfo         `json:"counters,omitempty"`
	Provider    ProviderStats         `json:"provider"`
	OTP         OTPStats              `json:"otp"`
	Replica     ReplicaStats          `json:"replica"`
	// Callbacks is the outbox of status callbacks (shared with Redis).
	Callbacks *CallbackStats `json:"callbacks,omitempty"`
	// Protection's refusals (scope: Counters) and the suppression list.
	Protection *ProtectionStats `json:"protection,omitempty"`
	// SenderLanes are the sender lanes (senderlanes.go): the configured
	// senders and "other".
	SenderLanes []SenderLane `json:"sender_lanes"`
}

// ProtectionStats is the protection part of the stats answer.
type ProtectionStats struct {
	Refused      map[string]int64 `json:"refused"` // by reason, every reason present
	Suppressions int              `json:"suppressions"`
}

// CallbackStats is the status-callback outbox in the stats answer.
type CallbackStats struct {
	Backlog          int64   `json:"backlog"`
	Dead             int64   `json:"dead"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// HistoryLimits are the rates the history is drawn against.
type HistoryLimits struct {
	ContractRPS float64            `json:"contract_rps"`
	TargetRPS   float64            `json:"target_rps"`
	ClassMaxRPS map[string]float64 `json:"class_max_rps"`
}

// PaceStats is the backlog, its send and arrival rates and how long it
// takes to drain.
type PaceStats struct {
	Backlog      int64    `json:"backlog"`
	SendRate     float64  `json:"send_rate"`
	ArrivalRate  float64  `json:"arrival_rate"`
	DrainSeconds *float64 `json:"drain_seconds"` // null: the backlog does not shrink
}

// DrainStats is the pace over the last OverSeconds, in total and by class.
type DrainStats struct {
	OverSeconds float64              `json:"over_seconds"`
	Total       PaceStats            `json:"total"`
	ByClass     map[string]PaceStats `json:"by_class"`
}

// HistoryResponse is the answer of GET /v1/admin/history.
type HistoryResponse struct {
	Scope       string              `json:"scope"`
	StepSeconds float64             `json:"step_seconds"`
	Start       time.Time           `json:"start"`
	End         time.Time           `json:"end"`
	Sent        map[string][]int64  `json:"sent"`
	Accepted    map[string][]int64  `json:"accepted"`
	Queued      map[string][]*int64 `json:"queued"`
	Throttled   []int64             `json:"throttled"`
	Limits      HistoryLimits       `json:"limits"`
	Drain       *DrainStats         `json:"drain"` // null: no queue depth recorded lately
}
