package sms

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The GSM 7-bit default alphabet of 3GPP TS 23.038 again, typed here in
// Unicode order rather than code order, so a slip in either copy shows up.
const (
	testGSMBasic = "\n\r !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz" +
		"¡£¤¥§¿ÄÅÆÇÉÑÖØÜßàäåæèéìñòöøùüΓΔΘΛΞΠΣΦΨΩ"
	testGSMExt = "\f^{}\\[]~|€"
)

// testUnits counts a body the slow, obvious way, independently of the code
// under test.
func testUnits(s string) (enc Encoding, units int) {
	gsm := true
	for _, r := range s {
		if !strings.ContainsRune(testGSMBasic, r) && !strings.ContainsRune(testGSMExt, r) {
			gsm = false
		}
	}
	for _, r := range s {
		switch {
		case gsm && strings.ContainsRune(testGSMExt, r):
			units += 2
		case gsm:
			units++
		case r > 0xFFFF:
			units += 2
		default:
			units++
		}
	}
	if gsm {
		return GSM7, units
	}
	return UCS2, units
}

func TestGSMTables(t *testing.T) {
	t.Parallel()
	if n := utf8.RuneCountInString(gsmBasic); n != 128 {
		t.Fatalf("gsmBasic has %d characters, want 128", n)
	}
	codes := []rune(gsmBasic)
	for code, want := range map[int]rune{
		0x00: '@', 0x02: '$', 0x09: 'Ç', 0x0A: '\n', 0x0D: '\r', 0x10: 'Δ', 0x11: '_',
		0x15: 'Ω', 0x1F: 'É', 0x24: '¤', 0x40: '¡', 0x5F: '§', 0x60: '¿', 0x7F: 'à',
	} {
		if codes[code] != want {
			t.Errorf("code %#02x = %q, want %q", code, codes[code], want)
		}
	}
	// Every basic character costs one septet, every extension character two.
	for _, r := range testGSMBasic {
		if got := gsmSeptets(r); got != 1 {
			t.Errorf("gsmSeptets(%q) = %d, want 1", r, got)
		}
	}
	for _, r := range testGSMExt {
		if got := gsmSeptets(r); got != 2 {
			t.Errorf("gsmSeptets(%q) = %d, want 2", r, got)
		}
	}
	// And nothing else is in GSM-7: look at the whole BMP and a bit beyond.
	n := 0
	for r := rune(0); r < 0x20000; r++ {
		if gsmSeptets(r) > 0 {
			n++
		}
	}
	if want := utf8.RuneCountInString(testGSMBasic) + utf8.RuneCountInString(testGSMExt); n != want {
		t.Errorf("%d runes are in GSM-7, want %d", n, want)
	}
}

// TestCedilla makes the choice for 0x09 explicit (see gsmBasic): "Ç"
// (U+00C7) is GSM-7, one septet, as in 3GPP TS 23.038 and Twilio's and
// Vonage's tables; "ç" (U+00E7) is not, and one of it turns the whole body
// into UCS-2, however many "Ç" it holds.
func TestCedilla(t *testing.T) {
	t.Parallel()
	rep := strings.Repeat
	for _, tc := range []struct {
		name  string
		body  string
		enc   Encoding
		units int
		count int
	}{
		{"capital alone", "Ç", GSM7, 1, 1},
		{"160 capitals fit one", rep("Ç", 160), GSM7, 160, 1},
		{"161 capitals", rep("Ç", 161), GSM7, 161, 2},
		{"French, capital only", "ÇA VA? Votre code est 123456", GSM7, 28, 1},
		{"small alone", "ç", UCS2, 1, 1},
		{"French, small", "Ça va? Reçu, votre code est 123456", UCS2, 34, 1},
		{"one small in 160", rep("Ç", 159) + "ç", UCS2, 160, 3},
		{"71 small", rep("ç", 71), UCS2, 71, 2},
	} {
		got := CountSegments(tc.body)
		if got.Encoding != tc.enc || got.Units != tc.units || got.Count != tc.count {
			t.Errorf("%s: %+v, want %s, %d units, %d segments", tc.name, got, tc.enc, tc.units, tc.count)
		}
	}
	if gsmSeptets('Ç') != 1 || gsmSeptets('ç') != 0 || []rune(gsmBasic)[0x09] != 'Ç' {
		t.Errorf("0x09: Ç %d septets, ç %d, code 0x09 is %q", gsmSeptets('Ç'), gsmSeptets('ç'), []rune(gsmBasic)[0x09])
	}
}

