package sms

import (
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_700_000_000_000)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := NewID(t0.Add(time.Duration(i) * time.Millisecond))
		if !ValidID(id) {
			t.Fatalf("NewID gave %q, which ValidID refuses", id)
		}
		if seen[id] {
			t.Fatalf("NewID repeated %q", id)
		}
		if id <= prev {
			t.Fatalf("ids not ordered by time: %q after %q", id, prev)
		}
		seen[id], prev = true, id
	}
	for _, bad := range []string{"", "msg_", "msg_0000000000000000000000000", "MSG_00000000000000000000000000",
		"msg_0000000000000000000000000I", "msg_0000000000000000000000000u", "msg_00000000000000000000000000x",
		"msg_80000000000000000000000000", "msg_Z0000000000000000000000000", "msg_ZZZZZZZZZZZZZZZZZZZZZZZZZZ"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestIDTime(t *testing.T) {
	for _, at := range []time.Time{time.UnixMilli(0), time.UnixMilli(1_700_000_000_123), time.UnixMilli(1<<48 - 1)} {
		id := NewID(at)
		got, ok := IDTime(id)
		if !ok || !got.Equal(at) {
			t.Errorf("IDTime(%s) = %v, %v; want %v", id, got, ok, at)
		}
	}
	// The largest time NewID can write is the largest IDTime answers.
	if got, ok := IDTime("msg_7ZZZZZZZZZZZZZZZZZZZZZZZZZ"); !ok || !got.Equal(time.UnixMilli(1<<48-1)) {
		t.Errorf("IDTime of the last id = %v, %v; want %v", got, ok, time.UnixMilli(1<<48-1).UTC())
	}
	if got, ok := IDTime("msg_ZZZZZZZZZZZZZZZZZZZZZZZZZZ"); ok {
		t.Errorf("IDTime of an id NewID cannot make = %v", got)
	}
	if _, ok := IDTime("msg_x"); ok {
		t.Error("IDTime accepted a malformed id")
	}
}
