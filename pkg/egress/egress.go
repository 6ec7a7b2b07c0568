// Package egress dials the URLs tenants choose — webhook targets, MCP
// servers — without letting them turn a jetway service into a proxy into
// the operator's own network: an address that is loopback, link-local
// (the cloud metadata endpoint 169.254.169.254), private, unspecified or
// multicast is refused, checked on the very address the socket connects
// to after resolution, unless the operator allowed its host by name.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenTarget is wrapped by every refusal to connect to an address
// no operator allowed.
var ErrForbiddenTarget = errors.New("target refused")

// thisNetwork is "this host on this network": it reaches the host itself.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// ForbiddenAddr names the kind of address a tenant's URL may not reach
// unless allowed, or "" when ip is an ordinary public address.
func ForbiddenAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case ip.IsUnspecified(), ip.Is4() && thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	return ""
}

// Guard dials, refusing forbidden addresses unless their host name is on
// the operator's allow list.
type Guard struct {
	what, flag string
	allow      map[string]bool
	dialer     net.Dialer
}

// NewGuard is a Guard allowing allowHosts; what names the kind of target
// in its refusals ("webhook") and flag the option that allows a host
// ("--webhook-allow-host").
func NewGuard(allowHosts []string, what, flag string) *Guard {
	g := &Guard{what: what, flag: flag, allow: map[string]bool{},
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	for _, h := range allowHosts {
		if h = NormalHost(h); h != "" {
			g.allow[h] = true
		}
	}
	return g
}

// NormalHost lower-cases a host name and drops brackets and a trailing
// dot; an IP literal is written in its canonical form, so "::1" and
// "0:0:0:0:0:0:0:1" name the same allowed host.
func NormalHost(h string) string {
	h = strings.TrimSuffix(strings.Trim(strings.ToLower(strings.TrimSpace(h)), "[]"), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

// DialContext dials addr ("host:port" as the URL names it). For a host not
// on the allow list, the check runs in the dialer's Control hook, on the
// very address the socket is about to connect to after resolution: a name
// that resolved to a public address when it was looked at and to 127.0.0.1
// when dialled (DNS rebinding) is still refused, as is every address of a
// name that resolves to several.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s dial %s: %w", g.what, addr, err)
	}
	if g.allow[NormalHost(host)] {
		return g.dialer.DialContext(ctx, network, addr)
	}
	d := g.dialer
	d.Control = func(_, address string, _ syscall.RawConn) error {
		h, _, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("%s %w: %s: %v", g.what, ErrForbiddenTarget, address, err)
		}
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return fmt.Errorf("%s %w: %s is not an IP address", g.what, ErrForbiddenTarget, h)
		}
		if kind := ForbiddenAddr(ip); kind != "" {
			return fmt.Errorf("%s %w: %s is a %s address (host %s); an operator may allow the host with %s %s",
				g.what, ErrForbiddenTarget, ip, kind, host, g.flag, host)
		}
		return nil
	}
	return d.DialContext(ctx, network, addr)
}

// Client is an HTTP client whose every dial goes through g: no proxy from
// the environment (a proxy would be dialled instead of the target, and the
// address check would see only the proxy) and no redirects (a 3xx answer
// is returned as it is, so a target cannot send the request elsewhere).
// timeout bounds a whole request; 0 leaves it to the request's context.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: NoRedirects,
	}
}

// NoRedirects is a CheckRedirect that returns a 3xx answer as it is.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