// seq returns the first n characters of "1234567890" repeated, the filler
// Twilio's message-segment-calculator tests use.
func seq(n int) string { return strings.Repeat("1234567890", n/10+1)[:n] }

func TestCountSegments(t *testing.T) {
	t.Parallel()
	rep := strings.Repeat
	tests := []struct {
		name  string
		body  string
		enc   Encoding
		units int
		parts []int // units of each part, in order
	}{
		{"empty", "", GSM7, 0, nil},
		{"hello", "hello", GSM7, 5, []int{5}},
		{"whole basic set", testGSMBasic, GSM7, 127, []int{127}},
		{"whole extension table", testGSMExt, GSM7, 20, []int{20}},
		{"euro counts two", "€", GSM7, 2, []int{2}},
		{"CRLF is GSM", "a\r\nb", GSM7, 4, []int{4}},

		// Twilio message-segment-calculator vectors (tests/index.test.js,
		// tests/segments.test.js).
		{"twilio: escape in one segment", "{" + seq(159)[1:], GSM7, 160, []int{160}},
		{"twilio: escape in two segments", "{" + seq(160)[1:], GSM7, 161, []int{153, 8}},
		{"twilio: UCS-2 in one segment", "😜" + seq(69)[1:], UCS2, 70, []int{70}},
		{"twilio: UCS-2 in two segments", "😜" + seq(70)[1:], UCS2, 71, []int{67, 4}},
		{"twilio: GSM-7 last segment one char", seq(307), GSM7, 307, []int{153, 153, 1}},
		{"twilio: UCS-2 last segment one char", "😜" + seq(134)[1:], UCS2, 135, []int{67, 67, 1}},

		{"160 GSM", rep("a", 160), GSM7, 160, []int{160}},
		{"161 GSM", rep("a", 161), GSM7, 161, []int{153, 8}},
		{"306 GSM", rep("a", 306), GSM7, 306, []int{153, 153}},
		{"80 euros fit one", rep("€", 80), GSM7, 160, []int{160}},
		{"81 euros", rep("€", 81), GSM7, 162, []int{152, 10}},
		{"escape fits at 153", rep("a", 151) + "€" + rep("b", 10), GSM7, 163, []int{153, 10}},
		// ceil(306/153) = 2, but the escape cannot straddle the boundary.
		{"escape pushed past 153", rep("a", 152) + "€" + rep("b", 152), GSM7, 306, []int{152, 153, 1}},
		{"brace pushed past 153", rep("a", 152) + "{" + rep("b", 7), GSM7, 161, []int{152, 9}},
		{"lone ç flips to UCS-2", rep("a", 159) + "ç", UCS2, 160, []int{67, 67, 26}},
		{"backtick is not GSM", "`", UCS2, 1, []int{1}},
		{"ohm sign is not omega", "\u2126", UCS2, 1, []int{1}},
		{"tab is not GSM", "a\tb", UCS2, 3, []int{3}},

		{"70 kana", rep("あ", 70), UCS2, 70, []int{70}},
		{"71 kana", rep("あ", 71), UCS2, 71, []int{67, 4}},
		{"134 kana", rep("あ", 134), UCS2, 134, []int{67, 67}},
		{"135 kana", rep("あ", 135), UCS2, 135, []int{67, 67, 1}},
		{"japanese sentence", "ご注文ありがとうございます。認証コードは123456です。", UCS2, 29, []int{29}},
		{"emoji is two units", "😀", UCS2, 2, []int{2}},
		{"35 emoji fit one", rep("😀", 35), UCS2, 70, []int{70}},
		{"36 emoji", rep("😀", 36), UCS2, 72, []int{66, 6}},
		// ceil(134/67) = 2, but the surrogate pair cannot straddle the boundary.
		{"surrogate pair pushed past 67", rep("あ", 66) + "😀" + rep("あ", 66), UCS2, 134, []int{66, 67, 1}},
		{"surrogate pair fits at 67", rep("あ", 65) + "😀" + rep("あ", 10), UCS2, 77, []int{67, 10}},
		{"ZWJ family", "👨‍👩‍👧", UCS2, 8, []int{8}},
		{"flag", "🇯🇵", UCS2, 4, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := CountSegments(tt.body)
			if got.Encoding != tt.enc || got.Units != tt.units || got.Count != len(tt.parts) {
				t.Fatalf("CountSegments = %+v, want %s, %d units, %d segments", got, tt.enc, tt.units, len(tt.parts))
			}
			wantPer := map[Encoding][2]int{GSM7: {160, 153}, UCS2: {70, 67}}[tt.enc][min(1, max(0, len(tt.parts)-1))]
			if got.PerSegment != wantPer {
				t.Errorf("PerSegment = %d, want %d", got.PerSegment, wantPer)
			}
			parts := Split(tt.body)
			if len(parts) != len(tt.parts) {
				t.Fatalf("Split gave %d parts, want %d", len(parts), len(tt.parts))
			}
			if strings.Join(parts, "") != tt.body {
				t.Errorf("Split parts do not join back to the body")
			}
			for i, p := range parts {
				// A part is measured in the encoding of the whole body.
				units := unitsIn(p, tt.enc)
				if units != tt.parts[i] {
					t.Errorf("part %d has %d units, want %d", i, units, tt.parts[i])
				}
			}
		})
	}
}

