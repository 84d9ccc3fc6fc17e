package smstest

import (
	"testing"
	"time"

	"smsgw/internal/sms"
)

func TestMessagesAreValidAndDistinct(t *testing.T) {
	t.Parallel()
	ids, bodies := map[string]bool{}, map[string]bool{}
	for i := range 1000 {
		m := Message("p", sms.Classes[i%len(sms.Classes)])
		if !sms.ValidID(m.ID) || m.Producer != "p" || !m.Class.Valid() || m.Segments != 1 || m.Reference == "" {
			t.Fatalf("message %+v", m)
		}
		if _, err := sms.ParseE164(m.To); err != nil {
			t.Fatalf("to %q: %v", m.To, err)
		}
		if ids[m.ID] || bodies[m.Body] {
			t.Fatalf("message %d repeats an id or a body: %+v", i, m)
		}
		ids[m.ID], bodies[m.Body] = true, true
	}
}

func TestMessageAtKeepsTheGivenTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 9, 0, 0, 123_456_789, time.FixedZone("JST", 9*3600))
	m := MessageAt("p", sms.ClassOTP, at)
	if want := at.UTC().Truncate(time.Millisecond); !m.CreatedAt.Equal(want) || m.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt %v, want %v in UTC", m.CreatedAt, want)
	}
}
