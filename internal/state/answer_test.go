package state

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestEncodeAnswerAgrees: EncodeAnswer writes what json.Marshal writes,
// and DecodeAnswer reads it back.
func TestEncodeAnswerAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	strs := []string{"", "5d41402abc4b2a76b9719d911017c592", "/v1/messages/01JN5V6Q8Z3X4Y5W6V7U8T9S0R", "a<b", `q"`, `b\`, "é", "\x01", "&"}
	bodies := [][]byte{nil, {}, []byte(`{"id":"x"}` + "\n"), {0, 1, 2, 255}, bytes.Repeat([]byte("ab"), 300)}
	for range 3000 {
		a := &Answer{Hash: strs[rng.IntN(len(strs))], Status: rng.IntN(600) - 50, Body: bodies[rng.IntN(len(bodies))],
			Location: strs[rng.IntN(len(strs))], Deflated: rng.IntN(2) == 0}
		got, err := EncodeAnswer(a)
		want, werr := json.Marshal(a)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s (%v)", a, got, err, want, werr)
		}
		back, err := DecodeAnswer(string(got))
		if err != nil || back.Hash != a.Hash || back.Status != a.Status || !bytes.Equal(back.Body, a.Body) || back.Location != a.Location || back.Deflated != a.Deflated {
			t.Fatalf("%+v read back as %+v (%v)", a, back, err)
		}
	}
}
