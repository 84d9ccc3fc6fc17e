package sms

import (
	"testing"
	"time"
)

// Warm leaves the lazy indexes built and validation working. Run alone
// (-run TestWarm) it logs what the first validation of a process costs.
func TestWarm(t *testing.T) {
	start := time.Now()
	Warm()
	t.Logf("Warm took %s (the cost the first request paid before, when this test runs alone)", time.Since(start))
	if got, err := ParseE164("+14155550123"); err != nil || got != "+14155550123" {
		t.Fatalf("after Warm: %q, %v", got, err)
	}
	if len(TimeZones("+819012345678")) == 0 {
		t.Fatal("after Warm: no time zone for a Japanese number")
	}
}
