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
