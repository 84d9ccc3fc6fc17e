package sms

import "testing"

// Warm leaves the lazy indexes built and validation working.
func TestWarm(t *testing.T) {
	Warm()
	if got, err := ParseE164("+14155550123"); err != nil || got != "+14155550123" {
		t.Fatalf("after Warm: %q, %v", got, err)
	}
	if len(TimeZones("+819012345678")) == 0 {
		t.Fatal("after Warm: no time zone for a Japanese number")
	}
}
