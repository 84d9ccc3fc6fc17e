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
// which the window ends in one of zones: the only instants at which a
// zone becomes allowed.
func (q QuietHours) ends(zones []*time.Location, at time.Time) []time.Time {
	var out []time.Time
	for _, z := range zones {
		l := at.In(z)
		for d := 0; d <= 2; d++ {
			t := time.Date(l.Year(), l.Month(), l.Day()+d, int(q.To)/60, int(q.To)%60, 0, 0, z)
			if t.After(at) && t.Sub(at) <= holdHorizon {
				out = append(out, t)
			}
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
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