// unitsIn measures s in enc, which may differ from what testUnits would pick
// for s alone (a GSM-only part of a UCS-2 body is still sent as UCS-2).
func unitsIn(s string, enc Encoding) int {
	n := 0
	for _, r := range s {
		switch {
		case enc == GSM7 && strings.ContainsRune(testGSMExt, r):
			n += 2
		case enc == UCS2 && r > 0xFFFF:
			n += 2
		default:
			n++
		}
	}
	return n
}

func FuzzCountSegments(f *testing.F) {
	for _, s := range []string{
		"", "hello", "€", "😀", "あ", "a\r\nb", testGSMBasic + testGSMExt,
		strings.Repeat("a", 152) + "€" + strings.Repeat("b", 152),
		strings.Repeat("あ", 66) + "😀" + strings.Repeat("あ", 66),
		strings.Repeat("a", 159) + "ç", "\xff\xfe", "a\x00b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got := CountSegments(body)
		enc, units := testUnits(body)
		if got.Encoding != enc || got.Units != units {
			t.Fatalf("CountSegments = %+v, want %s with %d units", got, enc, units)
		}
		single, multi := 160, 153
		if enc == UCS2 {
			single, multi = 70, 67
		}
		parts := Split(body)
		if len(parts) != got.Count {
			t.Fatalf("Count %d but Split gave %d parts", got.Count, len(parts))
		}
		if strings.Join(parts, "") != body {
			t.Fatalf("Split parts do not join back to the body")
		}
		switch {
		case body == "":
			if got.Count != 0 {
				t.Fatalf("empty body has Count %d", got.Count)
			}
			return
		case units <= single:
			if got.Count != 1 || got.PerSegment != single {
				t.Fatalf("%d units: got %+v, want one segment of %d", units, got, single)
			}
			return
		}
		if got.PerSegment != multi {
			t.Fatalf("PerSegment = %d, want %d", got.PerSegment, multi)
		}
		sum := 0
		for i, p := range parts {
			n := unitsIn(p, enc)
			sum += n
			if p == "" || n > multi {
				t.Fatalf("part %d has %d units, limit %d", i, n, multi)
			}
			// Greedy: the next character would not have fitted, so no
			// packing uses fewer parts.
			if i+1 < len(parts) {
				r, _ := utf8.DecodeRuneInString(parts[i+1])
				if n+unitsIn(string(r), enc) <= multi {
					t.Fatalf("part %d ends at %d units though %q fits", i, n, r)
				}
			}
		}
		if sum != units {
			t.Fatalf("parts hold %d units, body %d", sum, units)
		}
	})
}

func BenchmarkCountSegments(b *testing.B) {
	for _, bb := range []struct{ name, body string }{
		{"GSM-7/160", strings.Repeat("Your code is 123456. ", 8)[:160]},
		{"UCS-2/70", strings.Repeat("認証コードは１２３４５６です。", 5)[:3*70]},
	} {
		b.Run(bb.name, func(b *testing.B) {
			if s := CountSegments(bb.body); s.Count != 1 || s.Units != map[string]int{"GSM-7/160": 160, "UCS-2/70": 70}[bb.name] {
				b.Fatalf("benchmark body is not one full segment: %+v", s)
			}
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				CountSegments(bb.body)
			}
		})
	}
}
