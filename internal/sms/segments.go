package sms

// Encoding is the data coding a message is sent in.
type Encoding string

// The two encodings a message can be sent in.
const (
	GSM7 Encoding = "GSM-7" // 3GPP TS 23.038 default alphabet and its extension table
	UCS2 Encoding = "UCS-2" // UTF-16 code units, as providers send it
)

// Per-segment capacity, in septets (GSM-7) or UTF-16 code units (UCS-2). A
// split message carries a 6-octet user data header in every part, which
// costs 7 septets or 3 code units.
const (
	gsm7Single = 160
	gsm7Multi  = 153
	ucs2Single = 70
	ucs2Multi  = 67
)

// Segments describes how a body is sent.
type Segments struct {
	Encoding   Encoding
	Units      int // septets (GSM-7) or UTF-16 code units (UCS-2) of the whole body
	Count      int // number of SMS parts; 0 only for an empty body
	PerSegment int // capacity of each part: 160/70 when Count <= 1, else 153/67
}

// gsmBasic is the GSM 7-bit default alphabet in code order (0x00–0x7F).
// 0x1B is the escape to the extension table, not a character: the NUL put
// there is never treated as encodable.
//
// 0x09 is "Ç", CAPITAL C with cedilla, as 3GPP TS 23.038 (GSM 03.38) has
// it; the small "ç" is not in the alphabet and makes a body UCS-2. Unicode's
// GSM0338.TXT "corrects" 0x09 to the small letter, and some codecs follow
// it, but smsgw never encodes a body itself: it sends the text and the
// provider encodes it, so what counts is what the providers do. Twilio
// falls back to UCS-2 for any character outside GSM-7, and its own segment
// calculator (TwilioDevEd/message-segment-calculator, UnicodeToGSM.ts)
// maps only U+00C7 to 0x09 and counts "ç" as UCS-2; Vonage's
// "Concatenation and Encoding" guide lists "Ç" (not "ç") in the GSM
// standard table, and the Vonage adapter sends type=unicode whenever this
// count says UCS-2, so a "ç" arrives as "ç", not folded into "Ç". Counting
// "ç" as GSM-7 would under-count what Twilio bills and paces (a 160-character
// body with one "ç" is 3 UCS-2 segments, not 1); counting it as UCS-2 can
// only over-count for a provider that folds it into 0x09.
const gsmBasic = "@£$¥èéùìòÇ\nØø\rÅå" +
	"Δ_ΦΓΛΩΠΨΣΘΞ\x00ÆæßÉ" +
	" !\"#¤%&'()*+,-./" +
	"0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNO" +
	"PQRSTUVWXYZÄÖÑÜ§" +
	"¿abcdefghijklmno" +
	"pqrstuvwxyzäöñüà"

// gsmExtension maps the characters of the extension table to their code;
// each is sent as ESC followed by that code, so it costs two septets.
var gsmExtension = map[rune]byte{
	'\f': 0x0A, '^': 0x14, '{': 0x28, '}': 0x29, '\\': 0x2F,
	'[': 0x3C, '~': 0x3D, ']': 0x3E, '|': 0x40, '€': 0x65,
}

// gsmTable holds the septets each character below U+0400 takes in GSM-7, 0
// if it has none; that range covers every GSM character except €.
var gsmTable [0x400]uint8

func init() {
	for _, r := range gsmBasic {
		if r != 0 {
			gsmTable[r] = 1
		}
	}
	for r := range gsmExtension {
		if r != '€' {
			gsmTable[r] = 2
		}
	}
}

// gsmSeptets returns how many septets r takes in GSM-7, or 0 if it has none.
func gsmSeptets(r rune) int {
	if r >= 0 && r < rune(len(gsmTable)) {
		return int(gsmTable[r])
	}
	if r == '€' {
		return 2
	}
	return 0
}

func utf16Units(r rune) int {
	if r >= 0x10000 {
		return 2 // a surrogate pair
	}
	return 1
}

// CountSegments says how body would be sent: GSM-7 when every character is
// in the default alphabet or its extension table, otherwise UCS-2. A split
// message is packed greedily, never cutting an escape sequence or a
// surrogate pair, so Count can exceed ceil(Units/153) (or /67).
// Invalid UTF-8 counts as U+FFFD; ValidateBody rejects it first.
func CountSegments(body string) Segments {
	return segment(body, nil)
}

// Split cuts body into the parts CountSegments counts, in order:
// strings.Join(Split(b), "") == b and len(Split(b)) == CountSegments(b).Count.
func Split(body string) []string {
	var parts []string
	segment(body, func(p string) { parts = append(parts, p) })
	return parts
}

func segment(body string, emit func(string)) Segments {
	gsm := true
	septets, units := 0, 0
	for _, r := range body {
		if gsm {
			if n := gsmSeptets(r); n == 0 {
				gsm = false
			} else {
				septets += n
			}
		}
		units += utf16Units(r)
	}
	s := Segments{Encoding: UCS2, Units: units, PerSegment: ucs2Single}
	cost, multi := utf16Units, ucs2Multi
	if gsm {
		s = Segments{Encoding: GSM7, Units: septets, PerSegment: gsm7Single}
		cost, multi = gsmSeptets, gsm7Multi
	}
	switch {
	case s.Units == 0:
		return s
	case s.Units <= s.PerSegment:
		s.Count = 1
		if emit != nil {
			emit(body)
		}
		return s
	}
	s.PerSegment = multi
	start, used := 0, 0
	for i, r := range body {
		c := cost(r)
		if used+c > multi {
			if emit != nil {
				emit(body[start:i])
			}
			s.Count++
			start, used = i, 0
		}
		used += c
	}
	if emit != nil {
		emit(body[start:])
	}
	s.Count++
	return s
}
