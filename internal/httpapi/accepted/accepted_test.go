package accepted

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// TestMarshalAcceptedAgrees: Marshal writes what json.Marshal
// writes, on answers as the gateway makes them and on odd ones.
func TestMarshalAcceptedAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 3, 1, 9, 30, 15, 123456789, time.UTC)
	tokyo := time.FixedZone("JST", 9*3600)
	times := []time.Time{now, now.Truncate(time.Millisecond), now.Truncate(time.Second), now.In(tokyo), {},
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), now.In(time.FixedZone("odd", -(3*3600 + 30*60 + 15)))}
	strs := []string{"", "01JN5V6Q8Z3X4Y5W6V7U8T9S0R", "queued", "scheduled", "GSM-7", "UCS-2", "a<b", "a&b", `q"uote`, `back\slash`, "tab\t", "é", "\u2028", "\xff", "~ !"}
	for range 5000 {
		a := randomAccepted(rng, times, strs)
		got, gerr := Marshal(&a)
		want, werr := json.Marshal(&a)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s (%v)", a, got, gerr, want, werr)
		}
	}
	// The common answer takes the short path: no json.Marshal.
	a := Of(&sms.Message{ID: "01JN5V6Q8Z3X4Y5W6V7U8T9S0R", Class: sms.ClassMarketing, Body: "hi"}, now, now)
	if !state.PlainJSON(a.ID) || !a.Class.Valid() || testing.AllocsPerRun(100, func() { _, _ = Marshal(&a) }) > 1 {
		t.Fatal("the common answer does not take the short path")
	}
}

// randomAccepted is an accepted message's answer made of strs and times,
// each field drawn at random (send_at and expires_at half the time).
func randomAccepted(rng *rand.Rand, times []time.Time, strs []string) Message {
	a := Message{
		ID: strs[rng.IntN(len(strs))], Status: sms.Status(strs[rng.IntN(len(strs))]), Class: sms.Class(rng.IntN(4)),
		Segments: rng.IntN(20) - 2, Encoding: strs[rng.IntN(len(strs))], EstimatedSendAt: times[rng.IntN(len(times))],
	}
	if rng.IntN(2) == 0 {
		a.SendAt = &times[rng.IntN(len(times))]
	}
	if rng.IntN(2) == 0 {
		a.ExpiresAt = &times[rng.IntN(len(times))]
	}
	return a
}

// TestAnswerFormRebuildsExactly: an accepted message's stored answer kept
// in its compact form replays the first answer's body and Location byte
// for byte, on answers as the gateway makes them and on odd ones (a form
// that would not rebuild exactly is not made: the answer is kept whole);
// the form keeps well under half the bytes; a batch answer, a deflated one
// or any other body is kept as it is.
func TestAnswerFormRebuildsExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 3, 1, 9, 30, 15, 123456789, time.UTC)
	tokyo := time.FixedZone("JST", 9*3600)
	times := []time.Time{now, now.Truncate(time.Millisecond), now.Truncate(time.Second), now.In(tokyo), {},
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), now.In(time.FixedZone("odd", -(3*3600 + 30*60 + 15)))}
	strs := []string{"msg_01JN5V6Q8Z3X4Y5W6V7U8T9S0R", "queued", "scheduled", "GSM-7", "UCS-2", "a b", "a<b", `q"uote`, "é", ""}
	formed := 0
	for range 5000 {
		a := randomAccepted(rng, times, strs)
		body, err := Marshal(&a)
		if err != nil {
			continue
		}
		first := &state.Answer{Hash: "h", Status: 202, Body: body, Location: Location(a.ID)}
		kept := compactAnswer(first)
		if kept.Form != "" {
			formed++
		}
		raw, err := state.EncodeAnswer(kept)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := state.DecodeAnswer(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		back, err := Expand(stored)
		if err != nil {
			t.Fatalf("%+v: %v", a, err)
		}
		got, err := state.AnswerBody(back)
		if err != nil || !bytes.Equal(got, body) || back.Location != first.Location || back.Status != 202 {
			t.Fatalf("%+v (form %q):\n got %s %q (%v)\nwant %s %q", a, kept.Form, got, back.Location, err, body, first.Location)
		}
	}
	if formed < 100 {
		t.Errorf("only %d of 5000 answers kept in the compact form", formed)
	}

	// The common answer: an immediate send, and a scheduled one with a TTL.
	for _, m := range []*sms.Message{
		{ID: sms.NewID(now), Class: sms.ClassTransactional, Body: "Your order has shipped and will arrive tomorrow between 9:00 and 12:00."},
		{ID: sms.NewID(now), Class: sms.ClassMarketing, Body: "Spring sale", SendAt: now.Add(time.Hour).Truncate(time.Second), ExpiresAt: now.Add(3 * time.Hour)},
	} {
		body, err := Marshal(new(Of(m, now.Add(time.Second), now)))
		if err != nil {
			t.Fatal(err)
		}
		first := &state.Answer{Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Status: 202, Body: body, Location: Location(m.ID)}
		whole, _ := state.EncodeAnswer(first)
		compact, _ := state.EncodeAnswer(compactAnswer(first))
		if compactAnswer(first).Form == "" || 2*len(compact) > len(whole) {
			t.Errorf("stored %d bytes for the %d-byte answer %s, was %d", len(compact), len(body), body, len(whole))
		}
		t.Logf("stored answer: %d B whole, %d B compact: %s", len(whole), len(compact), compact)
	}

	for _, body := range []string{`{"accepted":2,"results":[]}`, `[]`, ``} {
		a := &state.Answer{Hash: "h", Status: 200, Body: []byte(body)}
		if got := compactAnswer(a); got.Form != "" || !bytes.Equal(got.Body, a.Body) {
			t.Errorf("body %q kept as %+v", body, got)
		}
	}
}

// compactAnswer is how the answer store keeps an answer: its compact
// form when it has one, else deflated when that is smaller.
func compactAnswer(a *state.Answer) *state.Answer {
	if c := Compact(a); c != a {
		return c
	}
	return state.CompactAnswer(a)
}
