package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/httpapi/fastdecode"
)

// streamBatch reads a batch body ({"messages": [item, ...]}) as a stream,
// token by token, and hands each item's own bytes to each, in order, one
// at a time: the whole body is never held, and the items' checks run as
// they arrive. It refuses, naming the field, what decodeStrict refuses of
// a batch: a member other than "messages" (names are case-sensitive), one
// named twice, anything after the object, "messages" not an array, and
// more than MaxBatch items (it stops reading at the first one too many).
// Each item is checked whole by the caller (decodeStrict through
// checkMessage: UTF-8, its member names, its fields). n is the number of
// items read.
func streamBatch(body io.Reader, each func(i int, item json.RawMessage)) (n int, err error) {
	dec := json.NewDecoder(body)
	tok, err := dec.Token()
	if err != nil {
		return 0, streamError(err)
	}
	if tok != json.Delim('{') {
		return 0, fieldError("request", "must be a JSON object")
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n, streamError(err)
		}
		name, _ := tok.(string)
		switch {
		case name == "messages" && seen:
			return n, fieldError("messages", "appears more than once")
		case name == "messages":
			seen = true
			if n, err = streamItems(dec, each); err != nil {
				return n, err
			}
		case strings.EqualFold(name, "messages"):
			return n, fieldError("request", `is not a known field (names are case-sensitive: "messages")`)
		case fastdecode.PlainToken(name, 64):
			return n, fieldError(name, "is not a known field")
		default:
			return n, fieldError("request", "holds an unknown field")
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return n, streamError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && !isSyntaxError(err) {
			return n, streamError(err)
		}
		return n, fieldError("request", "must be a single JSON object with nothing after it")
	}
	return n, nil
}

// streamItems reads the array of "messages", one item at a time.
func streamItems(dec *json.Decoder, each func(int, json.RawMessage)) (int, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, streamError(err)
	}
	if tok == nil {
		return 0, nil // null: no messages, refused by the count
	}
	if tok != json.Delim('[') {
		return 0, fieldError("messages", "must be an array")
	}
	n := 0
	for dec.More() {
		if n == MaxBatch {
			return n, fieldError("messages", fmt.Sprintf("must hold 1 to %d messages (got more)", MaxBatch))
		}
		var item json.RawMessage
		if err := dec.Decode(&item); err != nil {
			return n, streamError(err)
		}
		each(n, item)
		n++
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return n, streamError(err)
	}
	return n, nil
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// streamError is the answer to a failed read of a streamed body: 413 over
// http.max_body_bytes, 400 for what is not JSON or is cut short, and for a
// body that could not be read.
func streamError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return err
	case isSyntaxError(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return jsonError(err, "")
	}
	return &apiError{Kind: KindInvalid, Detail: "could not read the request body", Fields: []fieldProblem{{"request", "unreadable body"}}, Err: err}
}

// partsHash digests parts one at a time, each as its length, ':' and its
// bytes: the batch digest earlier releases computed over the whole list,
// so an answer stored under an Idempotency-Key still matches its replay.
type partsHash struct{ h hash.Hash }

func newPartsHash() partsHash { return partsHash{h: sha256.New()} }

func (p partsHash) add(part []byte) {
	var n [20]byte
	p.h.Write(strconv.AppendInt(n[:0], int64(len(part)), 10))
	p.h.Write([]byte{':'})
	p.h.Write(part)
}

func (p partsHash) sum() string { return hex.EncodeToString(p.h.Sum(nil)) }

// readBudget keeps http.read_timeout a bound on the client's sending, not
// on our checks: a batch is checked while it is read, so every item's
// check time is added to the read deadline (a slow client gains nothing;
// a busy server does not cut off a client that sent in time).
type readBudget struct {
	rc       *http.ResponseController
	deadline time.Time
}

func newReadBudget(w http.ResponseWriter, timeout time.Duration) *readBudget {
	return &readBudget{rc: http.NewResponseController(w), deadline: time.Now().Add(timeout)}
}

// spend runs check and moves the read deadline on by the time it took.
func (b *readBudget) spend(check func()) {
	t0 := time.Now()
	check()
	b.deadline = b.deadline.Add(time.Since(t0))
	_ = b.rc.SetReadDeadline(b.deadline) // not supported (a handler called without a server): the server's own deadline holds
}
