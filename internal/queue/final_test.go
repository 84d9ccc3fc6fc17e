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
		NumberID: "0123456789abcdef0123456789abcdef", From: "ACME", Body: "日本語", Reference: "order|1\x1f", Segments: 2, IdempotencyKey: "k",
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
		if !IsFinal(s) || strings.Contains(s, "日本語") || strings.Contains(s, "9012345678") || strings.Contains(s, m.NumberID) {
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
			got.Attempts != 40 || got.From != "ACME" || got.NumberID != "" || got.LastError != "503" || got.ProviderID != "SM0123" || got.Class != sms.ClassMarketing ||
			!got.Callbacks || got.CallbackURL != "https://hooks.example/cb?x=1" {
			t.Fatalf("round trip of %q\n got %+v\nwant %+v", s, got, want)
		}
	}
	// Version 3 packs the masked number: no "****" in the record.
	if s, _ := EncodeFinal(m); strings.Contains(s, "****") || !strings.HasPrefix(s, "3") {
		t.Fatalf("version 3 record %q", s)
	}
	if _, err := DecodeFinal(m.ID, "1\x1fs"); err == nil {
		t.Fatal("a truncated record decoded")
	}
	if !SameRequest(m.RequestHash[:FinalHashLen], m.RequestHash) || SameRequest(m.RequestHash[:FinalHashLen], "ff"+m.RequestHash[2:]) {
		t.Fatal("SameRequest")
	}
}

// TestFinalRecordFrozenVersions: records written by earlier releases (frozen
// here as they were written: version 2 by commit 2200f5b, version 1 the
// same without its callback fields) still read, field by field.
func TestFinalRecordFrozenVersions(t *testing.T) {
	const id = "msg_01M8NTXDQV7ZK3QW2J9XT4M8RP" // created 2026-11-30T09:00:00.123Z
	created := time.Date(2026, 11, 30, 9, 0, 0, 123_000_000, time.UTC)
	v2 := "2\x1fs\x1f2\x1f3\x1f2\x1fu\x1fshop-backend\x1forder-1\x1fSM0123\x1f+8190****5678\x1f503\x1fabababababababab\x1f\x1f\x1f1ffuo0\x1fACME\x1f1\x1fhttps://hooks.example/cb\x1f1jk\x1f="
	v1 := "1\x1fs\x1f2\x1f3\x1f2\x1fu\x1fshop-backend\x1forder-1\x1fSM0123\x1f+8190****5678\x1f503\x1fabababababababab\x1f\x1f\x1f1ffuo0\x1fACME\x1f1jk\x1f="
	delivered := strings.Replace(v2, "2\x1fs\x1f", "2\x1fdelivered\x1f", 1)
	for _, tc := range []struct {
		name, rec string
		status    sms.Status
		callbacks bool
	}{{"v2", v2, sms.StatusSent, true}, {"v1", v1, sms.StatusSent, false}, {"v2 delivered", delivered, sms.StatusDelivered, true}} {
		if !IsFinal(tc.rec) {
			t.Fatalf("%s: not a final record", tc.name)
		}
		m, err := DecodeFinal(id, tc.rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cb := ""
		if tc.callbacks {
			cb = "https://hooks.example/cb"
		}
		if m.Status != tc.status || m.Class != sms.ClassMarketing || m.Attempts != 3 || m.Segments != 2 || m.Encoding != sms.UCS2 ||
			m.Producer != "shop-backend" || m.Reference != "order-1" || m.ProviderID != "SM0123" || m.To != "+8190****5678" ||
			m.LastError != "503" || m.RequestHash != "abababababababab" || !m.CreatedAt.Equal(created) ||
			!m.ExpiresAt.Equal(created.Add(24*time.Hour)) || m.From != "ACME" || m.Callbacks != tc.callbacks || m.CallbackURL != cb ||
			!m.UpdatedAt.Equal(created.Add(2*time.Second)) || !m.SentAt.Equal(m.UpdatedAt) || !m.SendAt.IsZero() {
			t.Fatalf("%s read as %+v", tc.name, m)
		}
		// Written again, it is version 3 and reads the same.
		again, err := EncodeFinal(m)
		if err != nil {
			t.Fatal(err)
		}
		m3, err := DecodeFinal(id, again)
		if err != nil || !strings.HasPrefix(again, "3") || len(again) >= len(tc.rec) {
			t.Fatalf("%s rewritten as %q: %v", tc.name, again, err)
		}
		if m3.Status != m.Status || m3.To != m.To || m3.Segments != m.Segments || m3.Callbacks != m.Callbacks ||
			!m3.UpdatedAt.Equal(m.UpdatedAt) || m3.ProviderID != m.ProviderID || m3.Encoding != m.Encoding {
			t.Fatalf("%s: version 3 reads as %+v, want %+v", tc.name, m3, m)
		}
	}
}

// TestFinalShortID: an id is found again from its creation second and its
// 12-byte short form, at every millisecond of a second (the short form
// keeps the ms mod 1024, which a second's 1,000 ms never repeat), and
// nothing else is taken for it.
func TestFinalShortID(t *testing.T) {
	sec := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for ms := range 1000 {
		id := sms.NewID(sec.Add(time.Duration(ms) * time.Millisecond))
		short := FinalShort(id)
		if len(short) != 12 {
			t.Fatalf("short %q", short)
		}
		got, ok := FinalID(sec.Unix(), short)
		if !ok || got != id {
			t.Fatalf("FinalID(%d, %q) = %q, %v; want %q", sec.Unix(), short, got, ok, id)
		}
		if other, ok := FinalID(sec.Unix()+1, short); ok && other == id {
			t.Fatalf("%s found in the next second", id)
		}
	}
	if FinalShort("msg_short") != "" {
		t.Fatal("a malformed id has a short form")
	}
	for _, bad := range []string{"", "short", "\xff\xff" + strings.Repeat("\x00", 10), strings.Repeat("\x00", 11) + "\xff"} {
		if _, ok := FinalID(sec.Unix(), bad); ok && len(bad) != 12 {
			t.Fatalf("FinalID(%q) ok", bad)
		}
	}
	if _, ok := FinalID(sec.Unix(), "\xff\xff"+strings.Repeat("\x00", 10)); ok {
		t.Fatal("a short form of more than 10 bits of ms decoded")
	}
}

// TestMaskedNumberPacking: packMasked and unpackMasked are inverse for the
// masks of numbers of every length, and a long run is split.
func TestMaskedNumberPacking(t *testing.T) {
	for n := range 40 {
		to := "+" + strings.Repeat("8", n)
		masked := sms.MaskPhone(to)
		packed := packMasked(masked)
		got, err := unpackMasked(packed)
		if err != nil || got != masked {
			t.Fatalf("%q packed %q unpacked %q, %v", masked, packed, got, err)
		}
		if strings.Contains(masked, "***") && len(packed) >= len(masked) {
			t.Fatalf("%q packed to %q: not shorter", masked, packed)
		}
	}
	if _, err := unpackMasked("+81*"); err == nil {
		t.Fatal("a run without its length unpacked")
	}
}
