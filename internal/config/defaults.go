package config

import "time"

// Default returns the configuration every file starts from: the one source
// of the product's defaults (docs/configuration.md lists them).
// The gateway hands these values to every component it builds.
func Default() Config {
	return Config{
		Listen:  ":8080",
		Redis:   RedisConfig{Timeout: 500 * time.Millisecond, WaitTimeout: 100 * time.Millisecond},
		Store:   StoreConfig{Path: "./smsgw-data"},
		Account: "main",
		Provider: ProviderConfig{
			Kind: "http",
			// Timeout 0: each adapter's own default, chosen from its
			// vendor's behaviour (httpprov, twilio, vonage DefaultTimeout).
			ContractRPS:   100,
			CountSegments: true,
		},
		Limits: LimitsConfig{
			TargetRPS:  90,
			Burst:      5,
			MaxSenders: 23,
			Classes:    map[string]ClassLimits{"marketing": {MaxRPS: 70}},
		},
		Dispatch: DispatchConfig{
			Workers:         16,
			OTPWorkers:      4,
			Lease:           30 * time.Second,
			MaxAttempts:     8,
			PoisonAfter:     3,
			BackoffBase:     time.Second,
			BackoffMax:      5 * time.Minute,
			ShutdownTimeout: 20 * time.Second,
			SuspensionGuard: SuspensionGuardConfig{Threshold: 300, Window: 10 * time.Minute, Share: 0.5},
		},
		Messages: MessagesConfig{
			MaxSegments: 10,
			DefaultTTL:  24 * time.Hour,
			MaxTTL:      72 * time.Hour,
			Retention:   7 * 24 * time.Hour,
			OTPDeadline: time.Second,
		},
		Log: LogConfig{Level: "info", Format: "json"},
		HTTP: HTTPConfig{
			MaxBodyBytes:                 1 << 20,
			ReadTimeout:                  10 * time.Second,
			WriteTimeout:                 30 * time.Second,
			IdleTimeout:                  30 * time.Second,
			MaxConnections:               1024,
			BodyBytesInFlight:            64 << 20,
			BodyBytesInFlightPerProducer: 16 << 20,
		},
		Webhooks: WebhooksConfig{
			Timeout:         5 * time.Second,
			MaxAge:          24 * time.Hour,
			Concurrency:     4,
			Workers:         32,
			BackoffBase:     5 * time.Second,
			BackoffMax:      time.Hour,
			BreakerFailures: 5,
			BreakerOpen:     30 * time.Second,
		},
		Protection: defaultProtection(),
	}
}

// MaxWaitReplicas bounds redis.wait_replicas.
const MaxWaitReplicas = 5
