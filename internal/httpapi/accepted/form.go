package accepted

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// An accepted message's stored first answer (a keyed POST /v1/messages)
// is kept in a compact form, not as its JSON: the id and the few fields
// the body is made of, space-separated,
//
//	<id> <status> <class> <segments> <encoding> <estimated_send_at, Unix ms> <send_at or -> <expires_at or ->
//
// (send_at and expires_at as the body writes them). A replay rebuilds
// the body (Marshal) and the Location from it; the form is kept
// only when that rebuild gives the first answer's bytes exactly, checked
// when it is made, so a replay is byte for byte the first answer. About a
// third of the JSON's bytes, and no base64 of them (docs/operations.md,
// "What stays per message").

// acceptedForm is a's compact form, or "" when a is not an accepted
// message's answer the form rebuilds exactly (then the answer is kept as
// it is). It reads the body in Marshal's layout without
// reflection (every keyed accept stores one); any other body, however
// valid, is kept whole.
func acceptedForm(a *state.Answer) string {
	if a.Deflated || a.Form != "" || len(a.Body) == 0 || a.Body[0] != '{' {
		return ""
	}
	r := bodyReader{b: a.Body, ok: true}
	id := r.str(`{"id":"`)
	status := r.str(`,"status":"`)
	class := r.str(`,"class":"`)
	segments := r.num(`,"segments":`)
	encoding := r.str(`,"encoding":"`)
	eta := r.str(`,"estimated_send_at":"`)
	sendAt, expiresAt := none, none
	if r.ok && r.next(`,"send_at":"`) {
		sendAt = r.str("")
	}
	if r.ok && r.next(`,"expires_at":"`) {
		expiresAt = r.str("")
	}
	if !r.ok || string(r.b) != "}" {
		return ""
	}
	t, err := time.Parse(time.RFC3339Nano, string(eta))
	if err != nil || t.Nanosecond()%int(time.Millisecond) != 0 {
		return ""
	}
	buf := make([]byte, 0, len(id)+len(status)+len(class)+len(segments)+len(encoding)+len(sendAt)+len(expiresAt)+28)
	for i, f := range [...][]byte{id, status, class, segments, encoding, nil, sendAt, expiresAt} {
		if i > 0 {
			buf = append(buf, ' ')
		}
		if i == 5 {
			buf = strconv.AppendInt(buf, t.UnixMilli(), 10)
			continue
		}
		if len(f) == 0 || bytes.ContainsAny(f, ` \`) {
			return ""
		}
		buf = append(buf, f...)
	}
	form := string(buf)
	body, loc, err := fromForm(form)
	if err != nil || !bytes.Equal(body, a.Body) || loc != a.Location {
		return ""
	}
	return form
}

// none is an absent time in the form.
var none = []byte("-")

// bodyReader reads an accepted message's body member by member, in
// Marshal's order; ok turns false at the first surprise.
type bodyReader struct {
	b  []byte
	ok bool
}

// next consumes prefix when the rest starts with it.
func (r *bodyReader) next(prefix string) bool {
	if !bytes.HasPrefix(r.b, []byte(prefix)) {
		return false
	}
	r.b = r.b[len(prefix):]
	return true
}

// str consumes prefix (nothing when "") and a string's rest up to its
// closing quote, which it returns.
func (r *bodyReader) str(prefix string) []byte {
	if !r.ok || prefix != "" && !r.next(prefix) {
		r.ok = false
		return nil
	}
	i := bytes.IndexByte(r.b, '"')
	if i < 0 {
		r.ok = false
		return nil
	}
	v := r.b[:i]
	r.b = r.b[i+1:]
	return v
}

// num consumes prefix and the integer that follows.
func (r *bodyReader) num(prefix string) []byte {
	if !r.ok || !r.next(prefix) {
		r.ok = false
		return nil
	}
	i := 0
	for i < len(r.b) && (r.b[i] >= '0' && r.b[i] <= '9' || i == 0 && r.b[i] == '-') {
		i++
	}
	v := r.b[:i]
	r.b = r.b[i:]
	return v
}

// errBadForm: a stored compact form that does not parse.
var errBadForm = errors.New("stored answer: bad compact form")

// fromForm rebuilds an accepted message's body and Location from its form.
func fromForm(form string) (body []byte, loc string, err error) {
	f := strings.Split(form, " ")
	if len(f) != 8 {
		return nil, "", errBadForm
	}
	seg, err1 := strconv.Atoi(f[3])
	ms, err2 := strconv.ParseInt(f[5], 10, 64)
	cls, err3 := sms.ParseClass(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, "", errBadForm
	}
	m := Message{ID: f[0], Status: sms.Status(f[1]), Class: cls, Segments: seg, Encoding: f[4],
		EstimatedSendAt: time.UnixMilli(ms).UTC()}
	for i, dst := range []**time.Time{&m.SendAt, &m.ExpiresAt} {
		if s := f[6+i]; s != "-" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, "", errBadForm
			}
			*dst = &t
		}
	}
	body, err = Marshal(&m)
	return body, Location(m.ID), err
}

// Compact is a with its accepted message's body in the compact form,
// when it rebuilds exactly; a itself otherwise.
func Compact(a *state.Answer) *state.Answer {
	form := acceptedForm(a)
	if form == "" {
		return a
	}
	c := *a
	c.Body, c.Location, c.Form = nil, "", form
	return &c
}

// Expand is a with the body and Location its form rebuilds; a itself
// when it has no form.
func Expand(a *state.Answer) (*state.Answer, error) {
	if a.Form == "" {
		return a, nil
	}
	body, loc, err := fromForm(a.Form)
	if err != nil {
		return nil, err
	}
	c := *a
	c.Body, c.Location, c.Form = body, loc, ""
	return &c, nil
}
