package sms

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	// Quiet hours must not depend on the host's zoneinfo files: a
	// container without them would send marketing at night.
	_ "time/tzdata"

	"github.com/nyaruka/phonenumbers"
)

// Clock is a time of day in minutes after midnight, 0 to 1439.
type Clock int

// ParseClock parses "HH:MM" on a 24-hour clock ("21:00", "08:00").
func ParseClock(s string) (Clock, error) {
	var h, m int
	if len(s) != 5 || s[2] != ':' || !allDigits(s[:2]) || !allDigits(s[3:]) {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	h, m = int(s[0]-'0')*10+int(s[1]-'0'), int(s[3]-'0')*10+int(s[4]-'0')
	if h > 23 || m > 59 {
		return 0, fmt.Errorf("%q is not a time of day (00:00 to 23:59)", s)
	}
	return Clock(h*60 + m), nil
}

func (c Clock) String() string { return fmt.Sprintf("%02d:%02d", int(c)/60, int(c)%60) }

// QuietHours is a daily window of the recipient's local time in which a
// message is not sent: from From (included) to To (excluded), across
// midnight when To is earlier than From.
type QuietHours struct{ From, To Clock }

// NewQuietHours parses a window such as "21:00" to "08:00".
func NewQuietHours(from, to string) (QuietHours, error) {
	f, err := ParseClock(from)
	if err != nil {
		return QuietHours{}, fmt.Errorf("from: %w", err)
	}
	t, err := ParseClock(to)
	if err != nil {
		return QuietHours{}, fmt.Errorf("to: %w", err)
	}
	if f == t {
		return QuietHours{}, errors.New("from and to are equal: the window would be empty or the whole day")
	}
	return QuietHours{From: f, To: t}, nil
}

// quiet reports whether the wall-clock time of local is inside the window.
func (q QuietHours) quiet(local time.Time) bool {
	m := Clock(local.Hour()*60 + local.Minute())
	if q.From < q.To {
		return m >= q.From && m < q.To
	}
	return m >= q.From || m < q.To
}

// holdHorizon bounds the search for the end of a hold: every window ends
// within a day in every zone.
const holdHorizon = 48 * time.Hour

// Until returns when a message to a number in zones may be sent if it
// must not be sent at at: the earliest instant allowed in every zone (the
// strictest rule: held until it is day in all of them). It is zero when at
// itself is allowed. A number whose zones are a day apart or more (a North
// American toll-free number spans Guam to Hawaii) may have no such
// instant: then it goes at the earliest instant allowed in the most zones,
// and at once if that is now.
func (q QuietHours) Until(zones []*time.Location, at time.Time) time.Time {
	if len(zones) == 0 {
		return time.Time{}
	}
	best, most := at, q.allowedIn(zones, at)
	if most == len(zones) {
		return time.Time{}
	}
	for _, t := range q.ends(zones, at) {
		if n := q.allowedIn(zones, t); n > most {
			best, most = t, n
			if n == len(zones) {
				break
			}
		}
	}
	if best.Equal(at) {
		return time.Time{}
	}
	return best
}

func (q QuietHours) allowedIn(zones []*time.Location, t time.Time) int {
	n := 0
	for _, z := range zones {
		if !q.quiet(t.In(z)) {
			n++
		}
	}
	return n
}

// ends lists, in order, the instants after at and within holdHorizon at
// which one of zones may become allowed: those at which its clock reads
// To, and those at which its clock is set forward or back (a clock set
// forward can jump over To, one set back can leave the window). A day
// whose clock skips To has no instant reading it; one whose clock is set
// back may read it twice, and the window then ends at the second.
// time.Date alone would answer one instant for each day, the wrong one on
// such days: the clock of America/Santiago skips 00:00 on the day summer
// time starts, and time.Date gives 23:00 of the day before, an instant
// still inside a window that ends at 00:00, so the hold would last a day
// longer.
func (q QuietHours) ends(zones []*time.Location, at time.Time) []time.Time {
	var out []time.Time
	limit := at.Add(holdHorizon)
	add := func(t time.Time) {
		if t.After(at) && !t.After(limit) {
			out = append(out, t)
		}
	}
	for _, z := range zones {
		l := at.In(z)
		for d := 0; d <= 2; d++ {
			for _, t := range wallInstants(z, l.Year(), l.Month(), l.Day()+d, q.To) {
				add(t)
			}
		}
		for _, t := range offsetChanges(z, at, limit) {
			add(t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
}

// offsetChanges lists the instants in (from, to] at which the clock of z
// is set forward or back.
func offsetChanges(z *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	_, off := from.In(z).Zone()
	for t := from; ; {
		_, end := t.In(z).ZoneBounds()
		// A new zone starts at end; it may keep the offset and change
		// only its name. end is after t, so the loop ends.
		if end.IsZero() || end.After(to) || !end.After(t) {
			return out
		}
		if _, o := end.In(z).Zone(); o != off {
			out = append(out, end)
			off = o
		}
		t = end
	}
}

// wallInstants returns the instants at which the clock of z reads c on
// the given day (normalized as time.Date does): one on most days, none
// when the clock skips c, two when it is set back over c.
func wallInstants(z *time.Location, year int, month time.Month, day int, c Clock) []time.Time {
	wall := time.Date(year, month, day, int(c)/60, int(c)%60, 0, 0, time.UTC)
	// The offsets in use around that day: every instant reading wall is
	// wall shifted by one of them.
	from, to := wall.Add(-26*time.Hour), wall.Add(26*time.Hour)
	_, first := from.In(z).Zone()
	offsets := []int{first}
	for _, t := range offsetChanges(z, from, to) {
		_, o := t.In(z).Zone()
		if !slices.Contains(offsets, o) {
			offsets = append(offsets, o)
		}
	}
	var out []time.Time
	for _, o := range offsets {
		t := wall.Add(-time.Duration(o) * time.Second).In(z)
		if sameWall(t, wall) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// sameWall reports whether t's clock reads what wall's does.
func sameWall(t, wall time.Time) bool {
	y, m, d := t.Date()
	wy, wm, wd := wall.Date()
	return y == wy && m == wm && d == wd && t.Hour() == wall.Hour() && t.Minute() == wall.Minute() && t.Second() == wall.Second()
}

// QuietPolicy holds the quiet hours of each class that has them.
type QuietPolicy map[Class]QuietHours

// Hold returns when m may be sent if it must not be sent at at because it
// is inside its class's quiet hours for its recipient; zero when it may go
// at at. OTP is never held.
func (p QuietPolicy) Hold(m *Message, at time.Time) time.Time {
	q, ok := p[m.Class]
	if !ok || m.Class == ClassOTP {
		return time.Time{}
	}
	return q.Until(TimeZones(m.To), at)
}

// TimeZones returns the time zones of an E.164 number, from
// libphonenumber's prefix data (a mobile number of a country with several
// zones often has all of them); nil when unknown, as for international
// networks (+882, +883).
func TimeZones(number string) []*time.Location {
	names, err := phonenumbers.GetTimezonesForPrefix(number)
	if err != nil {
		return nil
	}
	out := make([]*time.Location, 0, len(names))
	for _, n := range names {
		if l := location(n); l != nil {
			out = append(out, l)
		}
	}
	return out
}

// locations caches time.LoadLocation by name. Names come only from
// libphonenumber's data, a closed set of a few hundred, so the cache is
// bounded.
var locations sync.Map // string → *time.Location (nil: not a zone)

func location(name string) *time.Location {
	if name == phonenumbers.UNKNOWN_TIMEZONE {
		return nil
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		l = nil
	}
	locations.Store(name, l)
	return l
}
