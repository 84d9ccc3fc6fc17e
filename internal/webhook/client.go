package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrRefusedAddress is wrapped by every connection refused because its
// address is private, loopback, link-local, unspecified or multicast and
// not in the allowed networks.
var ErrRefusedAddress = errors.New("webhook: destination address not allowed")

// special are ranges no callback may reach unless allowed: besides what
// netip's predicates name, carrier-grade NAT, IETF protocol assignments,
// benchmarking, reserved and broadcast.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated; "::7f00:1" is 127.0.0.1 to some stacks)
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215): the operator's own translation
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001::/32"),      // Teredo: an obfuscated IPv4 address inside
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated, still routed inside some networks)
}

// nat64 is the well-known NAT64 prefix: its addresses embed an IPv4 one,
// which is checked instead; sixToFour (6to4) embeds one in bits 16–47.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Refused reports whether a connection to a is refused with allow as the
// allowed networks.
func Refused(a netip.Addr, allow []netip.Prefix) bool {
	a = a.Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return false
		}
	}
	if nat64.Contains(a) {
		b := a.As16()
		return Refused(netip.AddrFrom4([4]byte(b[12:])), allow)
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		return Refused(netip.AddrFrom4([4]byte(b[2:6])), allow)
	}
	if a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsValid() {
		return true
	}
	for _, p := range special {
		if p.Contains(a) {
			return true
		}
	}
	return a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// maxRedirects bounds the same-host redirects a delivery follows.
const maxRedirects = 3

// maxResponseHeader bounds the headers of an endpoint's answer, of which
// only the status is used: net/http would read up to 10 MiB per delivery
// in flight.
const maxResponseHeader = 64 << 10

// NewClient is the HTTP client of deliveries. The address is checked when
// the connection is made (net.Dialer.Control sees the resolved IP), so a
// name that resolves to a private address, or starts to (DNS rebinding),
// is refused whatever it resolved to before. No proxy from the environment
// is used (a proxy would connect on our behalf, unchecked). Redirects are
// followed only to the same scheme and host, at most maxRedirects.
func NewClient(timeout time.Duration, allow []netip.Prefix) *http.Client {
	d := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: unparsable address", ErrRefusedAddress)
			}
			if Refused(ap.Addr(), allow) {
				return ErrRefusedAddress
			}
			return nil
		},
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: maxResponseHeader,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect is followed only when it keeps the POST and its body
		// (307, 308: a 301, 302 or 303 turns it into a GET without one,
		// whose 2xx would count as delivered), to the same scheme and host;
		// any other is answered by the 3xx itself, a failed attempt.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects || req.Method != via[0].Method ||
				req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}

// ParseNetworks parses CIDRs (webhooks.allow_networks; validated by the
// configuration already).
func ParseNetworks(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// refusedErr reports whether err is a refused destination.
func refusedErr(err error) bool { return errors.Is(err, ErrRefusedAddress) }

// timeoutErr reports whether err is a timeout.
func timeoutErr(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
