package state

import (
	"bytes"
	"compress/flate"
	"io"
)

// compactMin is the body size from which a stored answer is compressed.
const compactMin = 512

// CompactAnswer stores a's body DEFLATE-compressed when that makes it
// smaller: a batch answer repeats the same problem for many items, so it
// shrinks many times over, and the store (memory, or Redis) holds that.
func CompactAnswer(a *Answer) *Answer {
	if len(a.Body) < compactMin {
		return a
	}
	var buf bytes.Buffer
	zw, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		return a
	}
	if _, err := zw.Write(a.Body); err != nil || zw.Close() != nil || buf.Len() >= len(a.Body) {
		return a
	}
	c := *a
	c.Body, c.Deflated = buf.Bytes(), true
	return &c
}

// AnswerBody is the body a stored answer replays.
func AnswerBody(a *Answer) ([]byte, error) {
	if !a.Deflated {
		return a.Body, nil
	}
	// A stored body was at most the request's own answer; bound the
	// inflation all the same.
	return io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(a.Body)), 64<<20))
}
