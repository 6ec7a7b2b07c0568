package notifier

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

// ErrForbiddenTarget is wrapped by every refusal to connect to a webhook
// target on a loopback, link-local, private, unspecified or multicast
// address that no operator allowed.
var ErrForbiddenTarget = errors.New("webhook target refused")

// Extra ranges net/netip has no predicate for.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8") // "this host on this network": reaches the host itself
)

// forbiddenAddr names the kind of address a webhook may not reach unless
// allowed, or "" when ip is an ordinary public address. These are where a
// tenant's webhook URL would turn the notifier into a proxy into the
// operator's own network: loopback services, the cloud metadata endpoint
// (169.254.169.254), the cluster's private ranges.
func forbiddenAddr(ip netip.Addr) string {
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

// egressGuard dials webhook targets, refusing forbidden addresses unless
// their host name is on the operator's allow list.
type egressGuard struct {
	allow  map[string]bool
	dialer net.Dialer
}

func newEgressGuard(allowHosts []string) *egressGuard {
	g := &egressGuard{allow: map[string]bool{},
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	for _, h := range allowHosts {
		if h = normalHost(h); h != "" {
			g.allow[h] = true
		}
	}
	return g
}

// normalHost lower-cases a host name and drops brackets and a trailing dot;
// an IP literal is written in its canonical form, so "::1" and
// "0:0:0:0:0:0:0:1" name the same allowed host.
func normalHost(h string) string {
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
func (g *egressGuard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("webhook dial %s: %w", addr, err)
	}
	if g.allow[normalHost(host)] {
		return g.dialer.DialContext(ctx, network, addr)
	}
	d := g.dialer
	d.Control = func(_, address string, _ syscall.RawConn) error {
		h, _, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrForbiddenTarget, address, err)
		}
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return fmt.Errorf("%w: %s is not an IP address", ErrForbiddenTarget, h)
		}
		if kind := forbiddenAddr(ip); kind != "" {
			return fmt.Errorf("%w: %s is a %s address (host %s); an operator may allow the host with --webhook-allow-host %s",
				ErrForbiddenTarget, ip, kind, host, host)
		}
		return nil
	}
	return d.DialContext(ctx, network, addr)
}

// errRedirect marks a 3xx answer: never followed, because following would
// send the body and its signature to wherever the receiver points, another
// host included.
var errRedirect = errors.New("redirects are not followed")

// webhookClient is the HTTP client that posts webhooks: no redirects, no
// proxy from the environment (a proxy would be dialled instead of the
// target and the address check would see only the proxy), every dial
// through the guard.
func webhookClient(timeout time.Duration, allowHosts []string) *http.Client {
	g := newEgressGuard(allowHosts)
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
		CheckRedirect: noRedirects,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
