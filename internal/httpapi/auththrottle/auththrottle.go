// Package auththrottle throttles failed authentications per client address.
package auththrottle

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// Failed authentications are throttled per client address (as the HTTP edge resolves it: the
// peer, or the right-most untrusted X-Forwarded-For hop behind a trusted
// proxy): each address may fail Burst times at once and then once
// per authFailInterval; past that it is answered 429 with Retry-After
// instead of 401, and nothing is logged. A valid key is never throttled.
// The table is this process's, bounded by authFailMaxAddrs.
//
// An IPv6 client is one address per /64 (authFailV6Bits): a single host
// is handed a whole /64 and can pick a new source address for every
// request, which would give it a fresh budget each time and, past
// authFailMaxAddrs, flush every other address's entry out of the table.
const (
	// authFailV6Bits is the IPv6 prefix that counts as one client: the
	// /64 a host or a home network gets (RFC 6177, RFC 7421).
	authFailV6Bits   = 64
	Burst            = 10
	authFailInterval = time.Second
	authFailMaxAddrs = 10_000
	// authLogEvery is the most often a failed authentication is logged
	// (per process); the line says how many were left out since the last.
	authLogEvery = time.Second
)

// Table is the table of failed authentications per client address.
type Table struct {
	now func() time.Time

	mu   sync.Mutex
	tats map[string]time.Time // per address: the GCRA's theoretical arrival time

	logMu      sync.Mutex
	lastLog    time.Time
	suppressed int
}

// New is an empty failed-authentication table read through now.
func New(now func() time.Time) *Table {
	return &Table{now: now, tats: map[string]time.Time{}}
}

// Fail charges one failed authentication to addr and returns 0 when it may
// be answered (401), else how long until addr may fail again.
func (a *Table) Fail(addr string) time.Duration {
	addr = Client(addr)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	tat := a.tats[addr]
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(authFailInterval)
	if allowAt := next.Add(-Burst * authFailInterval); allowAt.After(now) {
		return allowAt.Sub(now) // refused: nothing stored
	}
	if _, ok := a.tats[addr]; !ok && len(a.tats) >= authFailMaxAddrs {
		a.prune(now)
	}
	a.tats[addr] = next
	return 0
}

// prune drops the addresses whose budget is whole again and, if the table
// is still full, arbitrary others: a dropped address only gets its budget
// back early. Callers hold mu.
func (a *Table) prune(now time.Time) {
	for k, t := range a.tats {
		if !t.After(now) {
			delete(a.tats, k)
		}
	}
	for k := range a.tats {
		if len(a.tats) < authFailMaxAddrs*7/8 {
			break
		}
		delete(a.tats, k)
	}
}

// SampleLog reports whether this failure may be logged, and how many were
// left out before it.
func (a *Table) SampleLog() (bool, int) {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	now := a.now()
	if now.Sub(a.lastLog) < authLogEvery {
		a.suppressed = min(a.suppressed+1, math.MaxInt32)
		return false, 0
	}
	n := a.suppressed
	a.lastLog, a.suppressed = now, 0
	return true, n
}

// Client is the table's key for a client address: an IPv6
// address's /64 (an IPv4-mapped one is its IPv4 address), any other text
// as it is.
func Client(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if !ip.Is6() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(authFailV6Bits)
	if err != nil {
		return addr
	}
	return p.String()
}
