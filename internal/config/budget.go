package config

import "time"

// BudgetConfig is one producer's spending cap (producers[].budget), in
// units: what the provider charges, a message's segments with
// provider.count_segments, else one a message. Days and months are those
// of Timezone.
type BudgetConfig struct {
	DailyUnits   int64  `yaml:"daily_units"`   // 0: no daily cap
	MonthlyUnits int64  `yaml:"monthly_units"` // 0: no monthly cap
	Timezone     string `yaml:"timezone"`      // IANA name; empty: UTC
}

// MaxBudgetUnits is the largest daily_units or monthly_units: far over any
// account's spend, and exact in the float64 of Redis's Lua.
const MaxBudgetUnits = 1_000_000_000_000

// Set reports whether the producer has a cap.
func (b BudgetConfig) Set() bool { return b.DailyUnits > 0 || b.MonthlyUnits > 0 }

// Location is the budget's time zone (UTC when unset or unknown; Validate
// refuses an unknown one).
func (b BudgetConfig) Location() *time.Location {
	if b.Timezone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(b.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// validateBudget checks producers[i].budget (key).
func validateBudget(p *problems, key string, b BudgetConfig) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"daily_units", b.DailyUnits}, {"monthly_units", b.MonthlyUnits}} {
		if f.v < 0 || f.v > MaxBudgetUnits {
			p.add(key+"."+f.name, "must be 0 (no cap) to %d units", int64(MaxBudgetUnits))
		}
	}
	if b.Timezone != "" {
		if _, err := time.LoadLocation(b.Timezone); err != nil {
			p.add(key+".timezone", "unknown time zone %q (an IANA name such as Asia/Tokyo)", b.Timezone)
		}
	}
}
