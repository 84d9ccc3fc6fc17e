package queue

import (
	"strings"
	"testing"
	"time"

	"smsgw/internal/sms"
)

func TestFinalRecordRoundTrip(t *testing.T) {
	created := time.Date(2026, 11, 30, 9, 0, 0, 123_000_000, time.UTC)
	m := &sms.Message{
		ID: sms.NewID(created), Producer: "shop\x1fbackend", Class: sms.ClassMarketing, To: "+819012345678",
		From: "ACME", Body: "日本語", Reference: "order|1\x1f", Segments: 2, IdempotencyKey: "k",
		RequestHash: strings.Repeat("ab", 32), CreatedAt: created.Add(-1500 * time.Microsecond),
		SendAt: created.Add(time.Hour), ExpiresAt: created.Add(25 * time.Hour), Status: sms.StatusSent,
		Attempts: 40, LastError: "503", ProviderID: "SM0123", UpdatedAt: created.Add(time.Hour + time.Second),
		Callbacks: true, CallbackURL: "https://hooks.example/cb?x=1\x1f",
	}
	m.SentAt = m.UpdatedAt
	for _, st := range []sms.Status{sms.StatusSent, sms.StatusExpired, sms.StatusFailed} {
		m.Status = st
		s, err := EncodeFinal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !IsFinal(s) || strings.Contains(s, "日本語") || strings.Contains(s, "9012345678") {
			t.Fatalf("final record %q", s)
		}
		got, err := DecodeFinal(m.ID, s)
		if err != nil {
			t.Fatal(err)
		}
		want := *m
		want.Producer, want.Reference, want.To, want.Body, want.IdempotencyKey = "shopbackend", "order|1", "+8190****5678", "", ""
		want.RequestHash, want.Encoding = m.RequestHash[:FinalHashLen], sms.UCS2
		want.CreatedAt = m.CreatedAt.Truncate(time.Millisecond) // to the ms, floor
		want.ExpiresAt = got.CreatedAt.Add(m.ExpiresAt.Sub(m.CreatedAt).Truncate(time.Millisecond))
		if got.CreatedAt != want.CreatedAt || got.SendAt != want.SendAt || got.UpdatedAt != want.UpdatedAt ||
			got.SentAt != want.SentAt || got.Status != st || got.Producer != want.Producer || got.Reference != want.Reference ||
			got.To != want.To || got.RequestHash != want.RequestHash || got.Encoding != sms.UCS2 || got.Segments != 2 ||
			got.Attempts != 40 || got.From != "ACME" || got.LastError != "503" || got.ProviderID != "SM0123" || got.Class != sms.ClassMarketing ||
			!got.Callbacks || got.CallbackURL != "https://hooks.example/cb?x=1" {
			t.Fatalf("round trip of %q\n got %+v\nwant %+v", s, got, want)
		}
	}
	// A version 1 record (no callback fields) written before them still
	// reads, without callbacks.
	m.Status = sms.StatusSent
	v2, err := EncodeFinal(m)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(v2, finalSep)
	v1 := strings.Join(append(append([]string{"1"}, f[1:16]...), f[18:]...), finalSep)
	old, err := DecodeFinal(m.ID, v1)
	if err != nil || !IsFinal(v1) {
		t.Fatalf("version 1 record %q: %v", v1, err)
	}
	if old.Callbacks || old.CallbackURL != "" || old.UpdatedAt != m.UpdatedAt || old.SentAt != m.SentAt || old.From != "ACME" ||
		old.ProviderID != "SM0123" {
		t.Fatalf("version 1 record read as %+v", old)
	}
	if _, err := DecodeFinal(m.ID, "1\x1fs"); err == nil {
		t.Fatal("a truncated record decoded")
	}
	if !SameRequest(m.RequestHash[:FinalHashLen], m.RequestHash) || SameRequest(m.RequestHash[:FinalHashLen], "ff"+m.RequestHash[2:]) {
		t.Fatal("SameRequest")
	}
}
